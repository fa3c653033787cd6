"""Registrations after they exist: the attendee write (corrections and the partner sync
share it), the reads (masked unless the caller may see PII) and the counts. The state
machine and archiving are `states`; the reasoned commands are `corrections`.

Search (`q`) matches an exact barcode, and then by what the actor may see: with
`registration:pii`, any part of a name or an email; without it, a WHOLE name only (the
same letters, case aside), never a part of one or an email. A masked reader can thus
check a name it already knows but cannot rebuild one letter at a time, nor probe
whether an address is registered.

Changing an attendee's address retries the mails that failed for that attendee
alone (`arming.retry_failed_mails`). Lock order: the registration row, then scheduler
rows. `version` is bumped by every write and checked against If-Match when sent;
every write is audited.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import RegistrationState
from events_svc.ports import PartnerDirectory
from events_svc.verbs import partners
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.facts import record_registration_facts
from events_svc.verbs.mail import retry_failed_mails
from events_svc.verbs.pii import mask_registration
from events_svc.verbs.registrations.revisions import write_revision

State = RegistrationState

_READ_MANY = "SELECT * FROM event.registration_view r WHERE r.id = ANY($1::uuid[])"
_GET = """
SELECT * FROM event.registration_view r
WHERE r.id = $1 AND event.visible_to(r.company_id, $2)
"""
_LIST = """
SELECT * FROM event.registration_view r
WHERE ($1::uuid IS NULL OR r.event_id = $1)
  AND ($9::uuid IS NULL OR (r.sale_order_id = $9
       -- an order is the company's own: a company reads its own order of that id, not
       -- another company's of the same id on a shared event
       AND ($2::uuid IS NULL OR (SELECT x.sale_order_company_id FROM event.registrations x
                                 WHERE x.id = r.id) = $2)))
  AND event.visible_to(r.company_id, $2)
  AND ($3::text IS NULL OR r.state = $3)
  AND ($4::boolean IS NULL OR r.active = $4)
  AND ($5::text IS NULL OR r.barcode = $10
       OR ($11 AND (r.name ILIKE '%' || $5 || '%' OR r.email ILIKE '%' || $5 || '%'))
       OR (NOT $11 AND lower(r.name) = lower(btrim($10))))
  AND ($6::text IS NULL OR r.barcode = $6)
  AND ($7::uuid IS NULL OR r.id > $7)
ORDER BY r.id LIMIT $8
"""
_COUNT = """
SELECT e.id AS event_id, count(r.id) AS total,
    count(r.id) FILTER (WHERE r.active AND r.state = 'draft') AS draft,
    count(r.id) FILTER (WHERE r.active AND r.state = 'open') AS open,
    count(r.id) FILTER (WHERE r.active AND r.state = 'done') AS done,
    count(r.id) FILTER (WHERE r.active AND r.state = 'cancel') AS cancel,
    count(r.id) FILTER (WHERE NOT r.active) AS archived
FROM event.events e
LEFT JOIN event.registrations r ON r.event_id = e.id
WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
GROUP BY e.id
"""
_FIND = """
SELECT event_id, event_slot_id, event_ticket_id FROM event.registrations r
WHERE r.id = $1 AND event.visible_to(r.company_id, $2)
"""
_LOCK_REGISTRATION = """
SELECT id, event_id, state::text AS state, active, version, date_closed, name, email, phone,
    company_name, partner_id, event_slot_id, event_ticket_id, sale_order_id,
    sale_status::text AS sale_status, state_origin::text AS state_origin, hold_expires_at
FROM event.registrations WHERE id = $1
FOR NO KEY UPDATE  -- after the event (and slot, ticket) rows: the fixed lock order
"""
_SET_ATTENDEE = """
UPDATE event.registrations SET name = $2, email = $3, phone = $4, company_name = $5,
    partner_id = $6, date_closed = $7, version = version + 1, updated_at = $8
WHERE id = $1
"""
_SYNC_REASON = "filled from the partner directory"


async def find_registration(conn: Connection, actor: Actor, registration_id: UUID) -> Any:
    """{event_id, event_slot_id, event_ticket_id} of a registration the actor may see
    (unlocked: the caller locks the event first); `NotFound` otherwise."""
    found = await conn.fetchrow(_FIND, registration_id, actor.company_id)
    if found is None:
        raise errors.NotFound("No such registration.")
    return found


async def lock_registration(conn: Connection, registration_id: UUID) -> dict[str, Any]:
    """The registration row, locked (after its event, slot and ticket rows)."""
    return dict(must(await conn.fetchrow(_LOCK_REGISTRATION, registration_id)))


async def read_many(conn: Connection, ids: list[UUID]) -> list[dict[str, Any]]:
    """Full views of the given registrations, in the order of `ids`."""
    rows = {r["id"]: dict(r) for r in await conn.fetch(_READ_MANY, ids)}
    return [rows[i] for i in ids]


def _view(row: dict[str, Any], pii_full: bool) -> dict[str, Any]:
    return row if pii_full else mask_registration(row)


async def _audit_pii_read(
    conn: Connection,
    actor: Actor,
    event_id: UUID | None,
    count: int,
    sale_order_id: UUID | None = None,
) -> None:
    summary: dict[str, Any] = {"rows": count}
    if sale_order_id is not None:
        summary["sale_order_id"] = str(sale_order_id)
    await write_audit(
        conn,
        actor,
        "registration_pii_read",
        "registration",
        None,
        event_id=event_id,
        summary=summary,
    )


async def get_registration_state(pool: Pool, actor: Actor, registration_id: UUID) -> dict[str, Any]:
    """{id, event_id, state, sale_status, active, version} of one registration: the
    derived pair a host reads, without attendee data."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_GET, registration_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such registration.")
    keys = ("id", "event_id", "state", "sale_status", "active", "version")
    return {k: row[k] for k in keys}


async def count_registrations(pool: Pool, actor: Actor, event_id: UUID) -> dict[str, Any]:
    """{total, by_state, archived} of an event the actor may see: counts, no attendee data."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_COUNT, event_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such event.")
    states = ("draft", "open", "done", "cancel")
    return {
        "event_id": row["event_id"],
        "total": row["total"],
        "by_state": {k: row[k] for k in states},
        "archived": row["archived"],
    }


async def get_registration(
    pool: Pool, actor: Actor, registration_id: UUID, *, pii_full: bool = False
) -> dict[str, Any]:
    """One registration, masked unless `pii_full` (a full read is audited)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_GET, registration_id, actor.company_id)
        if row is None:
            raise errors.NotFound("No such registration.")
        if pii_full:
            await write_audit(
                conn,
                actor,
                "registration_pii_read",
                "registration",
                registration_id,
                event_id=row["event_id"],
            )
    return _view(dict(row), pii_full)


async def list_registrations(
    pool: Pool,
    actor: Actor,
    event_id: UUID | None,
    *,
    sale_order_id: UUID | None = None,
    state: State | None = None,
    active: bool | None = None,
    q: str | None = None,
    barcode: str | None = None,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """An event's (or a sale order's, or both) registrations by id (keyset), masked
    unless `pii_full` (audited); `q` as the module says (parts of names and emails only
    for an actor with `registration:pii`)."""
    if event_id is None and sale_order_id is None:
        raise errors.ValidationFailed("Name the event, the sale order, or both.", field="event_id")
    size = clamp_limit(limit)
    _, after = decode_cursor(cursor, UUID)
    like = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") if q else None
    async with transaction(pool) as conn:
        rows = await conn.fetch(
            _LIST,
            event_id,
            actor.company_id,
            state,
            active,
            like,
            barcode,
            after,
            size + 1,
            sale_order_id,
            q,
            actor.has("registration:pii"),
        )
        items = [dict(r) for r in rows]
        if pii_full and items:
            await _audit_pii_read(conn, actor, event_id, min(len(items), size), sale_order_id)
    return page([_view(i, pii_full) for i in items], size, "id")


_AUDIT_VERBS = {
    "correct": "registration_corrected",
    "sync_from_partner": "registration_synced_from_partner",
}


async def write_attendee(
    conn: Connection,
    actor: Actor,
    reg: dict[str, Any],
    changes: dict[str, Any],
    event_id: UUID,
    now: datetime,
    verb: str,
    reason: str,
) -> dict[str, Any]:
    """Write the attendee fields that differ on the locked row `reg`: version bumped, one
    revision (`verb`, `reason`, before/after) and one audit row (field names); nothing at
    all when nothing differs."""
    changed = sorted(k for k, v in changes.items() if reg[k] != v)
    if changed:
        new = {**reg, **changes}
        await conn.execute(
            _SET_ATTENDEE,
            reg["id"],
            new["name"],
            new["email"],
            new["phone"],
            new["company_name"],
            new["partner_id"],
            new["date_closed"],
            now,
        )
        diff = {k: (reg[k], changes[k]) for k in changed}
        await write_revision(conn, actor, reg["id"], reg["version"] + 1, verb, reason, diff, now)
        # field names only: the values are PII
        await write_audit(
            conn,
            actor,
            _AUDIT_VERBS[verb],
            "registration",
            reg["id"],
            event_id=event_id,
            summary={"fields": changed},
        )
        if {"email", "phone"}.intersection(changed):  # a new address: failed mails retried
            await retry_failed_mails(conn, event_id, reg["id"], reg["event_slot_id"], now)
    return (await read_many(conn, [reg["id"]]))[0]


async def sync_from_partner(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    directory: PartnerDirectory,
    now: datetime,
) -> dict[str, Any]:
    """Fill EMPTY identity fields from the linked partner's contact; never overwrite."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_GET, registration_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such registration.")
    if row["partner_id"] is None:
        raise errors.RegistrationHasNoPartner()
    contact = await partners.answered(partners.ask(directory, row["partner_id"]))  # no lock held
    if contact is None:
        raise errors.PartnerNotFound(partner_id=str(row["partner_id"]))
    async with transaction(pool) as conn:
        reg = await lock_registration(conn, registration_id)
        fills = {
            k: getattr(contact, k)
            for k in ("name", "email", "phone", "company_name")
            if not reg[k] and getattr(contact, k)
        }
        written = await write_attendee(
            conn, actor, reg, fills, row["event_id"], now, "sync_from_partner", _SYNC_REASON
        )
        if fills:  # the integrators hear of it as of a correction
            changed = {"changed": sorted(fills)}
            await record_registration_facts(
                conn, "registration.updated", [registration_id], now, changed
            )
        return written
