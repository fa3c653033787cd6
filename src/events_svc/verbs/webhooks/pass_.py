"""The delivery pass's statements, and the one rule of an attempt's answer.

- `fan_out`: takes written facts (`FOR UPDATE SKIP LOCKED`, oldest first), makes one
  message per endpoint that wants each (`event.webhook_wants`), its body fixed now (the
  names of the event and ticket added; the attendee's PII only for `include_pii`), with
  its first attempt due now, and deletes the facts: one statement.
- `claim`: per active endpoint, its due attempts, at most `room` of them less what this
  process already holds for it, leased until `lease_until` (`SKIP LOCKED`: any number of
  processes claim disjoint rows; a dead holder's rows are due again when the lease ends).
- `record`: every answer of a flush in one statement, only onto rows whose lease the
  flush still holds: the attempt's state, the next attempt of a retried message, and the
  endpoints' health (a 410 disables at once; 5 days of nothing but failures disable).
- `settle`: 2xx succeeded; else retried after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and
  10 h, then failed; a 410 fails at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from events_svc.db import Pool, affected, connection, transaction

SCHEDULE = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=10),
)
GONE = 410

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
    INSERT INTO event.webhook_messages (endpoint_id, event_type, body, created_at)
    SELECT w.id, n.type, jsonb_build_object('type', n.type, 'timestamp', n.occurred_at,
        'data', n.data || CASE WHEN w.include_pii THEN n.pii ELSE '{}'::jsonb END)::text, $2
    FROM named n
    JOIN event.webhook_endpoints w ON event.webhook_wants(w, n.company_id, n.event_id, n.type)
    ORDER BY n.id
    RETURNING id, endpoint_id
), queued AS (
    INSERT INTO event.webhook_deliveries
        (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
    SELECT id, endpoint_id, 1, 'pending', $2, $2 FROM msg
)
SELECT (SELECT count(*) FROM fact) AS facts, (SELECT count(*) FROM msg) AS messages
"""
_CLAIM = """
WITH room AS (
    SELECT * FROM unnest($2::uuid[], $3::int[]) AS r(endpoint_id, held)
), due AS (
    SELECT d.id FROM event.webhook_endpoints w
    LEFT JOIN room ON room.endpoint_id = w.id
    CROSS JOIN LATERAL (
        SELECT d.id FROM event.webhook_deliveries d
        WHERE d.endpoint_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= $1
        ORDER BY d.next_attempt_at
        LIMIT greatest(0, $4 - coalesce(room.held, 0))
        FOR UPDATE SKIP LOCKED
    ) d
    WHERE w.active
)
UPDATE event.webhook_deliveries d SET lease_until = $5, next_attempt_at = $5
FROM due, event.webhook_messages m, event.webhook_endpoints w
WHERE d.id = due.id AND m.id = d.message_id AND w.id = d.endpoint_id
RETURNING d.id, d.message_id, d.endpoint_id, d.attempt, m.event_type, m.body, w.url,
    w.secret, CASE WHEN w.previous_secret_until > $1 THEN w.previous_secret END AS previous
"""
_RECORD = """
WITH r AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::int[], $5::text[],
        $6::timestamptz[], $7::timestamptz[], $8::timestamptz[])
        AS r(id, state, status, duration_ms, error, attempted_at, next_at, lease)
), done AS (
    UPDATE event.webhook_deliveries d
    SET state = r.state::event.webhook_delivery_state, response_status = r.status,
        duration_ms = r.duration_ms, error = r.error, attempted_at = r.attempted_at,
        next_attempt_at = r.next_at, lease_until = NULL
    FROM r WHERE d.id = r.id AND d.state = 'pending' AND d.lease_until = r.lease
    RETURNING d.message_id, d.endpoint_id, d.attempt, d.state::text AS state,
        d.next_attempt_at, d.response_status, d.attempted_at
), again AS (
    INSERT INTO event.webhook_deliveries
        (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
    SELECT message_id, endpoint_id, attempt + 1, 'pending', next_attempt_at, $9
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
    SELECT h.*, w.active AS was_active,
        CASE WHEN h.ok THEN NULL ELSE coalesce(w.failing_since, h.first_failure) END AS since
    FROM health h JOIN event.webhook_endpoints w ON w.id = h.endpoint_id
), endpoint AS (
    UPDATE event.webhook_endpoints w
    SET failing_since = j.since,
        active = w.active AND NOT j.gone AND (j.since IS NULL OR j.since > $9 - $10::interval),
        disabled_reason = CASE
            WHEN NOT w.active THEN w.disabled_reason
            WHEN j.gone THEN 'gone'
            WHEN j.since <= $9 - $10::interval THEN 'failing'
        END
    FROM judged j WHERE w.id = j.endpoint_id
    RETURNING w.id, w.active, w.disabled_reason, j.was_active
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
    WHERE old.created_at < $1 AND NOT EXISTS (
        SELECT 1 FROM event.webhook_deliveries d
        WHERE d.message_id = old.id AND d.state = 'pending')
    ORDER BY old.created_at LIMIT $2
    FOR UPDATE SKIP LOCKED)
"""
_PENDING = "SELECT count(*) FROM event.webhook_deliveries WHERE state = 'pending'"
FAILING_LIMIT = timedelta(days=5)


@dataclass(frozen=True)
class Job:
    """One claimed attempt: what the sender needs, and the lease the record checks."""

    id: UUID
    message_id: UUID
    endpoint_id: UUID
    attempt: int
    event_type: str
    body: bytes
    url: str
    secrets: tuple[str, ...]
    lease_until: datetime

    @property
    def webhook_id(self) -> str:
        """The `webhook-id` header: the message's, on every attempt."""
        return "msg_" + self.message_id.hex


@dataclass(frozen=True)
class Answer:
    """What one attempt got: the status (None: no answer), how long it took, and why it
    failed without a status (`timeout`, `connection`, `address_not_allowed`)."""

    status: int | None
    duration_ms: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class Outcome:
    job: Job
    answer: Answer
    attempted_at: datetime
    state: str
    next_attempt_at: datetime | None


def settle(job: Job, answer: Answer, now: datetime) -> Outcome:
    """The one rule of an answer (see the module docstring)."""
    if answer.ok:
        return Outcome(job, answer, now, "succeeded", None)
    if answer.status == GONE or job.attempt > len(SCHEDULE):
        return Outcome(job, answer, now, "failed", None)
    return Outcome(job, answer, now, "retrying", now + SCHEDULE[job.attempt - 1])


@dataclass(frozen=True)
class Recorded:
    recorded: int
    disabled: list[UUID]


async def fan_out(pool: Pool, now: datetime, limit: int) -> tuple[int, int]:
    """Make messages of up to `limit` facts: (facts taken, messages made)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_FAN_OUT, limit, now)
    return (int(row["facts"]), int(row["messages"])) if row is not None else (0, 0)


async def claim(
    pool: Pool,
    now: datetime,
    held: dict[UUID, int],
    room: int,
    lease: timedelta,
) -> list[Job]:
    """Due attempts of every active endpoint, at most `room` per endpoint counting the
    `held` ones this process already works on, leased until `now + lease`."""
    until = now + lease
    ids, counts = list(held), list(held.values())
    async with transaction(pool) as conn:
        rows = await conn.fetch(_CLAIM, now, ids, counts, room, until)
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
        )
        for r in rows
    ]


async def record(pool: Pool, outcomes: list[Outcome], now: datetime) -> Recorded:
    """Write a flush's answers in one statement (see the module docstring)."""
    if not outcomes:
        return Recorded(0, [])
    columns: tuple[list[object], ...] = ([], [], [], [], [], [], [], [])
    for o in outcomes:
        values = (
            o.job.id,
            o.state,
            o.answer.status,
            o.answer.duration_ms,
            o.answer.error,
            o.attempted_at,
            o.next_attempt_at,
            o.job.lease_until,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_RECORD, *columns, now, FAILING_LIMIT)
    if row is None:
        return Recorded(0, [])
    return Recorded(int(row["recorded"] or 0), list(row["disabled"]))


async def next_due(pool: Pool, now: datetime) -> datetime | None:
    """When the pass has work next: now while facts wait, else the earliest waiting
    attempt of an active endpoint (None: nothing waits)."""
    async with connection(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, now)
    return due


async def sweep(pool: Pool, before: datetime, limit: int) -> int:
    """Delete up to `limit` messages written before `before` whose attempts are all over
    (their delivery log goes with them)."""
    async with transaction(pool) as conn:
        return affected(await conn.execute(_SWEEP, before, limit))


async def pending_count(pool: Pool) -> int:
    """Attempts waiting to be made, for the metrics."""
    async with connection(pool) as conn:
        return int(await conn.fetchval(_PENDING))
