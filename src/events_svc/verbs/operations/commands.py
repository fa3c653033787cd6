"""Read, resume and cancel an operation.

**Resume** (from `running`, `paused` or `failed`; a paused or failed operation's back-off
is cleared, audited) runs its batches now, for at most `RESUME_BUDGET_S` seconds, and
answers the operation; an operation another worker is working is left to it. A
`previewed` operation is started, not resumed (409 `operation_not_started`).

**Cancel** (from `previewed`, `running`, `paused` or `failed`) waits for the batch in
hand (it holds the operation row), then stops the operation: a previewed one can no
longer start, unclaimed snapshot rows stay unworked, and no trigger is ever deleted or
rewritten. Cancelling a cancelled operation answers it unchanged; resuming a finished
one (completed or cancelled), or cancelling a completed one, is 409
`operation_finished`.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection, must, transaction
from events_svc.verbs.jobs import wake_jobs
from events_svc.verbs.operations.batch import (
    OperationOptions,
    audit_operation,
    run_operation_pass,
)
from events_svc.verbs.operations.view import operation_view

RESUME_BUDGET_S = 10.0
RESUME_BATCHES = 10_000  # bounded by the budget first

_LOCK = """
SELECT o.id, o.event_id, o.state::text AS state, o.processed, o.audience
FROM event.event_operations o JOIN event.events e ON e.id = o.event_id
WHERE o.id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(o.actor_company_id, $2)
FOR NO KEY UPDATE OF o  -- waits for the batch in hand (it holds the operation row)
"""
_CANCEL = """
UPDATE event.event_operations
SET state = 'cancelled', finished_at = $2, next_attempt_at = NULL, updated_at = $2
WHERE id = $1
"""
_REVIVE = """
UPDATE event.event_operations
SET state = 'running', attempts = 0, next_attempt_at = NULL, updated_at = $2
WHERE id = $1
RETURNING state::text AS state
"""


async def get_operation(pool: Pool, actor: Actor, operation_id: UUID) -> dict[str, Any]:
    """The operation with its progress (404 when the actor cannot see it)."""
    async with connection(pool) as conn:
        return await operation_view(conn, actor, operation_id)


async def cancel_operation(
    pool: Pool, actor: Actor, operation_id: UUID, now: datetime
) -> dict[str, Any]:
    """Stop the operation's unclaimed work (after the batch in hand); keeps every trigger."""
    async with transaction(pool) as conn:
        op = await conn.fetchrow(_LOCK, operation_id, actor.company_id)
        if op is None:
            raise errors.NotFound("No such operation.")
        if op["state"] == "completed":
            raise errors.OperationFinished("The operation is completed: nothing is left to stop.")
        if op["state"] != "cancelled":
            await conn.execute(_CANCEL, operation_id, now)
            counts = {"processed": int(op["processed"]), "audience": int(op["audience"])}
            await audit_operation(
                conn, actor, operation_id, op["event_id"], op["state"], "cancelled", **counts
            )
        return await operation_view(conn, actor, operation_id)


async def resume_operation(
    pool: Pool, actor: Actor, operation_id: UUID, options: OperationOptions, now: datetime
) -> dict[str, Any]:
    """Clear a paused or failed operation's back-off, then run its batches now within the
    resume budget; the operation as it then is."""
    async with transaction(pool) as conn:
        op = await conn.fetchrow(_LOCK, operation_id, actor.company_id)
        if op is None:
            raise errors.NotFound("No such operation.")
        if op["state"] in ("completed", "cancelled"):
            raise errors.OperationFinished()
        if op["state"] == "previewed":
            raise errors.OperationNotStarted()
        if op["state"] in ("paused", "failed"):
            after = must(await conn.fetchrow(_REVIVE, operation_id, now))["state"]
            await audit_operation(
                conn, actor, operation_id, op["event_id"], op["state"], after, resumed=True
            )
            await wake_jobs(conn)  # what the resume budget leaves is the loops'
    whole = dataclasses.replace(options, cap=RESUME_BATCHES)
    await run_operation_pass(pool, whole, now, operation_id=operation_id, budget_s=RESUME_BUDGET_S)
    return await get_operation(pool, actor, operation_id)
