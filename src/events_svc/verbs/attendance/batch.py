"""The import pass: works import jobs in batches, each batch ONE transaction.

**A batch** picks one job with work (`queued`, `running`, or `paused` whose back-off is
over) `FOR NO KEY UPDATE SKIP LOCKED` (one batch of a job at a time, so an earlier row
of the job is always settled before a later one: `duplicate_row` is decided on settled
rows; a job another worker holds is left to it), claims its next `batch` unprocessed
rows in row order `FOR UPDATE SKIP LOCKED`, and resolves each one set-based (barcode
exact match, or id; visible to the job's actor; archived or invisible:
`unknown_barcode`; another event: `wrong_event`). It then locks the event row once
(`registrations.states.lock_event_by_id`), then the named registrations of this event in
ONE statement ordered by id (the lock strength of `registrations.records.lock_registration`,
one round trip for the batch; the lock order event -> registration), decides each row on
the locked registration (archived meanwhile: `unknown_barcode`; named by an
earlier row: `duplicate_row`; `draft`/`cancel`: `not_confirmed`; `done`:
`already_marked`; `open`: `marked` through `states.write_state`, the ONE transition,
which stamps `date_closed` and audits `registration_set_done` as the job's actor, and
arms nothing on `open -> done`), records the webhook facts of the batch's marks at once
(`registrations.record_transitions`: one statement per type, not one per row), records
every row's outcome, advances the counters and moves the job to `completed` once no row
is left. Every state change of the job writes one audit row.

**A failing batch** (an error, not a row outcome) rolls back whole; the job records the
error's class (never its message), counts the failure, and backs off by the one rule of
`verbs.jobs` (`paused` 5 s, 10 s, 20 s, 40 s; the 5th failure in a row makes it
`failed`, and only `resume` revives it). A successful batch clears the count.
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
from events_svc.verbs.jobs import after_failure, failure_code, run_batches, work_one_batch
from events_svc.verbs.registrations import lock_event_by_id, record_transitions, write_state

log = logging.getLogger("events_svc.attendance")

MAX_BATCH = 10_000
PASS_BATCHES = 20  # batches per pass of the loop (then `more`: the loop comes back at once)

_PICK = """
SELECT id, event_id, state::text AS state, total, processed, attempts, actor_id, actor_kind,
    actor_company_id
FROM event.attendance_imports
WHERE state IN ('queued', 'running', 'paused')
  AND (next_attempt_at IS NULL OR next_attempt_at <= $1)
  AND ($2::uuid IS NULL OR id = $2)
ORDER BY created_at, id
LIMIT 1
FOR NO KEY UPDATE SKIP LOCKED  -- one batch of a job at a time; a held job is another's
"""
_CLAIM = """
WITH claimed AS (
    SELECT row_no, barcode, registration_id, malformed
    FROM event.attendance_import_rows
    WHERE job_id = $1 AND outcome IS NULL
    ORDER BY row_no
    LIMIT $2
    FOR UPDATE SKIP LOCKED  -- rows another worker claimed are left to it
)
SELECT c.row_no, c.malformed, r.id AS registration_id, r.event_id, r.active,
    -- both values given: they must name the same registration
    (c.barcode IS NULL OR r.barcode = c.barcode) AND event.visible_to(r.company_id, $3)
        AS named
FROM claimed c
LEFT JOIN event.registrations r ON r.id = coalesce(
    c.registration_id, (SELECT b.id FROM event.registrations b WHERE b.barcode = c.barcode))
ORDER BY c.row_no
"""
# a registration named by an earlier row of the job (earlier batches are settled: the job
# row serialises its batches)
_NAMED_EARLIER = """
SELECT DISTINCT resolved_registration_id AS id FROM event.attendance_import_rows
WHERE job_id = $1 AND resolved_registration_id = ANY($2::uuid[]) AND outcome IS NOT NULL
  AND outcome <> 'wrong_event'
"""
# the columns `states.write_state` reads, for every named registration of this event, in id
# order: the lock order of `registrations.records.lock_registration`, one statement for the batch
_LOCK_REGISTRATIONS = """
SELECT id, event_id, state::text AS state, active, version, date_closed, event_slot_id,
    event_ticket_id, sale_order_id, sale_status::text AS sale_status,
    state_origin::text AS state_origin, hold_expires_at
FROM event.registrations WHERE id = ANY($1::uuid[])
ORDER BY id
FOR NO KEY UPDATE  -- after the event row (the fixed lock order); ids in order: no deadlock
"""
_RECORD = """
UPDATE event.attendance_import_rows r
SET outcome = x.outcome::event.attendance_import_outcome, resolved_registration_id = x.reg
FROM unnest($2::int[], $3::text[], $4::uuid[]) AS x(row_no, outcome, reg)
WHERE r.job_id = $1 AND r.row_no = x.row_no
"""
_ADVANCE = """
UPDATE event.attendance_imports
SET processed = processed + $2, marked = marked + $3, already_marked = already_marked + $4,
    error_count = error_count + $5,
    state = (CASE WHEN processed + $2 >= total THEN 'completed' ELSE 'running' END)
        ::event.attendance_import_state,
    finished_at = CASE WHEN processed + $2 >= total THEN $6::timestamptz END,
    attempts = 0, last_error = NULL, next_attempt_at = NULL, updated_at = $6
WHERE id = $1
RETURNING state::text AS state, processed, marked, already_marked, error_count
"""
_LOCK_JOB = """
SELECT state::text AS state, attempts FROM event.attendance_imports WHERE id = $1
FOR NO KEY UPDATE  -- the failed batch rolled back: nothing else holds the job now
"""
_SET_FAILURE = """
UPDATE event.attendance_imports
SET state = $2::event.attendance_import_state, attempts = $3, last_error = $4,
    last_error_at = $5, next_attempt_at = $6, updated_at = $5
WHERE id = $1
"""
_NEXT_DUE = """
SELECT min(coalesce(next_attempt_at, $1)) FROM event.attendance_imports
WHERE state IN ('queued', 'running', 'paused')
"""


@dataclass(frozen=True)
class ImportOptions:
    """`batch`: rows per batch transaction; `cap`: batches per pass."""

    batch: int = 500
    cap: int = PASS_BATCHES

    @classmethod
    def from_settings(cls, settings: Settings) -> ImportOptions:
        return cls(batch=min(settings.import_batch, MAX_BATCH))


@dataclass
class ImportSummary:
    batches: int = 0
    rows: int = 0
    marked: int = 0
    completed: int = 0
    failed: int = 0
    more: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def job_actor(job: dict[str, Any]) -> Actor:
    """The actor who created the job, as its batches audit and see."""
    return Actor(
        id=job["actor_id"],
        kind=job["actor_kind"],
        scopes=frozenset({"attendance:write"}),
        company_id=job["actor_company_id"],
    )


async def audit_job(
    conn: Connection,
    actor: Actor,
    job_id: UUID,
    event_id: UUID,
    before: str,
    after: str,
    **counts: Any,
) -> None:
    """The one audit row of a job's state change: states, counts and codes only."""
    summary = {"from": before, "to": after, **counts}
    await write_audit(
        conn,
        actor,
        f"attendance_import_{after}",
        "attendance_import",
        job_id,
        event_id=event_id,
        summary=summary,
    )


def _first_pass(rows: list[dict[str, Any]], event_id: UUID) -> dict[int, tuple[str, UUID | None]]:
    """Outcomes decided without a lock: malformed, unknown, wrong event."""
    decided: dict[int, tuple[str, UUID | None]] = {}
    for row in rows:
        if row["malformed"]:
            decided[row["row_no"]] = ("malformed_row", None)
        elif row["registration_id"] is None or not row["named"] or not row["active"]:
            decided[row["row_no"]] = ("unknown_barcode", None)
        elif row["event_id"] != event_id:
            decided[row["row_no"]] = ("wrong_event", row["registration_id"])
    return decided


async def _mark_named(
    conn: Connection,
    job: dict[str, Any],
    rows: list[dict[str, Any]],
    decided: dict[int, tuple[str, UUID | None]],
    now: datetime,
) -> None:
    """Decide the rows naming a registration of the job's event on the locked rows (event
    row first, then the registrations in id order), marking the open ones."""
    named = sorted({r["registration_id"] for r in rows if r["row_no"] not in decided})
    if not named:
        return
    actor = job_actor(job)
    earlier = {r["id"] for r in await conn.fetch(_NAMED_EARLIER, job["id"], named)}
    event = await lock_event_by_id(conn, job["event_id"])
    locked = {r["id"]: dict(r) for r in await conn.fetch(_LOCK_REGISTRATIONS, named)}
    note = {"source": "import", "job": str(job["id"])}
    marked: list[UUID] = []
    for row in (r for r in rows if r["row_no"] not in decided):
        reg = locked.get(row["registration_id"])
        if reg is None or not reg["active"]:  # archived while we waited for the lock
            decided[row["row_no"]] = ("unknown_barcode", None)
            continue
        if reg["id"] in earlier:
            decided[row["row_no"]] = ("duplicate_row", reg["id"])
            continue
        earlier.add(reg["id"])
        if reg["state"] in ("draft", "cancel"):
            decided[row["row_no"]] = ("not_confirmed", reg["id"])
        elif reg["state"] == "done":
            decided[row["row_no"]] = ("already_marked", reg["id"])
        else:
            await write_state(
                conn,
                actor,
                event,
                None,
                reg,
                "done",
                now,
                origin="officer",
                sale_status=reg["sale_status"],
                note=note,
                facts=False,  # the batch's, at once below
            )
            decided[row["row_no"]] = ("marked", reg["id"])
            marked.append(reg["id"])
    await record_transitions(conn, marked, "open", "done", now)


async def _work(
    conn: Connection, job: dict[str, Any], batch: int, now: datetime
) -> tuple[str, dict[str, int]]:
    """One batch of a picked job (locks: its rows, then the event, then registrations);
    (the job's state after it, the batch's counts)."""
    actor = job_actor(job)
    rows = [dict(r) for r in await conn.fetch(_CLAIM, job["id"], batch, actor.company_id)]
    decided = _first_pass(rows, job["event_id"])
    await _mark_named(conn, job, rows, decided, now)
    order = [r["row_no"] for r in rows]
    outcomes = [decided[n][0] for n in order]
    if order:
        await conn.execute(_RECORD, job["id"], order, outcomes, [decided[n][1] for n in order])
    marked, already = outcomes.count("marked"), outcomes.count("already_marked")
    after = must(
        await conn.fetchrow(
            _ADVANCE, job["id"], len(order), marked, already, len(order) - marked - already, now
        )
    )
    counts = {k: int(after[k]) for k in ("processed", "marked", "already_marked", "error_count")}
    if after["state"] != job["state"]:
        await audit_job(
            conn, actor, job["id"], job["event_id"], job["state"], after["state"], **counts
        )
    return str(after["state"]), {"rows": len(order), "marked": marked}


async def _record_failure(pool: Pool, job: dict[str, Any], exc: Exception, now: datetime) -> str:
    """Count the failure on the job and back it off (or fail it at the 5th in a row); the
    job's state after it."""
    code = failure_code(exc)
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_LOCK_JOB, job["id"])
        if current is None or current["state"] not in ("queued", "running", "paused"):
            return str(current["state"]) if current else "cancelled"  # nothing to back off
        attempts = int(current["attempts"]) + 1
        state, retry_at = after_failure(attempts, now)
        await conn.execute(_SET_FAILURE, job["id"], state, attempts, code, now, retry_at)
        if current["state"] != state:
            await audit_job(
                conn,
                job_actor(job),
                job["id"],
                job["event_id"],
                current["state"],
                state,
                error=code,
                attempts=attempts,
            )
    fields = {**error_fields(exc), "job_id": str(job["id"]), "attempts": attempts, "state": state}
    level = logging.WARNING if attempts == 1 or state == "failed" else logging.DEBUG
    log.log(level, "attendance import batch failed", extra={"fields": fields})
    return state


async def run_batch(
    pool: Pool, options: ImportOptions, now: datetime, job_id: UUID | None = None
) -> tuple[UUID, str, dict[str, int]] | None:
    """One batch of the first due job (or of `job_id`): (job, its state after, counts), or
    None when no job is due and free. A failing batch is recorded on its job (state then
    `paused` or `failed`)."""

    async def pick(conn: Connection) -> Any:
        return await conn.fetchrow(_PICK, now, job_id)

    async def work(conn: Connection, job: dict[str, Any]) -> tuple[UUID, str, dict[str, int]]:
        return (job["id"], *await _work(conn, job, options.batch, now))

    async def fail(job: dict[str, Any], exc: Exception) -> tuple[UUID, str, dict[str, int]]:
        return job["id"], await _record_failure(pool, job, exc, now), {}

    return await work_one_batch(pool, pick, work, fail)


async def run_import_pass(
    pool: Pool,
    options: ImportOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
    job_id: UUID | None = None,
    budget_s: float | None = None,
) -> ImportSummary:
    """Batches until no job is due (or `job_id` has no work left, or another worker holds
    it), `cap` batches were run, or `budget_s` seconds passed (`more` then says work may be
    left). `stopping` is asked before each batch: a shutdown finishes the batch in hand."""
    summary = ImportSummary()

    def done(result: tuple[UUID, str, dict[str, int]]) -> None:
        _, state, counts = result
        summary.rows += counts.get("rows", 0)
        summary.marked += counts.get("marked", 0)
        summary.completed += state == "completed"
        summary.failed += not counts

    summary.batches, summary.more = await run_batches(
        lambda: run_batch(pool, options, now, job_id),
        done,
        cap=options.cap,
        budget_s=budget_s,
        stopping=stopping,
    )
    return summary


async def next_import_due(pool: Pool, now: datetime) -> datetime | None:
    """When the earliest job with work may be picked (`now` when one may be already), or
    None when no job has work."""
    async with transaction(pool) as conn:
        due: datetime | None = await conn.fetchval(_NEXT_DUE, now)
    return due
