"""The reads of operations: the actor must see the event and the creator's company."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection

_VIEW = """
SELECT o.id, o.event_id, o.kind::text AS kind, o.state::text AS state, o.params, o.revision,
    o.audience_estimate, o.audience, o.processed, o.triggers_created, o.skipped_inactive,
    o.error_count, o.errors, o.event_revision, o.ics_sequence, o.created_at, o.started_at,
    o.finished_at, o.next_attempt_at
FROM event.event_operations o JOIN event.events e ON e.id = o.event_id
WHERE o.id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(o.actor_company_id, $2)
"""


async def operation_view(conn: Connection, actor: Actor, operation_id: UUID) -> dict[str, Any]:
    """The operation with its progress (404 when the actor cannot see it)."""
    row = await conn.fetchrow(_VIEW, operation_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such operation.")
    return dict(row)


# an event's operations, newest first (the console's list; the event's own fence and the
# operation creator's company fence, as the one read above)
_LIST = """
SELECT o.id, o.event_id, o.kind::text AS kind, o.state::text AS state, o.params, o.revision,
    o.audience_estimate, o.audience, o.processed, o.triggers_created, o.skipped_inactive,
    o.error_count, o.errors, o.event_revision, o.ics_sequence, o.created_at, o.started_at,
    o.finished_at, o.next_attempt_at
FROM event.event_operations o JOIN event.events e ON e.id = o.event_id
WHERE o.event_id = $1 AND event.visible_to(e.company_id, $2)
  AND event.visible_to(o.actor_company_id, $2)
ORDER BY o.created_at DESC, o.id DESC
LIMIT $3
"""


async def list_operations(
    pool: Pool, actor: Actor, event_id: UUID, *, limit: int = 50
) -> list[dict[str, Any]]:
    """The event's latest `limit` operations the actor can see, newest first."""
    async with connection(pool) as conn:
        rows = await conn.fetch(_LIST, event_id, actor.company_id, limit)
    return [dict(r) for r in rows]
