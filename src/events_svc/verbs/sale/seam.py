"""The sale seam's three order facts, as `inbox.deliver` applies them once each.

The decisions are docs/architecture.md, "The sale seam":
- confirmed: every line's attendees go through the ONE register verb; the sale
  truth table (`truth`) gives `open` + `free` for a zero total (armed) and
  `draft` + `to_pay` otherwise (holding its seat, nothing sent); an unparseable
  total is not zero. A line's booths are booked `pending`.
- paid: forward-only; the order's rows at `to_pay` whose state the sale set go
  through the one transition to `open` + `sold` (armed), past a full event if need
  be (flagged `overbooked`); rows an officer moved, rows of a cancelled event, and
  the cancelled rows of an order confirmed again are skipped. The order's booths
  latch `is_paid`.
- cancelled: every row of the order goes to `cancel`; `sale_status` is kept;
  booths are untouched.

Each applied fact records one `order.applied` webhook fact (the order's company; its one
event, or none when it names several): the order's id and state after it, the fact's
name, and the ids of the registrations it touched and skipped and of their events; no
attendee data. A redelivery the inbox answers applies nothing and records nothing.

An order is (company, order id) (`orders`): a fact reads and writes its own company's
order row, and touches only the registrations and booth bookings of that order (rows
minted by it carry `sale_order_company_id`, bookings `order_company_id`) on events the
actor sees; another company's event named by a line answers exactly as a missing one.
A platform actor's facts kept before the order named any event (a platform order with no
rows) become the company's order when the platform's confirmed fact names that company's
events, their inbox keys with them.

Lock order: the inbox row, the order row (`event.sale_orders`: facts of one order
run one at a time; a platform order being adopted before the company's), the events by
id, their slots by id, their tickets by id, the registrations by id, then what the
register verb and the transition lock after them (scheduler rows), then booth bookings
and booths.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, cast
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection
from events_svc.models import AttendeeInput
from events_svc.models.sale import OrderConfirmed, SeamLine
from events_svc.verbs.booths import book_for_order_line, latch_paid_booths
from events_svc.verbs.facts import record_fact
from events_svc.verbs.registrations import (
    MintState,
    RegisterRequest,
    SaleMint,
    lock_event_by_id,
    lock_registration,
    lock_scope,
    register_in,
    write_state,
)
from events_svc.verbs.sale.inbox import Effect, deliver
from events_svc.verbs.sale.orders import OrderKey, consumer_of
from events_svc.verbs.sale.truth import OrderState, sale_composed_state

__all__ = ["apply_cancelled", "apply_confirmed", "apply_paid", "deliver"]

_ORDER_CONFIRMED = """
INSERT INTO event.sale_orders AS o
    (company_id, order_id, state, amount_is_zero, currency, created_at, updated_at)
VALUES ($1, $2, CASE WHEN $3 THEN 'sale' ELSE 'sent' END::event.sale_order_state, $3, $4,
    $5, $5)
ON CONFLICT ON CONSTRAINT sale_orders_pkey DO UPDATE SET
    state = CASE
        -- cancelled before it was ever confirmed (and never paid): it stays cancelled
        WHEN o.state = 'cancel' AND o.amount_is_zero IS NULL THEN 'cancel'
        WHEN $3 OR o.paid_at IS NOT NULL THEN 'sale'
        ELSE 'sent' END::event.sale_order_state,
    amount_is_zero = $3, currency = $4, updated_at = $5
RETURNING state::text AS state
"""
# the order's state before a paid fact: a late paid fact lifts cancelled rows only when the
# order's last word was its cancellation (a re-confirmed order's old rows are superseded)
_ORDER_BEFORE = """
SELECT state::text FROM event.sale_orders
WHERE order_id = $2 AND company_id IS NOT DISTINCT FROM $1
FOR NO KEY UPDATE
"""
_ORDER_PAID = """
INSERT INTO event.sale_orders AS o (company_id, order_id, state, paid_at, created_at, updated_at)
VALUES ($1, $2, 'sale', $3, $3, $3)
ON CONFLICT ON CONSTRAINT sale_orders_pkey DO UPDATE SET
    state = 'sale', paid_at = coalesce(o.paid_at, $3), updated_at = $3
"""
_ORDER_CANCELLED = """
INSERT INTO event.sale_orders AS o
    (company_id, order_id, state, cancelled_at, created_at, updated_at)
VALUES ($1, $2, 'cancel', $3, $3, $3)
ON CONFLICT ON CONSTRAINT sale_orders_pkey DO UPDATE SET
    state = 'cancel', cancelled_at = $3, updated_at = $3
"""
# adoption: the platform order of this id, locked before the company's order row
_LOCK_PLATFORM_ORDER = """
SELECT true FROM event.sale_orders WHERE order_id = $1 AND company_id IS NULL
FOR UPDATE  -- a concurrent platform fact of shared events would give it rows
"""
# read after the lock (a statement of its own: it sees what committed meanwhile)
_PLATFORM_ORDER_HAS_ROWS = """
SELECT EXISTS (SELECT 1 FROM event.registrations
               WHERE sale_order_id = $1 AND sale_order_company_id IS NULL)
    OR EXISTS (SELECT 1 FROM event.booth_bookings
               WHERE order_id = $1 AND order_company_id IS NULL)
"""
# the company's order takes the kept facts, unless the company already has an order of
# this id (then the platform's order stays its own)
_ADOPT = """
INSERT INTO event.sale_orders (company_id, order_id, state, amount_is_zero, currency,
    paid_at, cancelled_at, created_at, updated_at)
SELECT $2, order_id, state, amount_is_zero, currency, paid_at, cancelled_at, created_at, $3
FROM event.sale_orders WHERE order_id = $1 AND company_id IS NULL
ON CONFLICT ON CONSTRAINT sale_orders_pkey DO NOTHING
RETURNING true
"""
_DROP_PLATFORM_ORDER = "DELETE FROM event.sale_orders WHERE order_id = $1 AND company_id IS NULL"
# the platform order's inbox rows move to the company's key space (a key the company
# recorded itself stays the company's)
_MOVE_KEYS = """
WITH moved AS (
    INSERT INTO event.seam_inbox (consumer, external_id, verb, order_id, outcome, detail,
        registration_ids, skipped_ids, overbooked, actor_id, created_at)
    SELECT $2, external_id, verb, order_id, outcome, detail, registration_ids, skipped_ids,
        overbooked, actor_id, created_at
    FROM event.seam_inbox WHERE consumer = $3 AND order_id = $1
    ON CONFLICT DO NOTHING
    RETURNING external_id
)
DELETE FROM event.seam_inbox
WHERE consumer = $3 AND order_id = $1 AND external_id IN (SELECT external_id FROM moved)
"""
# the order's rows: minted by this company's order, on events the actor sees
_MIRROR = """
UPDATE event.registrations SET sale_order_state = $3::event.sale_order_state
WHERE sale_order_id = $2 AND sale_order_company_id IS NOT DISTINCT FROM $1
  AND sale_order_state IS DISTINCT FROM $3::event.sale_order_state
  AND event.visible_to(company_id, $4)
"""
_ORDER_ROWS = """
SELECT id, event_id, event_slot_id, event_ticket_id FROM event.registrations
WHERE sale_order_id = $2 AND sale_order_company_id IS NOT DISTINCT FROM $1
  AND event.visible_to(company_id, $3)
ORDER BY id
"""
_LOCK_EVENTS = """
SELECT id FROM event.events WHERE id = ANY($1::uuid[]) AND event.visible_to(company_id, $2)
ORDER BY id
FOR NO KEY UPDATE  -- by id, before any slot or ticket: the fixed lock order
"""
_LOCK_SLOTS = """
SELECT id FROM event.slots WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE
"""
_LOCK_TICKETS = """
SELECT id FROM event.tickets WHERE id = ANY($1::uuid[]) ORDER BY id FOR NO KEY UPDATE
"""


def amount_is_zero(amount_total: str) -> bool:
    """Whether a total is zero; an unparseable total is not (it holds seats until paid)."""
    try:
        value = Decimal(amount_total.strip())
    except InvalidOperation:
        return False
    return value.is_finite() and value == 0


async def _lock_events_and_scopes(
    conn: Connection,
    actor: Actor,
    event_ids: set[UUID],
    slot_ids: set[UUID],
    ticket_ids: set[UUID],
) -> set[UUID]:
    """Lock every event (visible to the actor), slot and ticket a fact touches, each kind
    by id, events first; answers the visible events."""
    events = {r["id"] for r in await conn.fetch(_LOCK_EVENTS, sorted(event_ids), actor.company_id)}
    if slot_ids:
        await conn.fetch(_LOCK_SLOTS, sorted(slot_ids))
    if ticket_ids:
        await conn.fetch(_LOCK_TICKETS, sorted(ticket_ids))
    return events


async def _visible(conn: Connection, actor: Actor, event_id: UUID) -> set[UUID]:
    """{event_id}, locked, when the actor may see it; else the empty set."""
    return await _lock_events_and_scopes(conn, actor, {event_id}, set(), set())


async def _record_applied(
    conn: Connection,
    order: OrderKey,
    fact: str,
    order_state: str,
    effect: Effect,
    event_ids: set[UUID],
    now: datetime,
) -> None:
    """The `order.applied` webhook fact of one applied order fact: ids and states only."""
    events = sorted(event_ids)
    data = {
        "order_id": str(order.order_id),
        "fact": fact,
        "order_state": order_state,
        "registration_ids": [str(r) for r in effect.registration_ids],
        "skipped_ids": [str(r) for r in effect.skipped_ids],
        "overbooked": effect.overbooked,
        "event_ids": [str(e) for e in events],
    }
    one = events[0] if len(events) == 1 else None
    await record_fact(
        conn, "order.applied", now, company_id=order.company_id, event_id=one, data=data
    )


def _refuse_for_line(refused: errors.DomainError, line: SeamLine) -> errors.DomainError:
    refused.fields.setdefault("line_id", str(line.line_id))
    return refused


async def apply_confirmed(
    conn: Connection, actor: Actor, cmd: OrderConfirmed, order: OrderKey, now: datetime
) -> Effect:
    """Mint every line's attendees through the register verb; book its booths (`order`:
    the one `inbox.deliver` decided, the actor's company's or the one company of the
    lines' events)."""
    if actor.company_id is None and order.company_id is not None:
        await _adopt_platform_order(conn, order, now)
    zero = amount_is_zero(cmd.amount_total)
    order_state = cast(
        OrderState,
        await conn.fetchval(
            _ORDER_CONFIRMED, order.company_id, cmd.order_id, zero, cmd.currency, now
        ),
    )
    if order_state == "cancel":  # cancelled before confirmed: its attendees are born cancelled
        _, sale_status = sale_composed_state("draft", None, "sent", zero)
        state: str = "cancel"
    else:
        state, sale_status = sale_composed_state("draft", None, order_state, zero)
    if state not in ("open", "draft", "cancel") or sale_status is None:
        raise RuntimeError(f"the sale truth table minted {state}/{sale_status}")
    mint = SaleMint(
        cmd.order_id, cast(MintState, state), sale_status, order_state, zero, order.company_id
    )
    if len(cmd.lines) > 1:  # one line's locks are the register verb's own, in order
        visible = await _lock_events_and_scopes(
            conn,
            actor,
            {line.event_id for line in cmd.lines},
            {line.event_slot_id for line in cmd.lines if line.event_slot_id is not None},
            {line.event_ticket_id for line in cmd.lines if line.event_ticket_id is not None},
        )
    else:
        visible = (
            {cmd.lines[0].event_id}
            if cmd.lines[0].attendees
            else await _visible(conn, actor, cmd.lines[0].event_id)
        )
    effect = Effect()
    for line in cmd.lines:
        if not line.attendees:
            continue
        try:
            if line.event_id not in visible:
                raise errors.NotFound("No such event.", event_id=str(line.event_id))
            attendees = [
                AttendeeInput.model_construct(**a.model_dump(), answers=[]) for a in line.attendees
            ]
            request = RegisterRequest(
                actor,
                line.event_id,
                attendees,
                now,
                slot_id=line.event_slot_id,
                ticket_id=line.event_ticket_id,
                source="sale",
                sale=mint,
            )
            registered = await register_in(conn, request)
        except errors.DomainError as refused:
            raise _refuse_for_line(refused, line) from None
        effect.registration_ids += [r["id"] for r in registered.registrations]
    for line in cmd.lines:  # booths after every registration: the fixed lock order
        if not line.booth_ids:
            continue
        first = line.attendees[0] if line.attendees else None
        contact = (
            {"name": first.name, "email": first.email, "phone": first.phone} if first else None
        )
        try:
            if line.event_id not in visible:
                raise errors.NotFound("No such event.", event_id=str(line.event_id))
            await book_for_order_line(
                conn,
                booth_ids=line.booth_ids,
                event_id=line.event_id,
                order_id=cmd.order_id,
                order_line_id=line.line_id,
                contact=contact,
                now=now,
                company_id=order.company_id,
                viewer=actor.company_id,
            )
        except errors.DomainError as refused:
            raise _refuse_for_line(refused, line) from None
    named = {line.event_id for line in cmd.lines if line.attendees or line.booth_ids}
    await _record_applied(conn, order, "confirmed", order_state, effect, named, now)
    return effect


async def _adopt_platform_order(conn: Connection, order: OrderKey, now: datetime) -> None:
    """A platform actor's confirmed fact names a company's events: the facts it sent
    before (a platform order of this id with no rows yet) become that company's order,
    their inbox keys with them. A platform order with rows, or a company that already has
    an order of this id, leaves both as they are."""
    if not await conn.fetchval(_LOCK_PLATFORM_ORDER, order.order_id):
        return
    if await conn.fetchval(_PLATFORM_ORDER_HAS_ROWS, order.order_id):
        return
    if not await conn.fetchval(_ADOPT, order.order_id, order.company_id, now):
        return
    await conn.execute(_DROP_PLATFORM_ORDER, order.order_id)
    await conn.execute(_MOVE_KEYS, order.order_id, consumer_of(order.company_id), consumer_of(None))


async def _lock_order_rows(
    conn: Connection, actor: Actor, order: OrderKey
) -> tuple[dict[UUID, dict[str, Any]], dict[UUID, dict[str, Any] | None], list[dict[str, Any]]]:
    """Lock the order's events, slots, tickets, then its registrations (by id): the rows
    of this company's order on events the actor sees."""
    found = await conn.fetch(_ORDER_ROWS, order.company_id, order.order_id, actor.company_id)
    events = {
        eid: await lock_event_by_id(conn, eid) for eid in sorted({r["event_id"] for r in found})
    }
    slots = sorted({r["event_slot_id"] for r in found if r["event_slot_id"] is not None})
    for slot_id in slots:
        await lock_scope(conn, slot_id, None)
    tickets: dict[UUID, dict[str, Any] | None] = {}
    for ticket_id in sorted({r["event_ticket_id"] for r in found if r["event_ticket_id"]}):
        tickets[ticket_id] = await lock_scope(conn, None, ticket_id)
    regs = [await lock_registration(conn, r["id"]) for r in found]
    return events, tickets, regs


async def apply_paid(conn: Connection, actor: Actor, order: OrderKey, now: datetime) -> Effect:
    """The forward-only heal of the order's unpaid rows, and the booths' paid latch
    (`order`: the one `inbox.deliver` decided)."""
    order_id = order.order_id
    before = await conn.fetchval(_ORDER_BEFORE, order.company_id, order_id)
    await conn.execute(_ORDER_PAID, order.company_id, order_id, now)
    liftable: tuple[str, ...] = ("draft", "open", "done")
    if before in ("cancel", None):  # the order's last word was its cancellation
        liftable += ("cancel",)
    events, tickets, regs = await _lock_order_rows(conn, actor, order)
    effect = Effect()
    for reg in regs:
        if reg["sale_status"] != "to_pay":
            continue
        event = events[reg["event_id"]]
        ticket = tickets.get(reg["event_ticket_id"]) if reg["event_ticket_id"] else None
        if (
            reg["state_origin"] != "sale"  # an officer's call stays
            or event["kanban_state"] == "cancel"
            or reg["state"] not in liftable  # a re-confirmed order's old rows are superseded
        ):
            effect.skipped_ids.append(reg["id"])
            continue
        state, sale_status = sale_composed_state(reg["state"], "to_pay", "sale", False)
        effect.overbooked |= await write_state(
            conn,
            actor,
            event,
            ticket,
            reg,
            state,
            now,
            origin="sale",
            sale_status=sale_status,
            overbook=True,
            note={"fact": "paid"},
        )
        effect.registration_ids.append(reg["id"])
    await conn.execute(_MIRROR, order.company_id, order_id, "sale", actor.company_id)
    await latch_paid_booths(
        conn, order_id, company_id=order.company_id, viewer=actor.company_id, now=now
    )
    await _record_applied(conn, order, "paid", "sale", effect, set(events), now)
    return effect


async def apply_cancelled(conn: Connection, actor: Actor, order: OrderKey, now: datetime) -> Effect:
    """Every registration of the order to `cancel`, its sale status kept (`order`: the one
    `inbox.deliver` decided)."""
    order_id = order.order_id
    await conn.execute(_ORDER_CANCELLED, order.company_id, order_id, now)
    events, tickets, regs = await _lock_order_rows(conn, actor, order)
    effect = Effect()
    for reg in regs:
        if reg["state"] == "cancel":
            continue
        state, sale_status = sale_composed_state(reg["state"], reg["sale_status"], "cancel", False)
        ticket = tickets.get(reg["event_ticket_id"]) if reg["event_ticket_id"] else None
        await write_state(
            conn,
            actor,
            events[reg["event_id"]],
            ticket,
            reg,
            state,
            now,
            origin="sale",
            sale_status=sale_status,
            note={"fact": "cancelled"},
        )
        effect.registration_ids.append(reg["id"])
    await conn.execute(_MIRROR, order.company_id, order_id, "cancel", actor.company_id)
    await _record_applied(conn, order, "cancelled", "cancel", effect, set(events), now)
    return effect
