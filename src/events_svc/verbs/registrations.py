"""Registrations after they exist: the state machine, archiving, attendee edits,
the partner sync, and the reads (masked unless the caller may see PII).

Every state change goes through `transition()`: the four verbs (`confirm`,
`set_draft`, `set_done`, `cancel`) move between `draft`, `open` and `done` freely and
into `cancel`; a cancelled registration leaves `cancel` only through reactivation
(409 `use_reactivate`), and nothing enters `open` on a cancelled event. A change that
makes the row hold a seat (`event.holds_seat`, asked of the database) re-checks seats
under the locks; entering `open` from `draft` or `cancel` arms the schedulers
(re-confirming an open row, and `open -> done`, never do); `done` stamps
`date_closed` when it is empty. Changing an attendee's address retries the mails
that failed for that attendee alone (`arming.retry_failed_mails`). Lock order: event
row, then slot and ticket rows when seats are re-checked, then the registration row,
then scheduler rows.
`version` is bumped by every write and checked against If-Match when sent;
every write is audited.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import REGISTRATION_WRITABLE, RegistrationPatch, RegistrationState
from events_svc.ports import PartnerDirectory
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_if_match, clamp_limit, decode_cursor, page
from events_svc.verbs.mail.arming import arm_entering_open, retry_failed_mails
from events_svc.verbs.pii import mask_registration
from events_svc.verbs.seats import ensure_seats

State = RegistrationState
# whether a change makes a row hold a seat, or become one the scheduler mails: the two
# rules asked of their one definition
_ENTERING = """
SELECT event.holds_seat($3::event.registration_state, $4)
       AND NOT event.holds_seat($1::event.registration_state, $2) AS takes_seat,
       event.gets_mail($3::event.registration_state, $4)
       AND NOT event.gets_mail($1::event.registration_state, $2) AS gets_mail
"""

_READ_MANY = "SELECT * FROM event.registration_view r WHERE r.id = ANY($1::uuid[])"
_GET = """
SELECT * FROM event.registration_view r
WHERE r.id = $1 AND event.visible_to(r.company_id, $2)
"""
_LIST = """
SELECT * FROM event.registration_view r
WHERE r.event_id = $1
  AND event.visible_to(r.company_id, $2)
  AND ($3::text IS NULL OR r.state = $3)
  AND ($4::boolean IS NULL OR r.active = $4)
  AND ($5::text IS NULL OR r.barcode = $5 OR r.name ILIKE '%' || $5 || '%'
       OR r.email ILIKE '%' || $5 || '%')
  AND ($6::text IS NULL OR r.barcode = $6)
  AND ($7::uuid IS NULL OR r.id > $7)
ORDER BY r.id LIMIT $8
"""
_FIND = """
SELECT event_id, event_slot_id, event_ticket_id FROM event.registrations r
WHERE r.id = $1 AND event.visible_to(r.company_id, $2)
"""
_LOCK_EVENT = """
SELECT id, seats_limited, seats_max, is_multi_slots, kanban_state::text AS kanban_state
FROM event.events WHERE id = $1
FOR NO KEY UPDATE  -- first in the lock order: serialises seat takers of this event
"""
_LOCK_SLOT = "SELECT id FROM event.slots WHERE id = $1 FOR NO KEY UPDATE"
_LOCK_TICKET = "SELECT id, seats_max FROM event.tickets WHERE id = $1 FOR NO KEY UPDATE"
_LOCK_REGISTRATION = """
SELECT id, state::text AS state, active, version, date_closed, name, email, phone,
    company_name, partner_id, event_slot_id
FROM event.registrations WHERE id = $1 FOR NO KEY UPDATE
"""
_SET_STATE = """
UPDATE event.registrations SET state = $2::event.registration_state,
    date_closed = CASE WHEN $2 = 'done' THEN coalesce(date_closed, $3) ELSE date_closed END,
    version = version + 1, updated_at = $3
WHERE id = $1
"""
_SET_ACTIVE = """
UPDATE event.registrations SET active = $2, version = version + 1, updated_at = $3 WHERE id = $1
"""
_SET_ATTENDEE = """
UPDATE event.registrations SET name = $2, email = $3, phone = $4, company_name = $5,
    partner_id = $6, date_closed = $7, version = version + 1, updated_at = $8
WHERE id = $1
"""
_VERBS: dict[State, str] = {
    "open": "registration_confirmed",
    "draft": "registration_set_draft",
    "done": "registration_set_done",
    "cancel": "registration_cancelled",
}
_FENCED = tuple(f for f in RegistrationPatch.model_fields if f not in REGISTRATION_WRITABLE)


async def read_many(conn: Connection, ids: list[UUID]) -> list[dict[str, Any]]:
    """Full views of the given registrations, in the order of `ids`."""
    rows = {r["id"]: dict(r) for r in await conn.fetch(_READ_MANY, ids)}
    return [rows[i] for i in ids]


def _view(row: dict[str, Any], pii_full: bool) -> dict[str, Any]:
    return row if pii_full else mask_registration(row)


async def _audit_pii_read(conn: Connection, actor: Actor, event_id: UUID, count: int) -> None:
    await write_audit(
        conn,
        actor,
        "registration_pii_read",
        "registration",
        None,
        event_id=event_id,
        summary={"rows": count},
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
    event_id: UUID,
    *,
    state: State | None = None,
    active: bool | None = None,
    q: str | None = None,
    barcode: str | None = None,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """An event's registrations by id (keyset), masked unless `pii_full` (audited)."""
    size = clamp_limit(limit)
    _, after = decode_cursor(cursor, UUID)
    like = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") if q else None
    async with transaction(pool) as conn:
        rows = await conn.fetch(
            _LIST, event_id, actor.company_id, state, active, like, barcode, after, size + 1
        )
        items = [dict(r) for r in rows]
        if pii_full and items:
            await _audit_pii_read(conn, actor, event_id, min(len(items), size))
    return page([_view(i, pii_full) for i in items], size, "id")


async def _locked(
    conn: Connection, actor: Actor, registration_id: UUID, *, seats: bool
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """Lock event, then (for seat re-checks) slot and ticket, then the registration."""
    found = await conn.fetchrow(_FIND, registration_id, actor.company_id)
    if found is None:
        raise errors.NotFound("No such registration.")
    event = dict(must(await conn.fetchrow(_LOCK_EVENT, found["event_id"])))
    ticket = None
    if seats:
        if found["event_slot_id"] is not None:
            await conn.fetchrow(_LOCK_SLOT, found["event_slot_id"])
        if found["event_ticket_id"] is not None:
            ticket = dict(must(await conn.fetchrow(_LOCK_TICKET, found["event_ticket_id"])))
    reg = dict(must(await conn.fetchrow(_LOCK_REGISTRATION, registration_id)))
    reg["event_slot_id"] = found["event_slot_id"]
    return event, ticket, reg


def _check_way_out(event: dict[str, Any], current: State, target: State) -> None:
    """A cancelled registration leaves `cancel` only through reactivation; nothing enters
    `open` on a cancelled event (kanban `cancel` fences every way in)."""
    if current == "cancel":
        raise errors.UseReactivate()
    if target == "open" and event["kanban_state"] == "cancel":
        raise errors.EventCancelled()


async def _entering(
    conn: Connection, before: tuple[str, bool], after: tuple[str, bool]
) -> tuple[bool, bool]:
    """(the change makes the row hold a seat, the change makes it one the scheduler mails)."""
    row = must(await conn.fetchrow(_ENTERING, *before, *after))
    return bool(row["takes_seat"]), bool(row["gets_mail"])


async def transition(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    target: State,
    now: datetime,
    *,
    if_match: int | None = None,
) -> dict[str, Any]:
    """The one registration state transition (locks: event, slot, ticket, registration)."""
    async with transaction(pool) as conn:
        event, ticket, reg = await _locked(conn, actor, registration_id, seats=True)
        check_if_match(reg["version"], if_match, name="version")
        current = reg["state"]
        if current != target:
            _check_way_out(event, current, target)
            active = reg["active"]
            takes_seat, _ = await _entering(conn, (current, active), (target, active))
            if takes_seat:
                await ensure_seats(conn, event, reg["event_slot_id"], ticket, 1)
            await conn.execute(_SET_STATE, registration_id, target, now)
            if target == "open" and current in ("draft", "cancel") and reg["active"]:
                await arm_entering_open(conn, event["id"], [registration_id], now)
            summary = {"from": current, "to": target}
            await write_audit(
                conn,
                actor,
                _VERBS[target],
                "registration",
                registration_id,
                event_id=event["id"],
                summary=summary,
            )
        return (await read_many(conn, [registration_id]))[0]


async def set_active(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    active: bool,
    now: datetime,
    *,
    if_match: int | None = None,
) -> dict[str, Any]:
    """Archive (leave seats and mail eligibility) or unarchive (re-checks seats, and arms
    the schedulers like a row entering `open`: the mails it missed are owed)."""
    async with transaction(pool) as conn:
        event, ticket, reg = await _locked(conn, actor, registration_id, seats=active)
        check_if_match(reg["version"], if_match, name="version")
        if reg["active"] != active:
            state = reg["state"]
            takes_seat, gets_mail = await _entering(conn, (state, not active), (state, active))
            if takes_seat:
                await ensure_seats(conn, event, reg["event_slot_id"], ticket, 1)
            await conn.execute(_SET_ACTIVE, registration_id, active, now)
            if gets_mail:
                # eligible again: the mails it missed are owed (its date_open is kept)
                await arm_entering_open(conn, event["id"], [registration_id], now, stamped=True)
            verb = "registration_unarchived" if active else "registration_archived"
            await write_audit(
                conn,
                actor,
                verb,
                "registration",
                registration_id,
                event_id=event["id"],
                summary={"state": reg["state"]},
            )
        return (await read_many(conn, [registration_id]))[0]


async def patch_registration(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    cmd: RegistrationPatch,
    now: datetime,
    *,
    if_match: int | None = None,
) -> dict[str, Any]:
    """Write attendee fields only; every other field is `field_not_writable`."""
    for name in _FENCED:
        if name in cmd.model_fields_set:
            raise errors.FieldNotWritable(f"{name} is not writable here.", field=name)
    changes = cmd.given()
    for name in ("name", "email", "phone", "company_name"):
        if name in changes and changes[name] is None:
            changes[name] = ""
    async with transaction(pool) as conn:
        found = await conn.fetchrow(_FIND, registration_id, actor.company_id)
        if found is None:
            raise errors.NotFound("No such registration.")
        reg = dict(must(await conn.fetchrow(_LOCK_REGISTRATION, registration_id)))
        check_if_match(reg["version"], if_match, name="version")
        return await _write_attendee(
            conn, actor, reg, changes, found["event_id"], now, "registration_updated"
        )


async def _write_attendee(
    conn: Connection,
    actor: Actor,
    reg: dict[str, Any],
    changes: dict[str, Any],
    event_id: UUID,
    now: datetime,
    verb: str,
) -> dict[str, Any]:
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
        # field names only: the values are PII
        await write_audit(
            conn,
            actor,
            verb,
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
    contact = await directory.contact(row["partner_id"])  # no I/O while holding locks
    if contact is None:
        raise errors.PartnerNotFound(partner_id=str(row["partner_id"]))
    async with transaction(pool) as conn:
        reg = dict(must(await conn.fetchrow(_LOCK_REGISTRATION, registration_id)))
        fills = {
            k: getattr(contact, k)
            for k in ("name", "email", "phone", "company_name")
            if not reg[k] and getattr(contact, k)
        }
        return await _write_attendee(
            conn, actor, reg, fills, row["event_id"], now, "registration_synced_from_partner"
        )
