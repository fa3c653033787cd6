"""The register verb: the ONE seat-taking path (officer create now; intake, sale seam
and imports call it too).

One transaction, locks first in the service's fixed order: the event row
(`FOR NO KEY UPDATE`), then the slot row, then the ticket row; then the refusals
(cancelled event, slot rules, ticket of another event, sale window against
instants, per-order cap), the seat counts under the lock (`seats.ensure_seats`,
skipped for unlimited scopes), one INSERT for every attendee (all or nothing),
the audit rows in the same statement, the answers, and the arm rule for the
rows entering `open`. Barcodes are 8 random bytes as a decimal string; a
collision with an existing barcode is retried with a fresh one.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models import AnswerInput, AttendeeInput
from events_svc.verbs.leads.arming import queue_for_registrations
from events_svc.verbs.mail.arming import arm_entering_open
from events_svc.verbs.registrations import read_many
from events_svc.verbs.seats import ensure_seats

MAX_GROUP = 30

# The event row lock serialises every seat-taking writer of this event.
_LOCK_EVENT = """
SELECT e.id, e.company_id, e.seats_limited, e.seats_max, e.is_multi_slots,
    e.kanban_state::text AS kanban_state,
    EXISTS (SELECT 1 FROM event.mails m WHERE m.event_id = e.id) AS has_schedulers
FROM event.events e
WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
FOR NO KEY UPDATE OF e  -- serialises every seat taker of this event
"""
_LOCK_SLOT = "SELECT id FROM event.slots WHERE id = $1 AND event_id = $2 FOR NO KEY UPDATE"
_LOCK_TICKET = """
SELECT id, seats_max, limit_max_per_order, start_sale_datetime, end_sale_datetime
FROM event.tickets WHERE id = $1 AND event_id = $2
FOR NO KEY UPDATE  -- after the event and slot rows: the fixed lock order
"""
_QUESTIONS = """
SELECT q.id, q.question_type::text AS kind, q.is_mandatory_answer, rq.once_per_order,
    ARRAY(SELECT a.id FROM event.question_answers a WHERE a.question_id = q.id) AS answer_ids
FROM event.registration_questions rq JOIN event.questions q ON q.id = rq.question_id
WHERE rq.event_id = $1
"""
# All attendees in one statement, with their audit rows; a barcode collision skips the
# row (ON CONFLICT) and the verb retries it with a fresh barcode.
_INSERT = """
WITH new AS (
    SELECT * FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[])
        AS a(name, email, phone, company_name, barcode)
), ins AS (
    INSERT INTO event.registrations (event_id, event_is_multi_slots, event_slot_id,
        event_ticket_id, state, name, email, phone, company_name, partner_id, barcode,
        company_id, date_open, created_at, updated_at, sale_status, sale_order_id,
        sale_order_state, sale_amount_is_zero, state_origin)
    SELECT $1, $2, $3, $4, $17::event.registration_state, name, email, phone, company_name,
        $10, barcode, $11, CASE WHEN $17 = 'open' THEN $12::timestamptz END, $12, $12,
        $18::event.sale_status, $19, $20::event.sale_order_state, $21,
        $22::event.state_origin
    FROM new
    ON CONFLICT ON CONSTRAINT registrations_barcode_key DO NOTHING
    RETURNING id, event_id, event_slot_id, event_ticket_id, state::text AS state,
        sale_status::text AS sale_status, sale_order_id, name, email, phone, company_name,
        partner_id, barcode, active, date_open, date_closed, version, company_id, created_at,
        updated_at, '[]'::jsonb AS answers, state_origin::text AS state_origin
), audit AS (
    INSERT INTO event.event_audit_log
        (actor_id, actor_kind, company_id, verb, object_kind, object_id, event_id, summary)
    SELECT $13, $14, $15, 'registration_created', 'registration', ins.id, $1, $16::jsonb
    FROM ins
)
SELECT * FROM ins
"""
_INSERT_ANSWERS = """
INSERT INTO event.registration_answers (registration_id, question_id, value_answer_id, value_text)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[])
"""
_IDENTITY_KINDS = {"name", "email", "phone", "company_name"}


def new_barcode() -> str:
    """8 random bytes, little-endian, as a decimal string (Code128C-compact)."""
    return str(int.from_bytes(secrets.token_bytes(8), "little"))


MintState = Literal["open", "draft", "cancel"]


@dataclass(frozen=True)
class SaleMint:
    """How the sale seam mints an order line's attendees: the (state, sale_status) the
    truth table gave (`open` and armed, `draft` holding its seat, or `cancel` for an order
    cancelled before it was confirmed: no seat), and the order."""

    order_id: UUID
    state: MintState
    sale_status: str
    order_state: str
    amount_is_zero: bool


@dataclass
class Registered:
    """What the register verb answers: the new rows, in the order of the attendees."""

    event_id: UUID
    registrations: list[dict[str, Any]] = field(default_factory=list)


def _check_sale_window(ticket: dict[str, Any], now: datetime) -> None:
    start, end = ticket["start_sale_datetime"], ticket["end_sale_datetime"]
    if (start is not None and now < start) or (end is not None and now > end):
        raise errors.SaleWindowClosed(
            ticket_id=str(ticket["id"]),
            start_sale_datetime=start.isoformat() if start else None,
            end_sale_datetime=end.isoformat() if end else None,
        )


def _share_general_answers(
    attendees: list[AttendeeInput], questions: dict[UUID, dict[str, Any]]
) -> list[AttendeeInput]:
    """General questions (`once_per_order`) are asked once per group: the first attendee's
    answer is copied to every other attendee; another attendee may repeat it, never differ."""
    general = {qid for qid, q in questions.items() if q["once_per_order"]}
    if not general or len(attendees) < 2:
        return attendees
    shared = [a for a in attendees[0].answers if a.question_id in general]
    given = {(a.question_id, a.value_answer_id, a.value_text) for a in shared}
    group = [attendees[0]]
    for attendee in attendees[1:]:
        own = []
        for a in attendee.answers:
            if a.question_id not in general:
                own.append(a)
            elif (a.question_id, a.value_answer_id, a.value_text) not in given:
                raise errors.AnswerInvalid(
                    "This question is asked once per order: answer it on the first attendee.",
                    question_id=str(a.question_id),
                )
        group.append(attendee.model_copy(update={"answers": own + shared}))
    return group


def _resolve_answers(
    attendee: AttendeeInput, questions: dict[UUID, dict[str, Any]], require_mandatory: bool
) -> tuple[dict[str, str], list[AnswerInput]]:
    """(identity fields filled from identity questions, answer rows to store)."""
    identity: dict[str, str] = {}
    rows: list[AnswerInput] = []
    seen: set[UUID] = set()
    for answer in attendee.answers:
        q = questions.get(answer.question_id)
        if q is None:
            raise errors.QuestionNotOnEvent(question_id=str(answer.question_id))
        if answer.question_id in seen:
            raise errors.AnswerInvalid("One answer per question.", question_id=str(q["id"]))
        seen.add(answer.question_id)
        kind = q["kind"]
        if kind == "simple_choice":
            if answer.value_answer_id is None or answer.value_text is not None:
                raise errors.AnswerInvalid(
                    "Choose one of the suggested answers.", question_id=str(q["id"])
                )
            if answer.value_answer_id not in q["answer_ids"]:
                raise errors.AnswerNotOfQuestion(question_id=str(q["id"]))
            rows.append(answer)
        elif answer.value_text is None or answer.value_answer_id is not None:
            raise errors.AnswerInvalid("This question takes a text.", question_id=str(q["id"]))
        elif kind in _IDENTITY_KINDS:
            identity[kind] = answer.value_text  # identity kinds create no answer rows
        else:
            rows.append(answer)
    if require_mandatory:
        for q in questions.values():
            if q["is_mandatory_answer"] and q["id"] not in seen:
                raise errors.AnswerRequired(question_id=str(q["id"]))
    return identity, rows


async def _lock_scope(
    conn: Connection,
    actor: Actor,
    event_id: UUID,
    slot_id: UUID | None,
    ticket_id: UUID | None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Lock event, slot, ticket in that order and check they belong together."""
    row = await conn.fetchrow(_LOCK_EVENT, event_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such event.")
    event = dict(row)
    if event["is_multi_slots"] and slot_id is None:
        raise errors.SlotRequired(field="event_slot_id")
    if slot_id is not None:
        if not event["is_multi_slots"]:
            raise errors.SlotNotInEvent("This event does not run in slots.", field="event_slot_id")
        if await conn.fetchrow(_LOCK_SLOT, slot_id, event_id) is None:
            raise errors.SlotNotInEvent(field="event_slot_id")
    ticket = None
    if ticket_id is not None:
        t = await conn.fetchrow(_LOCK_TICKET, ticket_id, event_id)
        if t is None:
            raise errors.TicketNotInEvent(field="event_ticket_id")
        ticket = dict(t)
    return event, ticket


async def register(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    attendees: list[AttendeeInput],
    now: datetime,
    *,
    slot_id: UUID | None = None,
    ticket_id: UUID | None = None,
    partner_id: UUID | None = None,
    source: str = "admin",
    require_mandatory: bool = False,
) -> Registered:
    """Take one seat per attendee, all or none (locks: event, slot, ticket rows)."""
    async with transaction(pool) as conn:
        return await register_in(
            conn,
            actor,
            event_id,
            attendees,
            now,
            slot_id=slot_id,
            ticket_id=ticket_id,
            partner_id=partner_id,
            source=source,
            require_mandatory=require_mandatory,
        )


async def register_in(
    conn: Connection,
    actor: Actor,
    event_id: UUID,
    attendees: list[AttendeeInput],
    now: datetime,
    *,
    slot_id: UUID | None = None,
    ticket_id: UUID | None = None,
    partner_id: UUID | None = None,
    source: str = "admin",
    require_mandatory: bool = False,
    sale: SaleMint | None = None,
    arm_leads: bool = True,
) -> Registered:
    """The register verb inside the caller's transaction (the sale seam's delivery).

    `arm_leads=False` is the bulk imports' declared exemption (IMPORT-EXEMPT): their rows
    queue no lead request."""
    if not attendees:
        raise errors.ValidationFailed("At least one attendee is required.")
    event, ticket = await _lock_scope(conn, actor, event_id, slot_id, ticket_id)
    if event["kanban_state"] == "cancel":
        raise errors.EventCancelled()
    cap = MAX_GROUP
    if ticket is not None:
        _check_sale_window(ticket, now)
        if ticket["limit_max_per_order"] > 0:
            cap = ticket["limit_max_per_order"]
    if len(attendees) > cap:
        raise errors.PerOrderCapExceeded(maximum=cap, requested=len(attendees))
    needs_questions = require_mandatory or any(a.answers for a in attendees)
    questions = (
        {q["id"]: dict(q) for q in await conn.fetch(_QUESTIONS, event_id)}
        if needs_questions
        else {}
    )
    group = _share_general_answers(attendees, questions)
    resolved = [_resolve_answers(a, questions, require_mandatory) for a in group]
    if sale is None or sale.state != "cancel":  # a cancelled row holds no seat
        await ensure_seats(conn, event, slot_id, ticket, len(attendees))
    views = await _insert(
        conn,
        actor,
        event,
        (slot_id, ticket_id, partner_id),
        attendees,
        resolved,
        now,
        source,
        sale,
    )
    ids = [v["id"] for v in views]
    answer_rows = [(rid, a) for rid, (_, rows) in zip(ids, resolved, strict=True) for a in rows]
    if answer_rows:
        await conn.execute(
            _INSERT_ANSWERS,
            [rid for rid, _ in answer_rows],
            [a.question_id for _, a in answer_rows],
            [a.value_answer_id for _, a in answer_rows],
            [a.value_text for _, a in answer_rows],
        )
    if arm_leads:  # trigger `create` on mint; a row minted open is confirmed too
        minted_open = sale is None or sale.state == "open"
        await queue_for_registrations(
            conn, event_id, ids, "confirm" if minted_open else "create", now
        )
    if event["has_schedulers"] and (sale is None or sale.state == "open"):
        await arm_entering_open(conn, event_id, ids, now, stamped=True)
    if answer_rows:  # the views carry no answers yet: read them back
        views = await read_many(conn, ids)
    return Registered(event_id, views)


async def _insert(
    conn: Connection,
    actor: Actor,
    event: dict[str, Any],
    refs: tuple[UUID | None, UUID | None, UUID | None],
    attendees: list[AttendeeInput],
    resolved: list[tuple[dict[str, str], list[AnswerInput]]],
    now: datetime,
    source: str,
    sale: SaleMint | None,
) -> list[dict[str, Any]]:
    """Insert every attendee; rows whose barcode collided are retried with a new one."""
    slot_id, ticket_id, partner_id = refs
    state = sale.state if sale is not None else "open"
    fields = []
    for attendee, (identity, _) in zip(attendees, resolved, strict=True):
        values = {k: getattr(attendee, k) or identity.get(k, "") for k in _IDENTITY_KINDS}
        fields.append(values)
    views: list[dict[str, Any] | None] = [None] * len(attendees)
    for _attempt in range(5):
        pending = [i for i, view in enumerate(views) if view is None]
        if not pending:
            break
        codes = {new_barcode(): i for i in pending}
        rows = await conn.fetch(
            _INSERT,
            event["id"],
            event["is_multi_slots"],
            slot_id,
            ticket_id,
            [fields[i]["name"] for i in codes.values()],
            [fields[i]["email"] for i in codes.values()],
            [fields[i]["phone"] for i in codes.values()],
            [fields[i]["company_name"] for i in codes.values()],
            list(codes),
            partner_id,
            event["company_id"],
            now,
            actor.id,
            actor.kind,
            actor.company_id,
            {"source": source, "state": state},
            state,
            sale.sale_status if sale else None,
            sale.order_id if sale else None,
            sale.order_state if sale else None,
            sale.amount_is_zero if sale else None,
            "sale" if sale else None,
        )
        for row in rows:
            views[codes[row["barcode"]]] = dict(row)
    done = [view for view in views if view is not None]
    if len(done) != len(views):
        raise RuntimeError("could not mint a unique barcode")
    return done
