"""The sale seam's inbox: each order fact applied exactly once, its answer recorded.

A fact's delivery key is its `delivery_id`, else `"<verb>:<order_id>"`; keys are per
order company (`orders`: the actor's company; a platform actor's, the company of the
order's events). `deliver()` decides whose order the fact is about, then answers a key
it has seen from its inbox row with one indexed read. Otherwise, in ONE transaction, it
claims the row (`INSERT .. ON CONFLICT DO NOTHING`: a concurrent delivery of the same
key waits for the first and then reads its outcome), applies the fact, and records
`applied` with the registration ids. When a rule refuses the fact (404, 409, 422), that
transaction rolls back whole, and a second one claims the row again and records the
refusal's code and fields, so a redelivery answers it again (if a concurrent delivery of
the key got recorded in between, its answer is given instead). A transient failure (a
deadlock, `busy`) rolls the claim back with everything else: the billing side retries.
A key reused for another verb or order answers 409 `delivery_key_conflict`. The effect
names the order it acted on; when that is not the order the key was claimed for (a
platform actor's order got a company meanwhile), the attempt rolls back as `busy` and
the retry decides again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, refusal_for, transaction
from events_svc.models.sale import OrderConfirmed, OrderFact
from events_svc.verbs.sale.orders import OrderKey, consumer_of, order_of_id, order_of_lines

Verb = Literal["confirmed", "paid", "cancelled"]
# the rule refusals a delivery records; anything else (503, a bug) is not an outcome
_RECORDED_STATUSES = frozenset({404, 409, 422})

_RECORDED = """
SELECT verb, order_id, outcome, detail, registration_ids, skipped_ids, overbooked
FROM event.seam_inbox WHERE consumer = $1 AND external_id = $2
"""
_CLAIM = """
INSERT INTO event.seam_inbox (consumer, external_id, verb, order_id, actor_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT DO NOTHING
RETURNING true
"""
# the outcome on the inbox row, and the fact's audit row, in one statement
_RECORD = """
WITH recorded AS (
    UPDATE event.seam_inbox SET outcome = $3, detail = $4::jsonb, registration_ids = $5,
        skipped_ids = $6, overbooked = $7
    WHERE consumer = $1 AND external_id = $2
    RETURNING order_id
)
INSERT INTO event.event_audit_log
    (actor_id, actor_kind, company_id, verb, object_kind, object_id, summary)
SELECT $8, $9, $10, $11, 'sale_order', order_id, $12::jsonb FROM recorded
"""
# the order row: every fact of one order takes it first, so facts of an order serialise


@dataclass
class Effect:
    """What an applied fact did."""

    registration_ids: list[UUID] = field(default_factory=list)
    skipped_ids: list[UUID] = field(default_factory=list)
    overbooked: bool = False


async def order_of_fact(conn: Connection, actor: Actor, verb: Verb, fact: OrderFact) -> OrderKey:
    """The order a fact is about (`orders`): a confirmed fact's by its lines' events."""
    if verb == "confirmed" and isinstance(fact, OrderConfirmed):
        return await order_of_lines(conn, actor, fact.order_id, (x.event_id for x in fact.lines))
    return await order_of_id(conn, actor, fact.order_id)


def delivery_key(verb: Verb, fact: OrderFact) -> str:
    """The inbox key: the billing side's delivery id, else `<verb>:<order_id>`."""
    return fact.delivery_id or f"{verb}:{fact.order_id}"


def _answer(key: str, outcome: str, detail: dict[str, Any], effect: Effect) -> dict[str, Any]:
    return {
        "outcome": outcome,
        "delivery_key": key,
        "registration_ids": effect.registration_ids,
        "skipped_ids": effect.skipped_ids,
        "overbooked": effect.overbooked,
        "detail": detail,
    }


def _replay(row: Any, key: str, verb: Verb, order_id: UUID) -> dict[str, Any]:
    """The recorded answer of a key seen before (`already_applied`, or its refusal)."""
    if row["verb"] != verb or row["order_id"] != order_id:
        raise errors.DeliveryKeyConflict(delivery_key=key, recorded_verb=row["verb"])
    outcome = "already_applied" if row["outcome"] == "applied" else row["outcome"]
    effect = Effect(list(row["registration_ids"]), list(row["skipped_ids"]), row["overbooked"])
    return _answer(key, outcome, dict(row["detail"]), effect)


async def _same_order(
    conn: Connection, actor: Actor, verb: Verb, fact: OrderFact, order: OrderKey
) -> None:
    """A platform fact's order is decided before its transaction (its key space holds the
    key); if another company's order of the id appeared meanwhile, the fact is not applied
    to a stale choice: 503 `busy`, and the billing side's retry decides again."""
    try:
        again = await order_of_fact(conn, actor, verb, fact)
    except errors.DomainError:
        again = None
    if again != order:
        raise errors.Busy("The order changed while the fact was applied; retry.")


class _Refused(Exception):
    """A rule refused the fact: its attempt is rolled back, then the refusal recorded."""

    def __init__(self, refusal: errors.DomainError) -> None:
        super().__init__(refusal.code)
        self.refusal = refusal


async def deliver(
    pool: Pool,
    actor: Actor,
    verb: Verb,
    fact: OrderFact,
    apply: Callable[[Connection, OrderKey], Awaitable[Effect]],
    now: datetime,
) -> dict[str, Any]:
    """Apply one fact exactly once and answer its outcome (see the module docstring);
    `apply` acts on the order decided here, whose key space holds the fact's key."""
    key = delivery_key(verb, fact)
    async with connection(pool) as conn:
        order = await order_of_fact(conn, actor, verb, fact)
        consumer = consumer_of(order.company_id)
        seen = await conn.fetchrow(_RECORDED, consumer, key)
    if seen is not None:
        return _replay(seen, key, verb, fact.order_id)
    try:
        async with transaction(pool) as conn:
            claimed = await _claim(conn, consumer, key, verb, fact, actor, now)
            if claimed is not None:
                return claimed
            if actor.company_id is None:  # a platform fact's order may have changed since
                await _same_order(conn, actor, verb, fact, order)
            try:
                effect = await apply(conn, order)
            except asyncpg.IntegrityConstraintViolationError as violated:
                refusal = refusal_for(violated)
                if refusal is None:
                    raise
                raise _Refused(refusal) from None
            except errors.DomainError as refused:
                if refused.status not in _RECORDED_STATUSES:
                    raise
                raise _Refused(refused) from None
            await _record(conn, order, key, verb, actor, "applied", {}, effect)
            return _answer(key, "applied", {}, effect)
    except _Refused as refused:  # every effect is rolled back: claim again, record the refusal
        code, fields = refused.refusal.code, refused.refusal.fields
        detail = {"detail": refused.refusal.detail, **fields}
        async with transaction(pool) as conn:
            claimed = await _claim(conn, consumer, key, verb, fact, actor, now)
            if claimed is not None:  # a concurrent delivery of the key was recorded meanwhile
                return claimed
            await _record(conn, order, key, verb, actor, code, detail, Effect())
            return _answer(key, code, detail, Effect())


async def _claim(
    conn: Connection,
    consumer: str,
    key: str,
    verb: Verb,
    fact: OrderFact,
    actor: Actor,
    now: datetime,
) -> dict[str, Any] | None:
    """Claim the key's inbox row; None when claimed, else the recorded answer (a concurrent
    delivery of the key committed first: the claim waited for it)."""
    if await conn.fetchval(_CLAIM, consumer, key, verb, fact.order_id, actor.id, now):
        return None
    return _replay(must(await conn.fetchrow(_RECORDED, consumer, key)), key, verb, fact.order_id)


async def _record(
    conn: Connection,
    order: OrderKey,
    key: str,
    verb: Verb,
    actor: Actor,
    outcome: str,
    detail: dict[str, Any],
    effect: Effect,
) -> None:
    """The outcome on the inbox row and the fact's audit row (no attendee data; the
    order's company, which a platform actor's audit row does not carry otherwise)."""
    await conn.execute(
        _RECORD,
        consumer_of(order.company_id),
        key,
        outcome,
        detail,
        effect.registration_ids,
        effect.skipped_ids,
        effect.overbooked,
        actor.id,
        actor.kind,
        actor.company_id,
        f"sale_order_{verb}",
        {
            "outcome": outcome,
            "registrations": len(effect.registration_ids),
            "skipped": len(effect.skipped_ids),
            "overbooked": effect.overbooked,
            "order_company_id": str(order.company_id) if order.company_id else None,
        },
    )
