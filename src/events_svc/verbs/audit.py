"""The audit trail: one row per operator write, in the writer's transaction.

Summaries carry field names, states and ids, never raw attendee PII.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Connection

_INSERT = """
INSERT INTO event.event_audit_log
    (actor_id, actor_kind, company_id, verb, object_kind, object_id, event_id, summary)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""


async def write_audit(
    conn: Connection,
    actor: Actor,
    verb: str,
    object_kind: str,
    object_id: UUID | None,
    *,
    event_id: UUID | None = None,
    summary: dict[str, Any] | None = None,
) -> None:
    """Record one write; called inside the writing verb's transaction."""
    await conn.execute(
        _INSERT,
        actor.id,
        actor.kind,
        actor.company_id,
        verb,
        object_kind,
        object_id,
        event_id,
        summary or {},
    )
