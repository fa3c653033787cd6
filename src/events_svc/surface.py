"""EventSurface: what a host calls in-process (no HTTP): the seat read model, the
publication state of an event, and the state view of a registration.

Every method reads through the same verbs as the API; nothing here is a second
seat counter or a second source of truth.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import SYSTEM, Actor
from events_svc.db import Pool, connection, transaction
from events_svc.verbs.events import get_event_row
from events_svc.verbs.seats import get_seat_view

_REGISTRATION_STATE = """
SELECT id, event_id, state::text AS state, sale_status::text AS sale_status, active, version
FROM event.registrations r
WHERE r.id = $1 AND ($2::uuid IS NULL OR r.company_id IS NULL OR r.company_id = $2)
"""


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventSurface:
    """In-process reads for a host; `actor` fences them (default: the system actor)."""

    def __init__(
        self, pool: Pool, actor: Actor = SYSTEM, clock: Callable[[], datetime] = _utc_now
    ) -> None:
        self.pool = pool
        self.actor = actor
        self.clock = clock

    async def seat_availability(self, event_id: UUID) -> dict[str, Any]:
        """The one seat read model of an event (event, tickets, slots, available_min, sold out)."""
        async with transaction(self.pool) as conn:
            event = await get_event_row(conn, self.actor, event_id)
            return await get_seat_view(conn, event)

    async def publication_state(self, event_id: UUID) -> dict[str, Any]:
        """{is_published, date_publish, is_visible}: visible = published and the date passed."""
        async with connection(self.pool) as conn:
            event = await get_event_row(conn, self.actor, event_id)
        when = event["date_publish"]
        visible = bool(event["is_published"]) and (when is None or when <= self.clock())
        visible = visible and bool(event["active"])
        return {
            "event_id": event_id,
            "is_published": event["is_published"],
            "date_publish": when,
            "is_visible": visible,
        }

    async def registration_state(self, registration_id: UUID) -> dict[str, Any]:
        """{state, sale_status, active, version} of one registration."""
        async with connection(self.pool) as conn:
            row = await conn.fetchrow(_REGISTRATION_STATE, registration_id, self.actor.company_id)
        if row is None:
            raise errors.NotFound("No such registration.")
        return dict(row)
