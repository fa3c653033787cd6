"""Taking seats: the register verb's ONE transaction, the only seat-taking path (officer
create, intake, the sale seam and imports take seats through it). Callers outside a
transaction go through `combiner.register`, which runs it alone or together with the
requests of the same event that arrived meanwhile; the sale seam calls `register_in`
inside its own transaction.

One transaction decides one or more requests for ONE event. It locks first, in the
service's fixed order: the event row (`FOR NO KEY UPDATE`), then the slot rows, then the
ticket rows, each set in id order. Then, for each request in arrival order, the refusals
(cancelled event, slot rules, ticket of another event, sale window against instants,
per-order cap, answers) and the seats, counted once per scope under the lock
(`seats.SeatLedger`) and taken from the running count. A refused request takes nothing
and gets its own typed refusal; a group is all or nothing. Then one INSERT for every
accepted attendee with their audit rows, their answers, the lead queue, the arm rule
for the rows entering `open`; their webhook facts (`registration.created`, one per row:
every path that mints a row comes here) are written by the INSERT itself, so a batch's
facts add no round trip to the time it holds the event's lock. Barcodes
are 8 random bytes as a decimal string; a collision with an existing barcode is retried
with a fresh one.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection
from events_svc.models import MAX_PER_ORDER, AnswerInput, AttendeeInput
from events_svc.verbs.leads import queue_for_registrations
from events_svc.verbs.mail import arm_entering_open
from events_svc.verbs.registrations.answers import (
    IDENTITY_FIELDS,
    one_line_answers,
    resolve_answers,
    share_general_answers,
)
from events_svc.verbs.registrations.records import read_many
from events_svc.verbs.registrations.seats import SeatLedger

MAX_GROUP = MAX_PER_ORDER  # a group without a ticket's own cap: the largest cap a ticket may set

# The event row lock serialises every seat-taking writer of this event.
_LOCK_EVENT = """
SELECT e.id, e.company_id, e.seats_limited, e.seats_max, e.is_multi_slots,
    e.kanban_state::text AS kanban_state,
    EXISTS (SELECT 1 FROM event.mails m WHERE m.event_id = e.id) AS has_schedulers
FROM event.events e
WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
FOR NO KEY UPDATE OF e  -- serialises every seat taker of this event
"""
_LOCK_SLOTS = """
SELECT id FROM event.slots WHERE id = ANY($1::uuid[]) AND event_id = $2
ORDER BY id FOR NO KEY UPDATE  -- after the event row: the fixed lock order
"""
_LOCK_TICKETS = """
SELECT id, seats_max, limit_max_per_order, start_sale_datetime, end_sale_datetime
FROM event.tickets WHERE id = ANY($1::uuid[]) AND event_id = $2
ORDER BY id FOR NO KEY UPDATE  -- after the event and slot rows: the fixed lock order
"""
_READ_SLOTS = "SELECT id FROM event.slots WHERE id = ANY($1::uuid[]) AND event_id = $2"
_READ_TICKETS = """
SELECT id, seats_max, limit_max_per_order, start_sale_datetime, end_sale_datetime
FROM event.tickets WHERE id = ANY($1::uuid[]) AND event_id = $2
"""
_QUESTIONS = """
SELECT q.id, q.question_type::text AS kind, q.is_mandatory_answer, rq.once_per_order,
    ARRAY(SELECT a.id FROM event.question_answers a WHERE a.question_id = q.id) AS answer_ids
FROM event.registration_questions rq JOIN event.questions q ON q.id = rq.question_id
WHERE rq.event_id = $1
"""
# Every accepted attendee of the batch in one statement, each with its own request's
# slot, ticket, partner, state, time and actor, and its audit row; a barcode collision
# skips the row (ON CONFLICT) and the verb retries it with a fresh barcode.
_INSERT = """
WITH new AS (
    SELECT * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
        $8::uuid[], $9::uuid[], $10::uuid[], $11::text[], $12::timestamptz[], $13::text[],
        $14::text[], $15::uuid[], $16::text[], $17::text[], $18::uuid[], $19::text[],
        $20::boolean[], $21::text[], $23::uuid[], $24::timestamptz[])
        AS a(name, email, phone, company_name, barcode, slot_id, ticket_id, partner_id,
            state, at, actor_id, actor_kind, actor_company, source, sale_status, order_id,
            order_state, amount_is_zero, origin, order_company, hold)
), ins AS (
    INSERT INTO event.registrations AS r (event_id, event_is_multi_slots, event_slot_id,
        event_ticket_id, state, name, email, phone, company_name, partner_id, barcode,
        company_id, date_open, created_at, updated_at, sale_status, sale_order_id,
        sale_order_state, sale_amount_is_zero, state_origin, sale_order_company_id,
        hold_expires_at)
    SELECT $1, $2, slot_id, ticket_id, state::event.registration_state, name, email, phone,
        company_name, partner_id, barcode, $22::uuid,
        CASE WHEN state = 'open' THEN at END, at, at, sale_status::event.sale_status,
        order_id, order_state::event.sale_order_state, amount_is_zero,
        origin::event.state_origin, order_company, hold
    FROM new
    ON CONFLICT ON CONSTRAINT registrations_barcode_key DO NOTHING
    RETURNING id, event_id, event_slot_id, event_ticket_id, state::text AS state,
        sale_status::text AS sale_status, sale_order_id, name, email, phone, company_name,
        partner_id, barcode, active, date_open, date_closed, version, company_id, created_at,
        updated_at, '[]'::jsonb AS answers, state_origin::text AS state_origin, r AS whole
), audit AS (
    INSERT INTO event.event_audit_log
        (actor_id, actor_kind, company_id, verb, object_kind, object_id, event_id, summary)
    SELECT new.actor_id, new.actor_kind, new.actor_company, 'registration_created',
        'registration', ins.id, $1, jsonb_build_object('source', new.source, 'state', new.state)
    FROM ins JOIN new ON new.barcode = ins.barcode
), facts AS (  -- `registration.created`, one per row, when an endpoint listens (facts.py)
    INSERT INTO event.webhook_facts (company_id, event_id, type, occurred_at, data, pii)
    SELECT $22, $1, 'registration.created', ins.created_at, event.registration_fact(ins.whole),
        CASE WHEN event.webhook_listens_with_pii($22, $1, 'registration.created')
            THEN event.registration_pii(ins.whole) ELSE '{}' END
    FROM ins
    WHERE event.webhook_listens($22, $1, 'registration.created')
    ORDER BY ins.created_at, ins.id
)
SELECT id, event_id, event_slot_id, event_ticket_id, state, sale_status, sale_order_id, name,
    email, phone, company_name, partner_id, barcode, active, date_open, date_closed, version,
    company_id, created_at, updated_at, answers, state_origin
FROM ins
"""
_INSERT_ANSWERS = """
INSERT INTO event.registration_answers (registration_id, question_id, value_answer_id, value_text)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[])
"""


def new_barcode() -> str:
    """8 random bytes, little-endian, as a decimal string (Code128C-compact)."""
    return str(int.from_bytes(secrets.token_bytes(8), "little"))


MintState = Literal["open", "draft", "cancel"]


@dataclass(frozen=True)
class SaleMint:
    """How the sale seam mints an order line's attendees: the (state, sale_status) the
    truth table gave (`open` and armed, `draft` holding its seat, or `cancel` for an order
    cancelled before it was confirmed: no seat), and the order: its id and its company
    (None: a platform order), which together are its identity."""

    order_id: UUID
    state: MintState
    sale_status: str
    order_state: str
    amount_is_zero: bool
    company_id: UUID | None


@dataclass(frozen=True)
class RegisterRequest:
    """One caller's registration: its attendees (a group is all or nothing) and scope."""

    actor: Actor
    event_id: UUID
    attendees: list[AttendeeInput]
    now: datetime
    slot_id: UUID | None = None
    ticket_id: UUID | None = None
    partner_id: UUID | None = None
    source: str = "admin"
    require_mandatory: bool = False
    sale: SaleMint | None = None
    arm_leads: bool = True  # False: the bulk imports' declared exemption (IMPORT-EXEMPT)
    hold_until: datetime | None = None  # a waiting-list offer: drafts held until then

    @property
    def state(self) -> str:
        if self.hold_until is not None:
            return "draft"
        return self.sale.state if self.sale is not None else "open"

    @property
    def origin(self) -> str | None:
        if self.hold_until is not None:
            return "waitlist"
        return "sale" if self.sale is not None else None

    def answers_at(self, n: int) -> str:
        """Where attendee `n`'s answers are in the caller's body (named by a refusal): the
        intake's `attendees` list, or the one attendee's own `answers`."""
        return f"attendees.{n}.answers" if self.source == "intake" else "answers"

    @property
    def queue_first(self) -> bool:
        """The public intake serves the waiting list first (officers are not held back)."""
        return self.source == "intake"


@dataclass
class Registered:
    """What the register verb answers: the new rows, in the order of the attendees."""

    event_id: UUID
    registrations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Accepted:
    request: RegisterRequest
    resolved: list[tuple[dict[str, str], list[AnswerInput]]]
    views: list[dict[str, Any]] = field(default_factory=list)


def _check_sale_window(ticket: dict[str, Any], now: datetime) -> None:
    start, end = ticket["start_sale_datetime"], ticket["end_sale_datetime"]
    if (start is not None and now < start) or (end is not None and now > end):
        raise errors.SaleWindowClosed(
            ticket_id=str(ticket["id"]),
            start_sale_datetime=start.isoformat() if start else None,
            end_sale_datetime=end.isoformat() if end else None,
        )


class _Scope:
    """The locked rows a batch decides against: the event, its slots and tickets named by
    the batch's requests, its questions (read once, when a request needs them)."""

    def __init__(self, conn: Connection, event: dict[str, Any]) -> None:
        self.conn = conn
        self.event = event
        self.slots: set[UUID] = set()
        self.tickets: dict[UUID, dict[str, Any]] = {}
        self.ledger = SeatLedger(conn, event)
        self._questions: dict[UUID, dict[str, Any]] | None = None

    async def lock(self, requests: list[RegisterRequest]) -> None:
        event_id = self.event["id"]
        slot_ids = sorted({r.slot_id for r in requests if r.slot_id is not None})
        if slot_ids and self.event["is_multi_slots"]:
            self.slots = {
                row["id"] for row in await self.conn.fetch(_LOCK_SLOTS, slot_ids, event_id)
            }
        ticket_ids = sorted({r.ticket_id for r in requests if r.ticket_id is not None})
        if ticket_ids:
            rows = await self.conn.fetch(_LOCK_TICKETS, ticket_ids, event_id)
            self.tickets = {row["id"]: dict(row) for row in rows}

    async def read(self, slot_id: UUID | None, ticket_id: UUID | None) -> None:
        """The slot and ticket of one request, unlocked (a snapshot for a read-only ask)."""
        event_id = self.event["id"]
        if slot_id is not None and self.event["is_multi_slots"]:
            rows = await self.conn.fetch(_READ_SLOTS, [slot_id], event_id)
            self.slots = {row["id"] for row in rows}
        if ticket_id is not None:
            rows = await self.conn.fetch(_READ_TICKETS, [ticket_id], event_id)
            self.tickets = {row["id"]: dict(row) for row in rows}

    async def questions(self) -> dict[UUID, dict[str, Any]]:
        if self._questions is None:
            rows = await self.conn.fetch(_QUESTIONS, self.event["id"])
            self._questions = {q["id"]: dict(q) for q in rows}
        return self._questions


def _refusals(
    scope: _Scope,
    slot_id: UUID | None,
    ticket_id: UUID | None,
    now: datetime,
    size: int,
    default_cap: int = MAX_GROUP,
    size_field: str | None = None,
) -> dict[str, Any] | None:
    """A request's refusals in the verb's fixed order (slot, ticket, cancelled event, sale
    window, per-order cap: named `size_field` when the size is a field of the body);
    answers its ticket row."""
    event = scope.event
    if event["is_multi_slots"] and slot_id is None:
        raise errors.SlotRequired(field="event_slot_id")
    if slot_id is not None:
        if not event["is_multi_slots"]:
            raise errors.SlotNotInEvent("This event does not run in slots.", field="event_slot_id")
        if slot_id not in scope.slots:
            raise errors.SlotNotInEvent(field="event_slot_id")
    ticket = None
    if ticket_id is not None:
        ticket = scope.tickets.get(ticket_id)
        if ticket is None:
            raise errors.TicketNotInEvent(field="event_ticket_id")
    if event["kanban_state"] == "cancel":
        raise errors.EventCancelled()
    cap = default_cap
    if ticket is not None:
        _check_sale_window(ticket, now)
        if ticket["limit_max_per_order"] > 0:
            cap = ticket["limit_max_per_order"]
    if size > cap:
        named: dict[str, Any] = {"field": size_field} if size_field else {}
        raise errors.PerOrderCapExceeded(maximum=cap, requested=size, **named)
    return ticket


async def _decide(scope: _Scope, r: RegisterRequest) -> _Accepted:
    """One request's refusals in the verb's fixed order, then its seats (taken from the
    ledger only when every check passed)."""
    if not r.attendees:
        raise errors.ValidationFailed("At least one attendee is required.")
    ticket = _refusals(scope, r.slot_id, r.ticket_id, r.now, len(r.attendees))
    needs_questions = r.require_mandatory or any(a.answers for a in r.attendees)
    questions = await scope.questions() if needs_questions else {}
    for n, attendee in enumerate(r.attendees):  # as sent: a refusal names its field
        one_line_answers(attendee, questions, r.answers_at(n))
    group = share_general_answers(r.attendees, questions)
    resolved = [resolve_answers(a, questions, r.require_mandatory) for a in group]
    if r.state != "cancel":  # a cancelled row holds no seat
        await scope.ledger.take(r.slot_id, ticket, len(r.attendees), behind_queue=r.queue_first)
    return _Accepted(r, resolved)


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting-list request stands: whether its seats are free now (`free`), and
    free past the seats of every entry waiting in its scopes (`fits`: the intake would
    take it); `waiting`: those seats (counted only when the seats are free, else 0)."""

    free: bool
    fits: bool
    waiting: int


async def assess_queue_place(
    conn: Connection,
    event: dict[str, Any],
    *,
    slot_id: UUID | None,
    ticket_id: UUID | None,
    seats: int,
    now: datetime,
    default_cap: int,
) -> QueuePlace:
    """The register verb's refusals and seats for a waiting-list request of `event` (its
    row: id, company_id, seats_limited, seats_max, is_multi_slots, kanban_state), read
    without the event's update lock: the intake and the offer pass decide under it, so
    what this reads never costs a seat. The queue is read only when seats are free."""
    scope = _Scope(conn, event)
    await scope.read(slot_id, ticket_id)
    ticket = _refusals(scope, slot_id, ticket_id, now, seats, default_cap, "seats")
    largest = scope.ledger.smallest_cap(slot_id, ticket)
    if largest is not None and seats > largest:  # could never be offered: refused now
        raise errors.PerOrderCapExceeded(
            f"At most {largest} seat(s) can ever be held here.",
            maximum=largest,
            requested=seats,
            field="seats",
        )
    try:
        await scope.ledger.take(slot_id, ticket, seats, keep=False)
    except errors.SeatsExhausted:
        return QueuePlace(free=False, fits=False, waiting=0)
    waiting = await scope.ledger.waiting_for(slot_id, ticket)
    if waiting:
        try:
            await scope.ledger.take(slot_id, ticket, seats, behind_queue=True, keep=False)
        except errors.SeatsExhausted:
            return QueuePlace(free=True, fits=False, waiting=waiting)
    return QueuePlace(free=True, fits=True, waiting=waiting)


async def register_in(conn: Connection, request: RegisterRequest) -> Registered:
    """One request inside the caller's transaction (the sale seam's delivery)."""
    (result,) = await register_batch_in(conn, [request])
    if isinstance(result, errors.DomainError):
        raise result
    return result


async def register_batch_in(
    conn: Connection, requests: list[RegisterRequest]
) -> list[Registered | errors.DomainError]:
    """Decide and write requests for ONE event (same actor company) in the caller's
    transaction: each request's answer, in order. A refusal of the whole scope (no such
    event) is raised."""
    first = requests[0]
    assert all(
        r.event_id == first.event_id and r.actor.company_id == first.actor.company_id
        for r in requests
    ), "a batch is one event, seen by one company"
    row = await conn.fetchrow(_LOCK_EVENT, first.event_id, first.actor.company_id)
    if row is None:
        raise errors.NotFound("No such event.")
    scope = _Scope(conn, dict(row))
    await scope.lock(requests)
    decided: list[_Accepted | errors.DomainError] = []
    for request in requests:
        try:
            decided.append(await _decide(scope, request))
        except errors.DomainError as refused:
            decided.append(refused)
    accepted = [d for d in decided if isinstance(d, _Accepted)]
    if accepted:
        await _write(conn, scope.event, accepted)
    return [
        d if isinstance(d, errors.DomainError) else Registered(scope.event["id"], d.views)
        for d in decided
    ]


async def _write(conn: Connection, event: dict[str, Any], accepted: list[_Accepted]) -> None:
    """The accepted requests' rows, answers, lead queue, arming and webhook facts, each
    set once."""
    await _insert(conn, event, accepted)
    answer_rows = [
        (view["id"], answer)
        for a in accepted
        for view, (_, rows) in zip(a.views, a.resolved, strict=True)
        for answer in rows
    ]
    if answer_rows:
        await conn.execute(
            _INSERT_ANSWERS,
            [rid for rid, _ in answer_rows],
            [a.question_id for _, a in answer_rows],
            [a.value_answer_id for _, a in answer_rows],
            [a.value_text for _, a in answer_rows],
        )
    # arming as the earliest request would have: due times are never later than alone
    earliest = min(a.request.now for a in accepted)
    leads: dict[Literal["create", "confirm"], list[UUID]] = {}
    for a in accepted:  # trigger `create` on mint; a row minted open is confirmed too
        if a.request.arm_leads:
            kind: Literal["create", "confirm"] = (
                "confirm" if a.request.state == "open" else "create"
            )
            leads.setdefault(kind, []).extend(v["id"] for v in a.views)
    for kind, ids in leads.items():
        await queue_for_registrations(conn, event["id"], ids, kind, earliest)
    opened = [v["id"] for a in accepted if a.request.state == "open" for v in a.views]
    if event["has_schedulers"] and opened:
        await arm_entering_open(conn, event["id"], opened, earliest, stamped=True)
    with_answers = [a for a in accepted if any(rows for _, rows in a.resolved)]
    for a in with_answers:  # the views carry no answers yet: read them back
        a.views = await read_many(conn, [v["id"] for v in a.views])


async def _insert(conn: Connection, event: dict[str, Any], accepted: list[_Accepted]) -> None:
    """Insert every attendee of every accepted request; rows whose barcode collided are
    retried with a new one. Each request gets its views in the order of its attendees."""
    rows: list[tuple[RegisterRequest, dict[str, str]]] = []
    for a in accepted:
        for attendee, (identity, _) in zip(a.request.attendees, a.resolved, strict=True):
            values = {k: getattr(attendee, k) or identity.get(k, "") for k in IDENTITY_FIELDS}
            rows.append((a.request, values))
    views: list[dict[str, Any] | None] = [None] * len(rows)
    for _attempt in range(5):
        pending = [i for i, view in enumerate(views) if view is None]
        if not pending:
            break
        codes = {new_barcode(): i for i in pending}
        batch = [rows[i] for i in codes.values()]
        columns = _columns(batch, list(codes))
        found = await conn.fetch(
            _INSERT,
            event["id"],
            event["is_multi_slots"],
            *columns,
            event["company_id"],
            [r.sale.company_id if r.sale else None for r, _ in batch],
            [r.hold_until for r, _ in batch],
        )
        for row in found:
            views[codes[row["barcode"]]] = dict(row)
    if any(view is None for view in views):
        raise RuntimeError("could not mint a unique barcode")
    at = 0
    for a in accepted:
        a.views = [v for v in views[at : at + len(a.request.attendees)] if v is not None]
        at += len(a.request.attendees)


def _columns(batch: list[tuple[RegisterRequest, dict[str, str]]], codes: list[str]) -> list[Any]:
    """The INSERT's arrays ($3 ..), one element per attendee row."""
    reqs = [r for r, _ in batch]
    sales = [r.sale for r in reqs]
    return [
        *([v[k] for _, v in batch] for k in IDENTITY_FIELDS),
        codes,
        [r.slot_id for r in reqs],
        [r.ticket_id for r in reqs],
        [r.partner_id for r in reqs],
        [r.state for r in reqs],
        [r.now for r in reqs],
        [r.actor.id for r in reqs],
        [r.actor.kind for r in reqs],
        [r.actor.company_id for r in reqs],
        [r.source for r in reqs],
        [s.sale_status if s else None for s in sales],
        [s.order_id if s else None for s in sales],
        [s.order_state if s else None for s in sales],
        [s.amount_is_zero if s else None for s in sales],
        [r.origin for r in reqs],
    ]
