"""The one leased queue: everything that leaves the building is claimed here.

The shape, for every outward row (an outbox message, a webhook attempt, a lead request, a
trigger receipt): **claim** due rows in one short transaction (`FOR UPDATE SKIP LOCKED`,
so any number of processes claim disjoint rows), writing a lease (`lease_until`, after
which the rows are due again: a claimant that died gives them back by itself) and a
token (`lease_token`, a random uuid of this claim); **act** outside any transaction (the
relay, the gateway, the receiver, the CRM, the partner directory are never awaited while
a lock is held); **record** the answers in a transaction that first locks the rows the
token still holds (`holding`: a claimant whose lease ran out, and whose rows another
claimed since, records nothing over the new holder's); **give back** what was not tried
(`give_back`: the lease cleared, the row due now, nothing else changed). A queue whose
work may outlast one lease (the lead requests) **renews** what it still holds (`renew`).

Every claim statement of the service is in this module (`make lint` checks it), one
`LeasedQueue` per table: `OUTBOX`, `WEBHOOK_ATTEMPTS`, `LEAD_REQUESTS`,
`TRIGGER_RECEIPTS`. What a channel writes when it records (its states, its back-off) is
the channel's own; which rows it may write is decided here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from events_svc.db import Connection, Pool, affected, transaction


@dataclass(frozen=True)
class Lease:
    """One claim's hold: its token, and when it runs out."""

    token: UUID
    until: datetime


@dataclass(frozen=True)
class Claim:
    """The rows one claim took, as its statement returned them."""

    lease: Lease
    rows: list[dict[str, Any]]

    def held(self, key: str = "id") -> list[tuple[UUID, UUID]]:
        """(row key, token) of every row, for `holding` and `give_back`."""
        return [(row[key], self.lease.token) for row in self.rows]


ClaimStatement = Callable[[Connection, datetime, int, Lease, tuple[Any, ...]], Awaitable[list[Any]]]


@dataclass(frozen=True)
class LeasedQueue:
    """One table's claim, hold and give-back (see the module docstring)."""

    name: str
    claim_rows: ClaimStatement
    hold_sql: str  # $1 keys, $2 tokens: the rows still held, locked in key order
    give_back_sql: str  # $1 keys, $2 tokens, $3 now: lease cleared, due now
    renew_sql: str | None = None  # $1 keys, $2 tokens, $3 until: the lease moved on

    async def claim(
        self, pool: Pool, now: datetime, limit: int, lease: timedelta, *args: Any
    ) -> Claim:
        """Claim up to `limit` due rows until `now + lease` (the queue's own arguments
        after these)."""
        held = Lease(uuid4(), now + lease)
        if limit <= 0:
            return Claim(held, [])
        async with transaction(pool) as conn:
            rows = await self.claim_rows(conn, now, limit, held, args)
        return Claim(held, [dict(r) for r in rows])

    @asynccontextmanager
    async def holding(
        self, pool: Pool, held: Sequence[tuple[UUID, UUID]]
    ) -> AsyncIterator[tuple[Connection, set[UUID]]]:
        """A transaction in which the rows of `held` (key, token) that their token still
        holds are locked; yields the connection and those keys. Everything the caller
        writes there commits together, onto those rows only."""
        async with transaction(pool) as conn:
            if held:
                keys = [k for k, _ in held]
                tokens = [t for _, t in held]
                rows = await conn.fetch(self.hold_sql, keys, tokens)
                kept = {r[0] for r in rows}
            else:
                kept = set()
            yield conn, kept

    async def renew(
        self, pool: Pool, held: Sequence[tuple[UUID, UUID]], until: datetime
    ) -> set[UUID]:
        """The rows of `held` that their token still holds, leased on until `until`
        (for a queue whose work may outlast one lease); their keys."""
        if self.renew_sql is None:
            raise TypeError(f"the {self.name} queue's leases are not renewed")
        if not held:
            return set()
        keys = [k for k, _ in held]
        tokens = [t for _, t in held]
        async with transaction(pool) as conn:
            return {r[0] for r in await conn.fetch(self.renew_sql, keys, tokens, until)}

    async def give_back(self, pool: Pool, held: Sequence[tuple[UUID, UUID]], now: datetime) -> int:
        """The rows of `held` that were not tried, back to the queue as they were (due
        now); how many the tokens still held."""
        if not held:
            return 0
        keys = [k for k, _ in held]
        tokens = [t for _, t in held]
        async with transaction(pool) as conn:
            return affected(await conn.execute(self.give_back_sql, keys, tokens, now))


# --- the outbox (mail, sms) -----------------------------------------------------------------

# $5 the channels this process can send, $6 messages to take first (an operator's retry:
# it is the one tried when the channel resumes, whatever else became due meanwhile)
_OUTBOX_CLAIM = """
WITH retried AS (
    SELECT id FROM event.outbox_messages
    WHERE id = ANY($6::uuid[]) AND delivery_state IN ('queued', 'retrying', 'sending')
      AND next_attempt_at <= $1 AND channel = ANY($5::event.notification_channel[])
    FOR UPDATE SKIP LOCKED
), due AS (
    SELECT id FROM event.outbox_messages
    WHERE delivery_state IN ('queued', 'retrying', 'sending') AND next_attempt_at <= $1
      AND channel = ANY($5::event.notification_channel[]) AND NOT (id = ANY($6::uuid[]))
    ORDER BY next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED  -- rows another drainer is claiming are left to it
), taken AS (
    SELECT id, true AS retried FROM retried
    UNION ALL
    (SELECT id, false FROM due LIMIT greatest(0, $2 - (SELECT count(*) FROM retried)))
)
UPDATE event.outbox_messages o
SET delivery_state = 'sending', lease_until = $3, lease_token = $4,
    next_attempt_at = $3  -- a lease that runs out makes the row due again
FROM taken WHERE o.id = taken.id
RETURNING o.id, o.channel::text AS channel, o.message_id, o.recipient, o.sender, o.reply_to,
    o.subject, o.body, o.attachments, o.event_id, o.registration_id, o.created_at, o.attempts,
    taken.retried
"""


async def _claim_outbox(
    conn: Connection, now: datetime, limit: int, lease: Lease, args: tuple[Any, ...]
) -> list[Any]:
    channels, retried = args
    return list(
        await conn.fetch(_OUTBOX_CLAIM, now, limit, lease.until, lease.token, channels, retried)
    )


OUTBOX = LeasedQueue(
    "outbox",
    _claim_outbox,
    hold_sql="""
SELECT o.id FROM event.outbox_messages o
JOIN unnest($1::uuid[], $2::uuid[]) AS h(id, token) ON o.id = h.id AND o.lease_token = h.token
WHERE o.delivery_state = 'sending'
ORDER BY o.id
FOR NO KEY UPDATE OF o
""",
    # untried: back to queued (or retrying when it was tried before), due now
    give_back_sql="""
UPDATE event.outbox_messages o
SET delivery_state = CASE WHEN o.attempts > 0 THEN 'retrying' ELSE 'queued'
                     END::event.delivery_state,
    next_attempt_at = $3, lease_until = NULL, lease_token = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE o.id = h.id AND o.lease_token = h.token AND o.delivery_state = 'sending'
""",
)


# --- webhook attempts -------------------------------------------------------------------------

# the endpoints with due attempts that no other claim holds, locked until the claim commits:
# the claim's own statement, which starts after this lock, sees every lease of the others
_WEBHOOK_READY = """
SELECT w.id FROM event.webhook_endpoints w
WHERE w.active AND EXISTS (
    SELECT 1 FROM event.webhook_deliveries d
    WHERE d.endpoint_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= $1)
ORDER BY w.id
FOR NO KEY UPDATE SKIP LOCKED
"""
# per ready endpoint, its due attempts up to $5 (in flight at once per endpoint) less the
# ones leased right now by any process, oldest first, at most $2 in all
_WEBHOOK_CLAIM = """
WITH ready AS (
    SELECT unnest($6::uuid[]) AS id
), due AS (
    SELECT d.id, d.next_attempt_at FROM ready
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM event.webhook_deliveries h
        WHERE h.endpoint_id = ready.id AND h.state = 'pending' AND h.lease_until > $1
    ) held
    CROSS JOIN LATERAL (
        SELECT d.id, d.next_attempt_at FROM event.webhook_deliveries d
        WHERE d.endpoint_id = ready.id AND d.state = 'pending' AND d.next_attempt_at <= $1
        ORDER BY d.next_attempt_at
        LIMIT greatest(0, $5 - held.n)
        FOR UPDATE SKIP LOCKED
    ) d
    ORDER BY d.next_attempt_at
    LIMIT $2
)
UPDATE event.webhook_deliveries d SET lease_until = $3, lease_token = $4, next_attempt_at = $3
FROM due, event.webhook_messages m, event.webhook_endpoints w
WHERE d.id = due.id AND m.id = d.message_id AND w.id = d.endpoint_id
RETURNING d.id, d.message_id, d.endpoint_id, d.attempt, m.event_type,
    CASE WHEN w.include_pii THEN m.body
        ELSE event.webhook_body_without_pii(m.body, m.pii_keys) END AS body, w.url,
    w.secret, CASE WHEN w.previous_secret_until > $1 THEN w.previous_secret END AS previous
"""


async def _claim_webhook_attempts(
    conn: Connection, now: datetime, limit: int, lease: Lease, args: tuple[Any, ...]
) -> list[Any]:
    (per_endpoint,) = args
    ready = [r["id"] for r in await conn.fetch(_WEBHOOK_READY, now)]
    if not ready:
        return []
    return list(
        await conn.fetch(_WEBHOOK_CLAIM, now, limit, lease.until, lease.token, per_endpoint, ready)
    )


WEBHOOK_ATTEMPTS = LeasedQueue(
    "webhook_attempts",
    _claim_webhook_attempts,
    hold_sql="""
SELECT d.id FROM event.webhook_deliveries d
JOIN unnest($1::uuid[], $2::uuid[]) AS h(id, token) ON d.id = h.id AND d.lease_token = h.token
WHERE d.state = 'pending'
ORDER BY d.id
FOR NO KEY UPDATE OF d
""",
    give_back_sql="""
UPDATE event.webhook_deliveries d
SET next_attempt_at = $3, lease_until = NULL, lease_token = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE d.id = h.id AND d.lease_token = h.token AND d.state = 'pending'
""",
)


# --- lead requests ----------------------------------------------------------------------------

# $5 force (the officer's run: the back-off ignored, never a lease), $6 one event only, $7
# requests worked once in this pass already, $8 a company's run (its company's events only)
_LEAD_CLAIM = """
WITH picked AS (
    SELECT id FROM event.lead_requests
    WHERE NOT done
      AND ($5::boolean OR next_attempt_at IS NULL OR next_attempt_at <= $1)
      AND (lease_until IS NULL OR lease_until <= $1)
      AND ($6::uuid IS NULL OR event_id = $6)
      AND NOT (id = ANY($7::uuid[]))
      AND ($8::uuid IS NULL OR EXISTS (
          SELECT 1 FROM event.events e WHERE e.id = event_id AND e.company_id = $8))
    ORDER BY queued_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED  -- a request another pass is claiming is left to it
)
UPDATE event.lead_requests q
SET claimed_at = $1, lease_until = $3, lease_token = $4, claimed_generation = q.generation,
    updated_at = $1
FROM picked WHERE q.id = picked.id
RETURNING q.id, q.event_id, q.attempts, q.error_detail
"""


async def _claim_lead_requests(
    conn: Connection, now: datetime, limit: int, lease: Lease, args: tuple[Any, ...]
) -> list[Any]:
    return list(await conn.fetch(_LEAD_CLAIM, now, limit, lease.until, lease.token, *args))


LEAD_REQUESTS = LeasedQueue(
    "lead_requests",
    _claim_lead_requests,
    hold_sql="""
SELECT q.id FROM event.lead_requests q
JOIN unnest($1::uuid[], $2::uuid[]) AS h(id, token) ON q.id = h.id AND q.lease_token = h.token
ORDER BY q.id
FOR NO KEY UPDATE OF q
""",
    give_back_sql="""
UPDATE event.lead_requests q
SET claimed_at = NULL, lease_until = NULL, lease_token = NULL, claimed_generation = NULL,
    updated_at = $3
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE q.id = h.id AND q.lease_token = h.token
""",
    renew_sql="""
UPDATE event.lead_requests q SET lease_until = $3
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE q.id = h.id AND q.lease_token = h.token
RETURNING q.id
""",
)


# --- trigger receipts (the dispatcher) --------------------------------------------------------

_RECEIPT_CLAIM = """
WITH due AS (
    SELECT trigger_id FROM event.trigger_dispatch_receipts
    WHERE state IN ('pending', 'parked') AND next_attempt_at <= $1
    ORDER BY next_attempt_at, seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED  -- one instance works a receipt; a held one is another's
)
UPDATE event.trigger_dispatch_receipts d
SET lease_until = $3, lease_token = $4, next_attempt_at = $3
FROM due, event.triggers t, event.events e
WHERE d.trigger_id = due.trigger_id AND t.id = d.trigger_id AND e.id = t.event_id
RETURNING d.trigger_id, e.organizer_id, e.company_id
"""


async def _claim_receipts(
    conn: Connection, now: datetime, limit: int, lease: Lease, args: tuple[Any, ...]
) -> list[Any]:
    return list(await conn.fetch(_RECEIPT_CLAIM, now, limit, lease.until, lease.token))


TRIGGER_RECEIPTS = LeasedQueue(
    "trigger_receipts",
    _claim_receipts,
    hold_sql="""
SELECT d.trigger_id FROM event.trigger_dispatch_receipts d
JOIN unnest($1::uuid[], $2::uuid[]) AS h(id, token)
    ON d.trigger_id = h.id AND d.lease_token = h.token
WHERE d.state IN ('pending', 'parked')
ORDER BY d.trigger_id
FOR NO KEY UPDATE OF d
""",
    give_back_sql="""
UPDATE event.trigger_dispatch_receipts d
SET next_attempt_at = $3, lease_until = NULL, lease_token = NULL
FROM unnest($1::uuid[], $2::uuid[]) AS h(id, token)
WHERE d.trigger_id = h.id AND d.lease_token = h.token AND d.state IN ('pending', 'parked')
""",
)
