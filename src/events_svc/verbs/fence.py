"""The company fence around the event row: every verb that names an event by id finds it
(`get_event_row`) or locks it (`lock_event`, first in the lock order) here, within the
actor's company. A company actor sees its own events and shared ones (`company_id`
NULL); another company's event answers exactly like a missing one (404), so an id
tells nothing about a foreign company. The rule itself is the SQL function
`event.visible_to`.

It sits below every noun (events, mail, booths, operations, the public surface) so
that each of them can start from a fenced event without importing another.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection

_GET = """
SELECT * FROM event.event_view e WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
"""
_LOCK = """
SELECT id, company_id FROM event.events
WHERE id = $1 AND event.visible_to(company_id, $2)
FOR NO KEY UPDATE  -- serialises every writer of this event (lock order: event first)
"""


async def get_event_row(conn: Connection, actor: Actor, event_id: UUID) -> dict[str, Any]:
    """The event row as the actor may see it (unlocked); `NotFound` otherwise."""
    row = await conn.fetchrow(_GET, event_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such event.")
    return dict(row)


async def lock_event(conn: Connection, actor: Actor, event_id: UUID) -> dict[str, Any]:
    """Lock the event row (FOR NO KEY UPDATE) within the actor's company fence; 404 otherwise."""
    if await conn.fetchrow(_LOCK, event_id, actor.company_id) is None:
        raise errors.NotFound("No such event.")
    return await get_event_row(conn, actor, event_id)
