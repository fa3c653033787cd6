"""Joining a waiting list, an entry's status by its link, and an event's list for
operators.

A join goes through the intake's door (`public.check_admitted`: by event id a published,
open event; by a private intake link an unpublished one too), then:

- 409 `waitlist_disabled` when the event keeps no list;
- the register verb's own refusals for its scope (`registrations.assess_queue_place`:
  slot, ticket, cancelled event, sale window, per-order cap);
- 409 `waitlist_not_needed` when the intake would take the request now and nobody
  waits in its scopes (register instead);
- 409 `waitlist_already_joined` when the address already waits (or holds an offer) for
  the same event, ticket and slot: the partial unique index decides, so two concurrent
  joins of one person leave one entry.

A join holds the event row in share mode (joins run side by side) and reads seats: the
intake and the offer pass decide under the event lock, so what a join reads never costs a
seat. When seats are free while others wait (the pass has not served them yet), the join
wakes the offer pass; a write that frees seats cannot run across a join (it locks the
event row for update), so it either sees the new entry and wakes the pass itself, or
the join sees the seat it freed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc import capabilities, errors
from events_svc.actors import Actor
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connection, must, transaction
from events_svc.links import waitlist_token
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, in_zone, page
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.public import PUBLIC_INTAKE, check_admitted, intake_key
from events_svc.verbs.registrations import assess_queue_place
from events_svc.verbs.waitlist.records import (
    entry_view,
    list_rows,
    live_counts,
    position_of,
    read_entry,
)

# the offer pass LISTENs here (the `registrations_wake_waitlist` trigger NOTIFYs it too)
WAKE_CHANNEL = "event_waitlist_due"
_WAKE = "SELECT pg_notify($1, $2::text)"
MAX_SEATS_WITHOUT_TICKET = 10
_INSERT = """
WITH ins AS (
    INSERT INTO event.waitlist_entry AS w (event_id, company_id, event_ticket_id,
        event_slot_id, seats, name, email, phone)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT DO NOTHING  -- one live entry per person and scope (waitlist_entry_once_idx)
    RETURNING w.*
), audit AS (
    INSERT INTO event.event_audit_log
        (actor_id, actor_kind, company_id, verb, object_kind, object_id, event_id, summary)
    SELECT $9, $10, NULL, 'waitlist_joined', 'waitlist_entry', ins.id, ins.event_id,
        jsonb_build_object('seats', ins.seats)
    FROM ins
)
SELECT ins.*, 1 + (  -- the entries of its scope ahead of it in the queue
    SELECT count(*) FROM event.waitlist_entry o
    WHERE o.event_id = ins.event_id AND o.status = 'waiting'
      AND o.event_ticket_id IS NOT DISTINCT FROM ins.event_ticket_id
      AND o.event_slot_id IS NOT DISTINCT FROM ins.event_slot_id
      AND (o.created_at, o.id) < (ins.created_at, ins.id)) AS position
FROM ins
"""
# the intake's door, the seat fields and the list's switch, in one read under a share lock
_SHARE_EVENT = """
SELECT e.id, e.company_id, e.seats_limited, e.seats_max, e.is_multi_slots,
    e.kanban_state::text AS kanban_state, e.active, e.date_end, e.is_published,
    e.date_publish, coalesce(s.enabled, false) AS waitlist_enabled
FROM event.events e LEFT JOIN event.waitlist_settings s ON s.event_id = e.id
WHERE e.id = $1
FOR SHARE OF e
"""


async def join(
    pool: Pool,
    codec: CapabilityCodec,
    key: str,
    request: dict[str, Any],
    now: datetime,
) -> tuple[dict[str, Any], str]:
    """A place in the queue of the request's scope: (the entry with its position, its
    status capability)."""
    event_id, by_capability = intake_key(codec, key, now)
    slot_id, ticket_id = request.get("event_slot_id"), request.get("event_ticket_id")
    seats = int(request.get("seats") or 1)
    async with transaction(pool) as conn:
        # shared: joins run side by side, but a write that frees seats (which locks the event
        # row for update) runs before or after a join, never across it, so either that write
        # sees this entry waiting and wakes the pass, or this join sees the free seat
        event = await conn.fetchrow(_SHARE_EVENT, event_id)
        check_admitted(event, by_capability, now)
        assert event is not None
        if not event["waitlist_enabled"]:
            raise errors.WaitlistDisabled()
        place = await assess_queue_place(
            conn,
            dict(event),
            slot_id=slot_id,
            ticket_id=ticket_id,
            seats=seats,
            now=now,
            default_cap=MAX_SEATS_WITHOUT_TICKET,
        )
        if place.fits and not place.waiting:
            raise errors.WaitlistNotNeeded()
        row = await conn.fetchrow(
            _INSERT,
            event_id,
            event["company_id"],
            ticket_id,
            slot_id,
            seats,
            request["name"],
            request["email"],
            request.get("phone") or "",
            PUBLIC_INTAKE.id,
            PUBLIC_INTAKE.kind,
        )
        if row is None:
            raise errors.WaitlistAlreadyJoined()
        if place.free:  # seats are free while others wait: the pass serves the queue now
            await conn.execute(_WAKE, WAKE_CHANNEL, str(event_id))
    return dict(row), waitlist_token(codec, row["id"], event_id)


def open_link(codec: CapabilityCodec, token: str, now: datetime) -> tuple[UUID, UUID]:
    """(entry id, event id) of a waiting-list link; the uniform public 404 otherwise."""
    opened = capabilities.open_waitlist(codec, token, now)
    if opened is None:
        raise errors.EventNotPublished()
    return opened


def public_status(entry: dict[str, Any], position: int | None) -> dict[str, Any]:
    """What the link's holder sees: an offer past its deadline is already `expired`."""
    status = entry["status"]
    deadline = entry["offer_expires_at"]
    return {
        "status": status,
        "position": position,
        "seats": entry["seats"],
        "offer_expires_at": deadline if status in ("offered", "expired") else None,
    }


_EVENT = """
SELECT id, name, date_begin, date_end, date_tz, location FROM event.events WHERE id = $1
"""


async def entry_status(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime
) -> tuple[dict[str, Any], str | None]:
    """(the entry's status with its event, the my-tickets token once accepted) of a
    waiting-list link."""
    entry_id, event_id = open_link(codec, token, now)
    async with connection(pool) as conn:
        try:
            entry = await read_entry(conn, entry_id, event_id)
        except errors.NotFound:
            raise errors.EventNotPublished() from None
        if entry["status"] == "offered" and entry["offer_expires_at"] <= await _db_now(conn):
            entry["status"] = "expired"  # the pass has not swept it yet: it is over
        view = public_status(entry, await position_of(conn, entry))
        event = dict(must(await conn.fetchrow(_EVENT, event_id)))
    zone = ZoneInfo(event["date_tz"])
    event["date_begin"] = in_zone(event["date_begin"], zone)
    event["date_end"] = in_zone(event["date_end"], zone)
    view["event"] = event
    tickets = None
    if entry["status"] == "accepted":
        tickets = capabilities.mint_tickets(codec, event_id, list(entry["registration_ids"]))
    return view, tickets


async def _db_now(conn: Any) -> datetime:
    """The database's clock: every deadline of the waiting list is read against it."""
    at: datetime = await conn.fetchval("SELECT clock_timestamp()")
    return at


async def waitlist_counts(pool: Pool) -> dict[str, int]:
    """{waiting, offered}: the live entries of every event, for the metrics."""
    async with connection(pool) as conn:
        return await live_counts(conn)


async def list_entries(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    *,
    status: str | None,
    cursor: str | None,
    limit: int | None,
    pii_full: bool,
) -> dict[str, Any]:
    """The event's entries in queue order, masked unless `pii_full` (audited)."""
    size = clamp_limit(limit)
    after = decode_cursor(cursor, datetime)
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        rows = await list_rows(conn, event_id, status, after, size)
        if pii_full and rows:
            await write_audit(
                conn,
                actor,
                "waitlist_pii_read",
                "waitlist_entry",
                None,
                event_id=event_id,
                summary={"what": "waitlist", "rows": min(len(rows), size)},
            )
    result = page(rows, size, "created_at")
    result["items"] = [entry_view(r, pii_full) for r in result["items"]]
    return result
