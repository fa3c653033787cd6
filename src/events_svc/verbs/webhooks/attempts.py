"""Webhook attempts: the delivery pass's statements, and the one rule of an answer.

- `fan_out`: takes written facts (`FOR UPDATE SKIP LOCKED`, oldest first), makes one
  message per endpoint that wants each (`event.webhook_wants`), its body fixed now (the
  names of the event and ticket added; the attendee's PII only for `include_pii`), with
  its first attempt due now, and deletes the facts: one statement.
- `claim`: the one leased queue's (`verbs.leases.WEBHOOK_ATTEMPTS`): per active endpoint
  with due attempts (its row locked, `SKIP LOCKED`: one claimer at a time per endpoint,
  any number of processes side by side), its due attempts up to `per_endpoint` less the
  ones leased right now by any process, oldest first, at most `limit` in all, leased
  under a token (a dead holder's rows are due again when the lease ends). So an endpoint
  never has more than `per_endpoint` attempts in flight, however many processes deliver.
- `record`: every answer of a flush in one statement, onto the rows whose token the
  flush still holds (`QUEUE.holding`): the attempt's state, the next attempt of a retried
  message, and the health of the endpoints whose health moves (locked in id order, so two
  processes' flushes never deadlock): a 410 disables at once; 5 days of nothing but
  failures disable.
- `sweep`: messages past the retention whose attempts are over, or whose endpoint is
  disabled (what waits for a disabled endpoint waits at most that long), and previous
  secrets past their overlap.
- `attempt_outcome`: 2xx succeeded; else retried by the webhooks' back-off (`backoff.WEBHOOKS`:
  5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h), then failed; a 410 fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from events_svc.backoff import WEBHOOKS
from events_svc.db import Connection, Pool, affected, connection, transaction
from events_svc.ports import HttpAnswer
from events_svc.verbs.leases import WEBHOOK_ATTEMPTS as QUEUE

GONE = 410
# the passes LISTEN here: a written fact or a queued attempt NOTIFYs it at commit (the
# tables' triggers); a verb that makes waiting attempts due without inserting calls `wake`
# (an endpoint enabled again) or `redelivered` (an operator's redelivery)
WAKE_CHANNEL = "event_webhook_due"

_FAN_OUT = """
WITH taken AS (
    SELECT id FROM event.webhook_facts ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED
), fact AS (
    DELETE FROM event.webhook_facts f USING taken WHERE f.id = taken.id RETURNING f.*
), named AS (
    SELECT fact.id, fact.company_id, fact.event_id, fact.type, fact.occurred_at, fact.pii,
        fact.data || jsonb_strip_nulls(jsonb_build_object(
            'event_name', CASE WHEN fact.type NOT LIKE 'event.%' THEN e.name END,
            'ticket_name', t.name)) AS data
    FROM fact
    LEFT JOIN event.events e ON e.id = fact.event_id
    LEFT JOIN event.tickets t ON t.id = (fact.data ->> 'event_ticket_id')::uuid
), msg AS (
    INSERT INTO event.webhook_messages (endpoint_id, event_type, body, pii_keys, created_at)
    SELECT w.id, n.type, jsonb_build_object('type', n.type, 'timestamp', n.occurred_at,
        'data', n.data || CASE WHEN w.include_pii THEN n.pii ELSE '{}'::jsonb END)::text,
        CASE WHEN w.include_pii AND n.pii <> '{}' THEN
            ARRAY(SELECT jsonb_object_keys(n.pii)) END, $2
    FROM named n
    JOIN event.webhook_endpoints w ON w.active
        AND (w.company_id = n.company_id OR w.company_id IS NULL OR n.company_id IS NULL)
        AND event.webhook_wants(w, n.company_id, n.event_id, n.type)
    ORDER BY n.id
    RETURNING id, endpoint_id
), queued AS (
    INSERT INTO event.webhook_deliveries
        (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
    SELECT id, endpoint_id, 1, 'pending', $2, $2 FROM msg
)
SELECT (SELECT count(*) FROM fact) AS facts, (SELECT count(*) FROM msg) AS messages
"""
_RECORD = """
WITH r AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::int[], $5::text[],
        $6::timestamptz[], $7::timestamptz[])
        AS r(id, state, status, duration_ms, error, attempted_at, next_at)
), done AS (
    UPDATE event.webhook_deliveries d
    SET state = r.state::event.webhook_delivery_state, response_status = r.status,
        duration_ms = r.duration_ms, error = r.error, attempted_at = r.attempted_at,
        next_attempt_at = r.next_at, lease_until = NULL, lease_token = NULL
    FROM r WHERE d.id = r.id AND d.state = 'pending' AND d.id = ANY($10::uuid[])
    RETURNING d.message_id, d.endpoint_id, d.attempt, d.state::text AS state,
        d.next_attempt_at, d.response_status, d.attempted_at
), again AS (
    INSERT INTO event.webhook_deliveries
        (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
    SELECT message_id, endpoint_id, attempt + 1, 'pending', next_attempt_at, $8
    FROM done WHERE state = 'retrying'
    ON CONFLICT DO NOTHING  -- a redelivery queued the next attempt meanwhile
), health AS (
    SELECT endpoint_id,
        (array_agg(state ORDER BY attempted_at DESC))[1] = 'succeeded' AS ok,
        coalesce(bool_or(response_status = 410), false) AS gone,
        min(attempted_at) FILTER (WHERE state <> 'succeeded') AS first_failure,
        count(*) AS attempts
    FROM done GROUP BY endpoint_id
), judged AS (
    SELECT h.endpoint_id, h.gone,
        CASE WHEN h.ok THEN NULL ELSE coalesce(w.failing_since, h.first_failure) END AS since
    FROM health h JOIN event.webhook_endpoints w ON w.id = h.endpoint_id
), moving AS (  -- only the endpoints whose health moves, locked in id order
    SELECT w.id, w.active AS was_active, j.gone, j.since, w.failing_since AS current_failing
    FROM event.webhook_endpoints w JOIN judged j ON j.endpoint_id = w.id
    WHERE w.failing_since IS DISTINCT FROM j.since
       OR (w.active AND (j.gone OR j.since <= $8 - $9::interval))
    ORDER BY w.id
    FOR NO KEY UPDATE OF w
), endpoint AS (
    UPDATE event.webhook_endpoints w
    SET failing_since = m.since,
        active = w.active AND NOT m.gone AND (m.since IS NULL OR m.since > $8 - $9::interval),
        disabled_reason = CASE
            WHEN NOT w.active THEN w.disabled_reason
            WHEN m.gone THEN 'gone'
            WHEN m.since <= $8 - $9::interval THEN 'failing'
        END
    FROM (  -- a failure keeps the earlier first failure another record wrote meanwhile
        SELECT id, gone, was_active,
            CASE WHEN since IS NOT NULL THEN least(since, current_failing) END AS since
        FROM moving
    ) m WHERE w.id = m.id
    RETURNING w.id, w.active, m.was_active
)
SELECT (SELECT sum(attempts) FROM health)::int AS recorded,
    ARRAY(SELECT id FROM endpoint WHERE was_active AND NOT active) AS disabled
"""
_NEXT_DUE = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM event.webhook_facts) THEN $1::timestamptz ELSE (
    SELECT min(d.next_attempt_at) FROM event.webhook_deliveries d
    JOIN event.webhook_endpoints w ON w.id = d.endpoint_id AND w.active
    WHERE d.state = 'pending') END
"""
_SWEEP = """
DELETE FROM event.webhook_messages m WHERE m.id IN (
    SELECT old.id FROM event.webhook_messages old
    JOIN event.webhook_endpoints w ON w.id = old.endpoint_id
    WHERE old.created_at < $1 AND (NOT w.active OR NOT EXISTS (
        SELECT 1 FROM event.webhook_deliveries d
        WHERE d.message_id = old.id AND d.state = 'pending'))
    ORDER BY old.created_at LIMIT $2
    FOR UPDATE OF old SKIP LOCKED)
"""
# a message made by a fan-out that overlapped the patch turning `include_pii` off
_SCRUB_STRAYS = """
UPDATE event.webhook_messages m
SET body = event.webhook_body_without_pii(m.body, m.pii_keys), pii_keys = NULL
FROM event.webhook_endpoints w
WHERE NOT w.include_pii AND m.endpoint_id = w.id AND m.pii_keys IS NOT NULL
"""
_FORGET_SECRETS = """
UPDATE event.webhook_endpoints SET previous_secret = NULL, previous_secret_until = NULL
WHERE previous_secret_until <= $1
"""
_PENDING = "SELECT count(*) FROM event.webhook_deliveries WHERE state = 'pending'"
FAILING_LIMIT = timedelta(days=5)
PER_ENDPOINT = 4  # attempts in flight at once to one endpoint, across every process
# attempts one process has in flight at most: the sender's connections, so an attempt never
# waits for one of ours and times out on a receiver that did nothing wrong
MAX_IN_FLIGHT = 200


@dataclass(frozen=True)
class Job:
    """One claimed attempt: what the sender needs, and the lease the record checks."""

    id: UUID
    message_id: UUID
    endpoint_id: UUID
    attempt: int
    event_type: str
    body: bytes = field(repr=False)  # PII, for an endpoint with include_pii
    url: str = field(repr=False)  # a receiver may carry a token in its query
    secrets: tuple[str, ...] = field(repr=False)
    lease_until: datetime
    lease_token: UUID

    @property
    def webhook_id(self) -> str:
        """The `webhook-id` header: the message's, on every attempt."""
        return "msg_" + self.message_id.hex


@dataclass(frozen=True)
class Outcome:
    job: Job
    answer: HttpAnswer
    attempted_at: datetime
    state: str
    next_attempt_at: datetime | None


def attempt_outcome(job: Job, answer: HttpAnswer, now: datetime) -> Outcome:
    """The one rule of an answer (see the module docstring)."""
    if answer.ok:
        return Outcome(job, answer, now, "succeeded", None)
    retry_at = None if answer.status == GONE else WEBHOOKS.next_at(job.attempt, now)
    if retry_at is None:
        return Outcome(job, answer, now, "failed", None)
    return Outcome(job, answer, now, "retrying", retry_at)


@dataclass(frozen=True)
class Recorded:
    recorded: int
    disabled: list[UUID]


REDELIVER = "redeliver"  # the payload of an operator's redelivery: sent now, whatever waits


async def wake(conn: Connection) -> None:
    """Wake every delivery pass when this transaction commits."""
    await conn.execute("SELECT pg_notify($1, '')", WAKE_CHANNEL)


async def redelivered(conn: Connection) -> None:
    """Have every delivery pass claim now, whatever back-off it holds, when this
    transaction commits (an operator's redelivery is sent within seconds)."""
    await conn.execute("SELECT pg_notify($1, $2)", WAKE_CHANNEL, REDELIVER)


async def fan_out(pool: Pool, now: datetime, limit: int) -> tuple[int, int]:
    """Make messages of up to `limit` facts: (facts taken, messages made)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_FAN_OUT, limit, now)
    return (int(row["facts"]), int(row["messages"])) if row is not None else (0, 0)


async def claim(
    pool: Pool,
    now: datetime,
    per_endpoint: int,
    lease: timedelta,
    limit: int | None = None,
) -> list[Job]:
    """Due attempts of the active endpoints, at most `per_endpoint` leased at once to
    each (counting every process's), at most `limit` in all, leased until `now + lease`."""
    most = MAX_IN_FLIGHT if limit is None else limit
    taken = await QUEUE.claim(pool, now, most, lease, per_endpoint)
    until, token = taken.lease.until, taken.lease.token
    return [
        Job(
            id=r["id"],
            message_id=r["message_id"],
            endpoint_id=r["endpoint_id"],
            attempt=r["attempt"],
            event_type=r["event_type"],
            body=r["body"].encode(),
            url=r["url"],
            secrets=tuple(s for s in (r["secret"], r["previous"]) if s),
            lease_until=until,
            lease_token=token,
        )
        for r in taken.rows
    ]


async def record(pool: Pool, outcomes: list[Outcome], now: datetime) -> Recorded:
    """Write a flush's answers in one statement (see the module docstring)."""
    if not outcomes:
        return Recorded(0, [])
    columns: tuple[list[object], ...] = ([], [], [], [], [], [], [])
    for o in outcomes:
        values = (
            o.job.id,
            o.state,
            o.answer.status,
            o.answer.duration_ms,
            o.answer.error,
            o.attempted_at,
            o.next_attempt_at,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    held = [(o.job.id, o.job.lease_token) for o in outcomes]
    async with QUEUE.holding(pool, held) as (conn, kept):
        if not kept:
            return Recorded(0, [])
        row = await conn.fetchrow(_RECORD, *columns, now, FAILING_LIMIT, list(kept))
    if row is None:
        return Recorded(0, [])
    return Recorded(int(row["recorded"] or 0), list(row["disabled"]))


async def next_due(pool: Pool, now: datetime) -> datetime | None:
    """When the pass has work next: now while facts wait, else the earliest waiting
    attempt of an active endpoint (None: nothing waits)."""
    async with connection(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, now)
    return due


async def sweep(pool: Pool, now: datetime, before: datetime, limit: int) -> int:
    """Delete up to `limit` messages written before `before` whose attempts are all over
    or whose endpoint is disabled (their delivery log goes with them), forget the
    previous secrets whose overlap ended by `now`, and take the PII out of the messages
    kept for an endpoint that no longer receives it."""
    async with transaction(pool) as conn:
        await conn.execute(_FORGET_SECRETS, now)
        await conn.execute(_SCRUB_STRAYS)
        return affected(await conn.execute(_SWEEP, before, limit))


async def pending_count(pool: Pool) -> int:
    """Attempts waiting to be made, for the metrics."""
    async with connection(pool) as conn:
        return int(await conn.fetchval(_PENDING))
