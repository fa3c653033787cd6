"""Start an operation: ONE transaction applies the event change, bumps `ics_sequence`
once, snapshots the audience and moves the operation to `running`.

The locks go event row first (`fence.lock_event`: every writer of the event, and every
registration of it, waits), then the operation row. So two starts of one operation
serialise: the second finds it no longer `previewed` (409 `operation_already_started`).
If-Match must name the revision the operation was previewed on, and the event must
still be on it (412 `stale_revision`). An operation in progress on the event (running,
paused or failed) of the same kind, or of any kind when this start changes the event
(reschedule, cancellation: the other's remaining triggers would carry the event as it
was), is 409 `operation_in_progress` naming its kind (a partial unique index backs the
same-kind rule).

A reschedule or a cancellation writes the event through `verbs.events.change.write_change`
(the same checked write as a PATCH: scheduler lines re-time, one audit row), which bumps
`ics_sequence` by one. A reminder or follow-up leaves the event as it is. The snapshot
holds each active open/done registration (created at or before the cutoff, for a
reminder or follow-up) with its version, and the event's revision and sequence after
the change. An empty audience completes the operation at once (its
`event.operation.completed` webhook fact with it). Any failure rolls the whole
transaction back: no event change, no snapshot, no webhook fact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, must, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_if_match
from events_svc.verbs.events import write_change
from events_svc.verbs.fence import get_event_row, lock_event
from events_svc.verbs.jobs import wake_jobs
from events_svc.verbs.operations.batch import record_completed
from events_svc.verbs.operations.preview import (
    CALENDAR_KINDS,
    check_operation,
    cutoff,
    parse_params,
)
from events_svc.verbs.operations.view import operation_view

_EVENT_OF = """
SELECT o.event_id FROM event.event_operations o JOIN event.events e ON e.id = o.event_id
WHERE o.id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(o.actor_company_id, $2)
"""
_LOCK = """
SELECT id, kind::text AS kind, state::text AS state, params, revision
FROM event.event_operations WHERE id = $1
FOR NO KEY UPDATE  -- after the event row: two starts of one operation serialise here
"""
# an operation in progress on the event that this start must wait for: one of the same
# kind, or, for a start that changes the event (reschedule, cancellation), any: its
# remaining triggers would carry the event as it was before this change
_IN_PROGRESS = """
SELECT kind::text FROM event.event_operations
WHERE event_id = $1 AND id <> $3 AND state IN ('running', 'paused', 'failed')
  AND (kind = $2::event.operation_kind OR $4)
ORDER BY created_at, id
LIMIT 1
"""
_SNAPSHOT = """
WITH snap AS (
    INSERT INTO event.operation_audience (operation_id, registration_id, registration_version,
        event_revision, ics_sequence)
    SELECT $3, r.id, r.version, $4, $5 FROM event.registrations r
    WHERE r.event_id = $1 AND event.in_audience(r.state, r.active, r.created_at, $2)
    RETURNING 1
)
SELECT count(*) FROM snap
"""
_START = """
UPDATE event.event_operations
SET state = (CASE WHEN $2::int = 0 THEN 'completed' ELSE 'running' END)::event.operation_state,
    started_by = $3, event_revision = $4, ics_sequence = $5, ctx_date_begin = $6,
    ctx_date_end = $7, ctx_date_tz = $8, ctx_location = $9, audience = $2,
    started_at = $10, updated_at = $10,
    finished_at = CASE WHEN $2::int = 0 THEN $10::timestamptz END
WHERE id = $1
RETURNING state::text AS state
"""


async def start_operation(
    pool: Pool, actor: Actor, operation_id: UUID, now: datetime, *, if_match: int | None
) -> dict[str, Any]:
    """Apply the change and snapshot the audience in one transaction; the operation."""
    if if_match is None:
        raise errors.PreconditionRequired()
    async with transaction(pool) as conn:
        event_id = await conn.fetchval(_EVENT_OF, operation_id, actor.company_id)
        if event_id is None:
            raise errors.NotFound("No such operation.")
        event = await lock_event(conn, actor, event_id)
        op = must(await conn.fetchrow(_LOCK, operation_id))
        if op["state"] != "previewed":
            raise errors.OperationAlreadyStarted(state=op["state"])
        check_if_match(op["revision"], if_match, name="revision")
        check_if_match(event["revision"], op["revision"], name="revision")
        changes_event = op["kind"] in CALENDAR_KINDS
        busy = await conn.fetchval(_IN_PROGRESS, event_id, op["kind"], operation_id, changes_event)
        if busy is not None:
            raise errors.OperationInProgress(kind=busy)
        params = parse_params(op["kind"], op["params"])
        change = await check_operation(conn, actor, event, op["kind"], params, now)
        if change is not None:  # a reschedule or a cancellation
            audit = {"operation_id": str(operation_id)}
            await write_change(conn, actor, event, change, now, audit=audit)
            event = await get_event_row(conn, actor, event_id)
        audience = int(
            await conn.fetchval(
                _SNAPSHOT,
                event_id,
                cutoff(params),
                operation_id,
                event["revision"],
                event["ics_sequence"],
            )
        )
        state = must(
            await conn.fetchrow(
                _START,
                operation_id,
                audience,
                actor.id,
                event["revision"],
                event["ics_sequence"],
                event["date_begin"],
                event["date_end"],
                event["date_tz"],
                event["location"] or None,
                now,
            )
        )["state"]
        summary = {
            "kind": op["kind"],
            "from": "previewed",
            "to": state,
            "audience": audience,
            "event_revision": event["revision"],
            "ics_sequence": event["ics_sequence"],
        }
        await write_audit(
            conn,
            actor,
            "event_operation_started",
            "event_operation",
            operation_id,
            event_id=event_id,
            summary=summary,
        )
        if state == "running":
            await wake_jobs(conn)
        else:  # nobody to reach: completed at once
            none = {"audience": 0, "processed": 0, "triggers_created": 0, "skipped_inactive": 0}
            await record_completed(
                conn, operation_id, op["kind"], event_id, event["company_id"], none, now
            )
        return await operation_view(conn, actor, operation_id)
