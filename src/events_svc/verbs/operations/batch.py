"""The operations pass: turns started operations' audience snapshots into triggers, in
batches, each batch ONE transaction.

**A batch** picks one operation with work (`running`, or `paused` whose back-off is
over) `FOR NO KEY UPDATE SKIP LOCKED` (one batch of an operation at a time; an operation
another worker holds is left to it), then claims its next `batch` unworked snapshot rows
in registration order `FOR UPDATE SKIP LOCKED`. A claimed registration that is still
active and `open`/`done` (read `FOR SHARE`, so a concurrent cancel waits for the batch,
or the batch for it) gets a trigger carrying its version as the batch reads it; one that
is not any more is counted `skipped_inactive` and gets none. Triggers are inserted with
ON CONFLICT DO NOTHING on their identity: a trigger that exists already (a replay) is
counted as this operation's (outcome `existing`), never written twice; it can only be
this operation's own, since a calendar sequence belongs to one start and a message
identity names the operation. Every snapshot
row records its outcome once; the counters advance; the last batch completes the
operation. Writers of triggers take one transaction-level advisory lock just before they
insert (after the claim and the registration locks), so the feed's order (`seq`) is
their commit order and the lock is held only for the writes and the commit.

The batch (or the start, for an empty audience) that completes an operation records the
`event.operation.completed` webhook fact (the event's company): the operation's id,
kind and counts, and its event's id.

**A failing batch** rolls back whole; the operation records the error's code or class
(never its message; the last 20 are kept), counts the failure and backs off by the one
rule of `verbs.jobs`. A successful batch clears the count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Connection, Pool, must, transaction
from events_svc.diagnostics import error_fields
from events_svc.settings import Settings
from events_svc.verbs.audit import write_audit
from events_svc.verbs.facts import record_fact
from events_svc.verbs.jobs import after_failure, failure_code, run_batches, work_one_batch
from events_svc.verbs.operations.preview import PURPOSE

log = logging.getLogger("events_svc.operations")

MAX_BATCH = 10_000
PASS_BATCHES = 20  # batches per pass of the loop (then `more`: the loop comes back at once)
ERRORS_KEPT = 20
# the feed's writers' lock: the identity order of triggers is their commit order
FEED_LOCK = 0x7472_6967  # "trig"
METHOD = {"event_rescheduled": "REQUEST", "event_cancelled": "CANCEL"}

_PICK = """
SELECT id, event_id, kind::text AS kind, state::text AS state, audience, processed,
    attempts, event_revision, ics_sequence, ctx_date_begin, ctx_date_end, ctx_date_tz,
    ctx_location, actor_id, actor_kind, actor_company_id,
    (SELECT e.company_id FROM event.events e WHERE e.id = o.event_id) AS company_id
FROM event.event_operations o
WHERE state IN ('running', 'paused')
  AND (next_attempt_at IS NULL OR next_attempt_at <= $1)
  AND ($2::uuid IS NULL OR id = $2)
ORDER BY started_at, id
LIMIT 1
FOR NO KEY UPDATE SKIP LOCKED  -- one batch of an operation at a time
"""
_FEED_LOCK = "SELECT pg_advisory_xact_lock($1)"
# claim the next snapshot rows and read (and share-lock) those still in the audience
_CLAIM = """
WITH claimed AS (
    SELECT registration_id FROM event.operation_audience
    WHERE operation_id = $1 AND outcome IS NULL
    ORDER BY registration_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), live AS (
    SELECT r.id, r.version, r.event_slot_id FROM event.registrations r
    WHERE r.id IN (SELECT registration_id FROM claimed) AND r.event_id = $3
      AND event.in_audience(r.state, r.active, r.created_at, NULL)
    ORDER BY r.id
    FOR SHARE  -- a concurrent state change waits for the batch (or the batch for it)
)
SELECT c.registration_id, l.id IS NOT NULL AS live, l.version, l.event_slot_id,
    s.date_begin AS slot_begin, s.date_end AS slot_end
FROM claimed c
LEFT JOIN live l ON l.id = c.registration_id
LEFT JOIN event.slots s ON s.id = l.event_slot_id
ORDER BY c.registration_id
"""
# write the live ones' triggers (a trigger of the same identity is this operation's own:
# a calendar sequence belongs to one start, a message identity names the operation) and
# record every claimed row's outcome
_WRITE = """
WITH written AS (
    INSERT INTO event.triggers (operation_id, event_id, registration_id, purpose,
        event_revision, registration_version, ics_sequence, ics_method, ctx_date_begin,
        ctx_date_end, ctx_date_tz, ctx_location, event_slot_id, ctx_slot_begin, ctx_slot_end,
        created_at)
    SELECT $1, $2, x.id, $3::event.trigger_purpose, $4, x.version, $5, $6, $7, $8, $9, $10,
        x.slot_id, x.slot_begin, x.slot_end, $11
    FROM unnest($12::uuid[], $13::int[], $14::uuid[], $15::timestamptz[], $16::timestamptz[])
        AS x(id, version, slot_id, slot_begin, slot_end)
    ORDER BY x.id
    ON CONFLICT DO NOTHING
    RETURNING registration_id
)
UPDATE event.operation_audience a
SET outcome = (CASE
    WHEN a.registration_id IN (SELECT registration_id FROM written) THEN 'created'
    WHEN a.registration_id = ANY($12::uuid[]) THEN 'existing'
    ELSE 'skipped_inactive' END)::event.audience_outcome
WHERE a.operation_id = $1 AND a.registration_id = ANY($17::uuid[])
"""
_ADVANCE = """
UPDATE event.event_operations
SET processed = processed + $2, triggers_created = triggers_created + $3,
    skipped_inactive = skipped_inactive + $4,
    state = (CASE WHEN processed + $2 >= audience THEN 'completed' ELSE 'running' END)
        ::event.operation_state,
    finished_at = CASE WHEN processed + $2 >= audience THEN $5::timestamptz END,
    attempts = 0, next_attempt_at = NULL, updated_at = $5
WHERE id = $1
RETURNING state::text AS state, processed, triggers_created, skipped_inactive
"""
_LOCK_OPERATION = """
SELECT state::text AS state, attempts, errors FROM event.event_operations WHERE id = $1
FOR NO KEY UPDATE  -- the failed batch rolled back: nothing else holds the operation now
"""
_SET_FAILURE = """
UPDATE event.event_operations
SET state = $2::event.operation_state, attempts = $3, errors = $4::jsonb,
    error_count = error_count + 1, next_attempt_at = $5, updated_at = $6
WHERE id = $1
"""
_NEXT_DUE = """
SELECT min(coalesce(next_attempt_at, $1)) FROM event.event_operations
WHERE state IN ('running', 'paused')
"""


@dataclass(frozen=True)
class OperationOptions:
    """`batch`: snapshot rows per batch transaction; `cap`: batches per pass."""

    batch: int = 1000
    cap: int = PASS_BATCHES

    @classmethod
    def from_settings(cls, settings: Settings) -> OperationOptions:
        return cls(batch=min(settings.operation_batch, MAX_BATCH))


@dataclass
class OperationSummary:
    batches: int = 0
    triggers: int = 0
    completed: int = 0
    failed: int = 0
    more: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def operation_actor(op: dict[str, Any]) -> Actor:
    """The actor who previewed the operation, as its batches audit."""
    return Actor(
        id=op["actor_id"],
        kind=op["actor_kind"],
        scopes=frozenset({"event:operate"}),
        company_id=op["actor_company_id"],
    )


async def audit_operation(
    conn: Connection,
    actor: Actor,
    op_id: UUID,
    event_id: UUID,
    before: str,
    after: str,
    **counts: Any,
) -> None:
    """The one audit row of an operation's state change: states, counts and codes only."""
    await write_audit(
        conn,
        actor,
        f"event_operation_{after}",
        "event_operation",
        op_id,
        event_id=event_id,
        summary={"from": before, "to": after, **counts},
    )


async def record_completed(
    conn: Connection,
    operation_id: UUID,
    kind: str,
    event_id: UUID,
    company_id: UUID | None,
    counts: dict[str, int],
    now: datetime,
) -> None:
    """The `event.operation.completed` webhook fact: ids, kind and counts."""
    data = {
        "operation_id": str(operation_id),
        "kind": kind,
        "event_id": str(event_id),
        "state": "completed",
        "finished_at": now.isoformat(),
        **counts,
    }
    await record_fact(
        conn,
        "event.operation.completed",
        now,
        company_id=company_id,
        event_id=event_id,
        data=data,
    )


async def _work(conn: Connection, op: dict[str, Any], batch: int, now: datetime) -> tuple[str, int]:
    """One batch of a picked operation; (its state after it, triggers written or found).
    Locks: the snapshot rows, the registrations (share), then the feed's lock, held only
    while the triggers are written and the batch commits."""
    purpose = PURPOSE[op["kind"]]
    claimed = [dict(r) for r in await conn.fetch(_CLAIM, op["id"], batch, op["event_id"])]
    live = [r for r in claimed if r["live"]]
    if claimed:
        await conn.execute(_FEED_LOCK, FEED_LOCK)
        await conn.execute(
            _WRITE,
            op["id"],
            op["event_id"],
            purpose,
            op["event_revision"],
            op["ics_sequence"],
            METHOD.get(purpose),
            op["ctx_date_begin"],
            op["ctx_date_end"],
            op["ctx_date_tz"],
            op["ctx_location"],
            now,
            [r["registration_id"] for r in live],
            [r["version"] for r in live],
            [r["event_slot_id"] for r in live],
            [r["slot_begin"] for r in live],
            [r["slot_end"] for r in live],
            [r["registration_id"] for r in claimed],
        )
    triggered, skipped = len(live), len(claimed) - len(live)
    after = must(
        await conn.fetchrow(_ADVANCE, op["id"], triggered + skipped, triggered, skipped, now)
    )
    if after["state"] != op["state"]:
        counts = {k: int(after[k]) for k in ("processed", "triggers_created", "skipped_inactive")}
        await audit_operation(
            conn,
            operation_actor(op),
            op["id"],
            op["event_id"],
            op["state"],
            after["state"],
            **counts,
        )
        if after["state"] == "completed":
            whole = {"audience": int(op["audience"]), **counts}
            await record_completed(
                conn, op["id"], op["kind"], op["event_id"], op["company_id"], whole, now
            )
    return str(after["state"]), triggered


async def _record_failure(pool: Pool, op: dict[str, Any], exc: Exception, now: datetime) -> str:
    """Count the failure on the operation and back it off (or fail it); its state after."""
    code = failure_code(exc)
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_LOCK_OPERATION, op["id"])
        if current is None or current["state"] not in ("running", "paused"):
            return str(current["state"]) if current else "cancelled"  # nothing to back off
        attempts = int(current["attempts"]) + 1
        state, retry_at = after_failure(attempts, now)
        kept = [*current["errors"], {"code": code, "at": now.isoformat()}][-ERRORS_KEPT:]
        await conn.execute(_SET_FAILURE, op["id"], state, attempts, kept, retry_at, now)
        if current["state"] != state:
            await audit_operation(
                conn,
                operation_actor(op),
                op["id"],
                op["event_id"],
                current["state"],
                state,
                error=code,
                attempts=attempts,
            )
    fields = {**error_fields(exc), "operation_id": str(op["id"]), "attempts": attempts}
    level = logging.WARNING if attempts == 1 or state == "failed" else logging.DEBUG
    log.log(level, "event operation batch failed", extra={"fields": {**fields, "state": state}})
    return state


async def run_batch(
    pool: Pool, options: OperationOptions, now: datetime, operation_id: UUID | None = None
) -> tuple[UUID, str, int] | None:
    """One batch of the first due operation (or of `operation_id`): (operation, its state
    after, triggers), or None when none is due and free. A failing batch is recorded on
    its operation (then `paused` or `failed`) and answers -1 triggers."""

    async def pick(conn: Connection) -> Any:
        return await conn.fetchrow(_PICK, now, operation_id)

    async def work(conn: Connection, op: dict[str, Any]) -> tuple[UUID, str, int]:
        return (op["id"], *await _work(conn, op, options.batch, now))

    async def fail(op: dict[str, Any], exc: Exception) -> tuple[UUID, str, int]:
        return op["id"], await _record_failure(pool, op, exc, now), -1

    return await work_one_batch(pool, pick, work, fail)


async def run_operation_pass(
    pool: Pool,
    options: OperationOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
    operation_id: UUID | None = None,
    budget_s: float | None = None,
) -> OperationSummary:
    """Batches until no operation is due (or `operation_id` has no work left, or another
    worker holds it), `cap` batches ran, or `budget_s` seconds passed (`more` then says
    work may be left). `stopping` is asked before each batch."""
    summary = OperationSummary()

    def done(result: tuple[UUID, str, int]) -> None:
        _, state, triggered = result
        summary.triggers += max(triggered, 0)
        summary.completed += state == "completed"
        summary.failed += triggered < 0

    summary.batches, summary.more = await run_batches(
        lambda: run_batch(pool, options, now, operation_id),
        done,
        cap=options.cap,
        budget_s=budget_s,
        stopping=stopping,
    )
    return summary


async def next_operation_due(pool: Pool, now: datetime) -> datetime | None:
    """When the earliest operation with work may be picked (`now` when one may be
    already), or None when none has work."""
    async with transaction(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, now)
    return due
