"""The registration state machine: the ONE write of a registration's state, the officer
verbs over it, and archiving.

`write_state()` is the one transition: it re-checks seats when the change makes the
row hold a seat (`event.holds_seat`, asked of the database), writes the state, the
sale status and who set it (`state_origin`: `sale` or, on a sale-linked row,
`officer`), stamps `date_closed` on `done` when it is empty, arms the schedulers
when the row enters `open` from `draft` or `cancel` (re-confirming an open row, and
`open -> done`, never do), and writes the audit row and the webhook facts
(`registration.state_changed` with `from` and `to`, and `registration.checked_in` on
entering `done`). The officer verbs (`confirm`, `set_draft`, `set_done`) call it
through `transition()`, which adds the officer's rules: a cancelled registration leaves
`cancel` only through reactivation (409 `use_reactivate`), and nothing enters `open` on
a cancelled event. Cancel and reactivate, which need a reason, are `corrections`; the
desk and the attendance import mark `done` with it. The sale seam calls it for its heal
and its cancel cascade, where a paid attendee may be lifted past a full event
(`overbook`: flagged, never refused); the waiting list for its accepts and releases.

Lock order: event row, then slot and ticket rows when seats are re-checked, then
the registration row, then scheduler rows. `version` is bumped by every write and
checked against If-Match when sent.

Archiving changes no state, but it takes the row out of the seats and the mails (and
unarchiving puts it back): it records `registration.state_changed` too, with `from` and
`to` the same state and the data's `active` saying which way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, must, transaction
from events_svc.models import RegistrationState
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_if_match
from events_svc.verbs.facts import record_registration_facts
from events_svc.verbs.leads import queue_for_registrations
from events_svc.verbs.mail import arm_entering_open
from events_svc.verbs.registrations.records import find_registration, lock_registration, read_many
from events_svc.verbs.registrations.seats import ensure_seats

State = RegistrationState
OfficerTarget = Literal["open", "draft", "done"]  # cancel needs a reason: corrections
Origin = Literal["sale", "officer", "waitlist"]

# whether a change makes a row hold a seat, or become one the scheduler mails: the two
# rules asked of their one definition (the row as it is, read at the clock after the locks:
# a hold that ended while this waited for them is a seat to take again, never one held)
_ENTERING = """
SELECT event.holds_seat_at($5::event.registration_state, $6, $7::event.sale_status,
           $8::timestamptz, now())
       AND NOT event.holds_seat_at($1::event.registration_state, $2, $3::event.sale_status,
           $4::timestamptz, clock_timestamp())
       AS takes_seat,
       event.gets_mail($5::event.registration_state, $6)
       AND NOT event.gets_mail($1::event.registration_state, $2) AS gets_mail
"""
_LOCK_EVENT = """
SELECT id, seats_limited, seats_max, is_multi_slots, kanban_state::text AS kanban_state,
    date_end
FROM event.events WHERE id = $1
FOR NO KEY UPDATE  -- first in the lock order: serialises seat takers of this event
"""
_LOCK_SLOT = "SELECT id FROM event.slots WHERE id = $1 FOR NO KEY UPDATE"
_LOCK_TICKET = "SELECT id, seats_max FROM event.tickets WHERE id = $1 FOR NO KEY UPDATE"
_SET_STATE = """
UPDATE event.registrations SET state = $2::event.registration_state,
    sale_status = $4::event.sale_status, state_origin = $5::event.state_origin,
    hold_expires_at = NULL,  -- a held offer's hold ends with its draft state
    date_closed = CASE WHEN $2 = 'done' THEN coalesce(date_closed, $3) ELSE date_closed END,
    version = version + 1, updated_at = $3
WHERE id = $1
"""
_SET_ACTIVE = """
UPDATE event.registrations SET active = $2, version = version + 1, updated_at = $3 WHERE id = $1
"""
_VERBS: dict[State, str] = {
    "open": "registration_confirmed",
    "draft": "registration_set_draft",
    "done": "registration_set_done",
    "cancel": "registration_cancelled",
}


async def lock_event_by_id(conn: Connection, event_id: UUID) -> dict[str, Any]:
    """The event row, locked first: the seat fields and kanban state the writes need. No
    company fence: the caller found the registration or order that names it within its
    fence (`verbs.fence.lock_event` is the fenced lock)."""
    return dict(must(await conn.fetchrow(_LOCK_EVENT, event_id)))


async def lock_scope(
    conn: Connection, slot_id: UUID | None, ticket_id: UUID | None
) -> dict[str, Any] | None:
    """Lock a registration's slot row, then its ticket row (after its event's); the ticket."""
    if slot_id is not None:
        await conn.fetchrow(_LOCK_SLOT, slot_id)
    if ticket_id is None:
        return None
    return dict(must(await conn.fetchrow(_LOCK_TICKET, ticket_id)))


Seen = tuple[str, bool, str | None, datetime | None]  # state, active, sale status, hold end


async def _entering(conn: Connection, before: Seen, after: Seen) -> tuple[bool, bool]:
    """(the change makes the row hold a seat, the change makes it one the scheduler mails)."""
    row = must(await conn.fetchrow(_ENTERING, *before, *after))
    return bool(row["takes_seat"]), bool(row["gets_mail"])


async def record_transitions(
    conn: Connection, registration_ids: list[UUID], before: State, after: State, now: datetime
) -> None:
    """The webhook facts of registrations `write_state` moved from `before` to `after` (as
    written), one statement per type for all of them: `registration.state_changed`, and
    `registration.checked_in` when they enter `done`; none when the state stays (a sale
    status alone moved: `order.applied` says so)."""
    if before == after:
        return
    change = {"from": before, "to": after}
    await record_registration_facts(
        conn, "registration.state_changed", registration_ids, now, change
    )
    if after == "done":
        await record_registration_facts(conn, "registration.checked_in", registration_ids, now)


async def write_state(
    conn: Connection,
    actor: Actor,
    event: dict[str, Any],
    ticket: dict[str, Any] | None,
    reg: dict[str, Any],
    target: State,
    now: datetime,
    *,
    origin: Origin,
    sale_status: str | None,
    overbook: bool = False,
    note: dict[str, Any] | None = None,
    facts: bool = True,
) -> bool:
    """The one transition of a locked registration; answers whether it overbooked.

    `reg` is the row as `lock_registration` read it. With `overbook`, a seat shortage
    is answered instead of refused (the sale seam's heal: a paid attendee is never
    stranded). Without `facts`, the caller records the webhook facts of its whole batch
    with `record_transitions` (the attendance import: one statement, not one a row)."""
    current, active = reg["state"], reg["active"]
    takes_seat, _ = await _entering(
        conn,
        (current, active, reg["sale_status"], reg["hold_expires_at"]),
        (target, active, sale_status, None),  # the write ends a hold
    )
    overbooked = False
    if takes_seat:
        try:
            await ensure_seats(conn, event, reg["event_slot_id"], ticket, 1)
        except errors.SeatsExhausted:
            if not overbook:
                raise
            overbooked = True
    # a sale-linked row records who set its state; any other keeps where it came from
    stored_origin = origin if reg["sale_order_id"] is not None else reg["state_origin"]
    await conn.execute(_SET_STATE, reg["id"], target, now, sale_status, stored_origin)
    if target == "open" and current in ("draft", "cancel") and active:
        await arm_entering_open(conn, event["id"], [reg["id"]], now)
    if target in ("open", "done") and current in ("draft", "cancel") and active:
        # confirmed (open, or checked in straight from draft): the lead rules may take it
        await queue_for_registrations(conn, event["id"], [reg["id"]], "confirm", now)
    summary: dict[str, Any] = {"from": current, "to": target, **(note or {})}
    if stored_origin is not None and reg["sale_order_id"] is not None:
        summary["origin"] = stored_origin
    if sale_status != reg["sale_status"]:
        summary["sale_status"] = sale_status
    if overbooked:
        summary["overbooked"] = True
    await write_audit(
        conn,
        actor,
        _VERBS[target],
        "registration",
        reg["id"],
        event_id=event["id"],
        summary=summary,
    )
    if facts:
        await record_transitions(conn, [reg["id"]], current, target, now)
    return overbooked


async def lock_for_change(
    conn: Connection, actor: Actor, registration_id: UUID, *, seats: bool, found: Any = None
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """Lock event, then (for seat re-checks) slot and ticket, then the registration; `found`
    is the caller's `find_registration` answer when it already looked the row up."""
    if found is None:
        found = await find_registration(conn, actor, registration_id)
    event = await lock_event_by_id(conn, found["event_id"])
    ticket = None
    if seats:
        ticket = await lock_scope(conn, found["event_slot_id"], found["event_ticket_id"])
    return event, ticket, await lock_registration(conn, registration_id)


def _check_way_out(event: dict[str, Any], current: State, target: State) -> None:
    """A cancelled registration leaves `cancel` only through reactivation; nothing enters
    `open` on a cancelled event (kanban `cancel` fences every way in)."""
    if current == "cancel":
        raise errors.UseReactivate()
    if target == "open" and event["kanban_state"] == "cancel":
        raise errors.EventCancelled()


async def transition(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    target: OfficerTarget,
    now: datetime,
    *,
    if_match: int | None = None,
) -> dict[str, Any]:
    """An officer's state change (locks: event, slot, ticket, registration). On a
    sale-linked row the officer becomes the state's origin: the seam's heal then leaves
    the row alone."""
    async with transaction(pool) as conn:
        event, ticket, reg = await lock_for_change(conn, actor, registration_id, seats=True)
        check_if_match(reg["version"], if_match, name="version")
        current = reg["state"]
        if current != target:
            _check_way_out(event, current, target)
            await write_state(
                conn,
                actor,
                event,
                ticket,
                reg,
                target,
                now,
                origin="officer",
                sale_status=reg["sale_status"],
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
        event, ticket, reg = await lock_for_change(conn, actor, registration_id, seats=active)
        check_if_match(reg["version"], if_match, name="version")
        if reg["active"] != active:
            state, status, hold = reg["state"], reg["sale_status"], reg["hold_expires_at"]
            takes_seat, gets_mail = await _entering(
                conn, (state, not active, status, hold), (state, active, status, hold)
            )
            if takes_seat:
                await ensure_seats(conn, event, reg["event_slot_id"], ticket, 1)
            await conn.execute(_SET_ACTIVE, registration_id, active, now)
            if gets_mail:
                # eligible again: the mails it missed are owed (its date_open is kept)
                await arm_entering_open(conn, event["id"], [registration_id], now, stamped=True)
                await queue_for_registrations(conn, event["id"], [registration_id], "confirm", now)
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
            same = {"from": state, "to": state}  # the data's `active` says which way
            await record_registration_facts(
                conn, "registration.state_changed", [registration_id], now, same
            )
        return (await read_many(conn, [registration_id]))[0]
