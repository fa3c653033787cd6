"""The one read of an operation: the actor must see its event and its creator's company."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection

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
