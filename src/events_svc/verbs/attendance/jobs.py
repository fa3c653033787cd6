"""Attendance import jobs: create (rows stored first), read, resume and cancel.

**Create** is one transaction: the event, authorized for the actor first (another
company's: 404), is held `FOR KEY SHARE`; the job is claimed with `INSERT ... ON CONFLICT
DO NOTHING` on (event, Idempotency-Key, the actor's company) — no row back means the key
was used already, and the answer is that job, nothing stored twice —, then every row is
stored in one `unnest` insert, the creation audited (counts only) and the job passes
woken (`event_jobs_due`). An import of zero rows is a job `completed` at once.

**Resume** (from `queued`, `running`, `paused` or `failed`; a `paused`/`failed` job's
failures and back-off are cleared, audited) runs batches now, for at most
`RESUME_BUDGET_S` seconds, and answers the job; a job another worker is working is left
to it. **Cancel** (from any state but `completed`) waits for the batch in hand, then
stops the job: unclaimed rows stay unprocessed, processed ones are never rewritten.
Cancelling a cancelled job answers it unchanged; resuming a finished (completed or
cancelled) one, or cancelling a completed one, is 409 `import_finished`.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.verbs.attendance.batch import ImportOptions, audit_job, run_import_pass
from events_svc.verbs.attendance.parse import StoredRow
from events_svc.verbs.audit import write_audit
from events_svc.verbs.jobs import wake_jobs

RESUME_BUDGET_S = 10.0
RESUME_BATCHES = 10_000  # bounded by the budget first
MAX_ERRORS_SHOWN = 100

_EVENT = """
SELECT id FROM event.events WHERE id = $1 AND event.visible_to(company_id, $2)
FOR KEY SHARE  -- the event stays while its job and rows are written
"""
_CLAIM = """
INSERT INTO event.attendance_imports (event_id, idempotency_key, actor_id, actor_kind,
    actor_company_id, state, total, finished_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5,
    (CASE WHEN $6::int = 0 THEN 'completed' ELSE 'queued' END)::event.attendance_import_state,
    $6, CASE WHEN $6::int = 0 THEN $7::timestamptz END, $7, $7)
ON CONFLICT ON CONSTRAINT attendance_imports_key DO NOTHING
RETURNING id, state::text AS state
"""
_REPLAY = """
SELECT id FROM event.attendance_imports
WHERE event_id = $1 AND idempotency_key = $2
  AND (actor_company_id = $3 OR (actor_company_id IS NULL AND $3::uuid IS NULL))
"""
_STORE_ROWS = """
INSERT INTO event.attendance_import_rows (job_id, row_no, barcode, registration_id, malformed)
SELECT $1, x.row_no, x.barcode, x.registration_id, x.barcode IS NULL AND x.registration_id IS NULL
FROM unnest($2::int[], $3::text[], $4::uuid[]) AS x(row_no, barcode, registration_id)
"""
# the job of an import the actor may see: its event is visible, and so is its creator's
# company (a platform operator's job is visible to whoever sees the event)
_VIEW = """
SELECT j.id, j.event_id, j.state::text AS state, j.total, j.processed, j.marked,
    j.already_marked, j.error_count, j.last_error, j.attempts, j.next_attempt_at,
    j.created_at, j.updated_at, j.finished_at,
    coalesce((
        SELECT jsonb_agg(jsonb_build_object('row', x.row_no, 'code', x.outcome)
                         ORDER BY x.row_no)
        FROM (SELECT r.row_no, r.outcome FROM event.attendance_import_rows r
              WHERE r.job_id = j.id AND r.outcome NOT IN ('marked', 'already_marked')
              ORDER BY r.row_no LIMIT $3) x), '[]'::jsonb) AS errors
FROM event.attendance_imports j JOIN event.events e ON e.id = j.event_id
WHERE j.id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(j.actor_company_id, $2)
"""
# the jobs of an event the actor may see, newest first (the console's list of imports)
_LIST = """
SELECT j.id, j.state::text AS state, j.total, j.processed, j.marked, j.already_marked,
    j.error_count, j.created_at, j.finished_at
FROM event.attendance_imports j JOIN event.events e ON e.id = j.event_id
WHERE j.event_id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(j.actor_company_id, $2)
ORDER BY j.created_at DESC, j.id DESC
LIMIT $3
"""
_EVENT_SEEN = "SELECT id FROM event.events WHERE id = $1 AND event.visible_to(company_id, $2)"
_LOCK = """
SELECT j.id, j.event_id, j.state::text AS state, j.processed, j.total
FROM event.attendance_imports j JOIN event.events e ON e.id = j.event_id
WHERE j.id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(j.actor_company_id, $2)
FOR NO KEY UPDATE OF j  -- waits for the batch in hand (it holds the job row)
"""
_CANCEL = """
UPDATE event.attendance_imports
SET state = 'cancelled', finished_at = $2, next_attempt_at = NULL, updated_at = $2
WHERE id = $1
"""
_REVIVE = """
UPDATE event.attendance_imports
SET state = (CASE WHEN processed > 0 THEN 'running' ELSE 'queued' END)
        ::event.attendance_import_state,
    attempts = 0, last_error = NULL, next_attempt_at = NULL, updated_at = $2
WHERE id = $1
RETURNING state::text AS state
"""


async def _view(conn: Connection, actor: Actor, job_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_VIEW, job_id, actor.company_id, MAX_ERRORS_SHOWN)
    if row is None:
        raise errors.NotFound("No such attendance import.")
    return dict(row)


async def create_import(
    pool: Pool, actor: Actor, event_id: UUID, key: str, rows: list[StoredRow], now: datetime
) -> tuple[dict[str, Any], bool]:
    """(the job, whether this call created it): one job per (event, key, actor's company);
    locks the event row (key share)."""
    async with transaction(pool) as conn:
        if await conn.fetchval(_EVENT, event_id, actor.company_id) is None:
            raise errors.NotFound("No such event.")
        claimed = await conn.fetchrow(
            _CLAIM, event_id, key, actor.id, actor.kind, actor.company_id, len(rows), now
        )
        if claimed is None:  # the key was used: its job, as it is now
            job_id = must(await conn.fetchrow(_REPLAY, event_id, key, actor.company_id))["id"]
            return await _view(conn, actor, job_id), False
        job_id = claimed["id"]
        if rows:
            await conn.execute(
                _STORE_ROWS,
                job_id,
                [r.row_no for r in rows],
                [r.barcode for r in rows],
                [r.registration_id for r in rows],
            )
            await wake_jobs(conn)
        malformed = sum(1 for r in rows if r.malformed)
        summary = {"total": len(rows), "malformed": malformed, "state": claimed["state"]}
        await write_audit(
            conn,
            actor,
            "attendance_import_created",
            "attendance_import",
            job_id,
            event_id=event_id,
            summary=summary,
        )
        return await _view(conn, actor, job_id), True


async def get_import(pool: Pool, actor: Actor, job_id: UUID) -> dict[str, Any]:
    """The job with its counters and first 100 errors (404 when the actor cannot see it)."""
    async with connection(pool) as conn:
        return await _view(conn, actor, job_id)


async def list_imports(
    pool: Pool, actor: Actor, event_id: UUID, limit: int = 20
) -> list[dict[str, Any]]:
    """The newest `limit` jobs of an event with their counters, scoped like `get_import`
    (404 when the actor cannot see the event); no rows, no attendee data."""
    async with connection(pool) as conn:
        if await conn.fetchval(_EVENT_SEEN, event_id, actor.company_id) is None:
            raise errors.NotFound("No such event.")
        return [dict(r) for r in await conn.fetch(_LIST, event_id, actor.company_id, limit)]


async def cancel_import(pool: Pool, actor: Actor, job_id: UUID, now: datetime) -> dict[str, Any]:
    """Stop a job's unclaimed rows (locks the job row, after the batch in hand)."""
    async with transaction(pool) as conn:
        job = await conn.fetchrow(_LOCK, job_id, actor.company_id)
        if job is None:
            raise errors.NotFound("No such attendance import.")
        if job["state"] == "completed":
            raise errors.ImportFinished("The import job is completed: nothing is left to stop.")
        if job["state"] != "cancelled":
            await conn.execute(_CANCEL, job_id, now)
            counts = {"processed": int(job["processed"]), "total": int(job["total"])}
            await audit_job(
                conn, actor, job_id, job["event_id"], job["state"], "cancelled", **counts
            )
        return await _view(conn, actor, job_id)


async def resume_import(
    pool: Pool, actor: Actor, job_id: UUID, options: ImportOptions, now: datetime
) -> dict[str, Any]:
    """Clear a paused or failed job's back-off (locks the job row), then run its batches
    now within the resume budget; the job as it then is."""
    async with transaction(pool) as conn:
        job = await conn.fetchrow(_LOCK, job_id, actor.company_id)
        if job is None:
            raise errors.NotFound("No such attendance import.")
        if job["state"] in ("completed", "cancelled"):
            raise errors.ImportFinished()
        if job["state"] in ("paused", "failed"):
            after = must(await conn.fetchrow(_REVIVE, job_id, now))["state"]
            await audit_job(conn, actor, job_id, job["event_id"], job["state"], after, resumed=True)
            await wake_jobs(conn)  # what the resume budget leaves is the loops'
    whole = dataclasses.replace(options, cap=RESUME_BATCHES)
    await run_import_pass(pool, whole, now, job_id=job_id, budget_s=RESUME_BUDGET_S)
    return await get_import(pool, actor, job_id)
