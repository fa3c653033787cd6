"""The public calendar: the iCalendar document a calendar link opens (the document itself
is `documents.build_calendar`'s). Read with the uniform 404 of the public routes.
"""

from __future__ import annotations

from datetime import datetime

from events_svc import capabilities, errors
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connection
from events_svc.documents import build_calendar
from events_svc.verbs.events import is_visible
from events_svc.verbs.public.reads import EVENT, SLOT


async def calendar(pool: Pool, codec: CapabilityCodec, token: str, now: datetime) -> bytes:
    """The iCalendar document a valid ics link opens (the uniform 404 otherwise)."""
    scope = capabilities.open_ics(codec, token, now)
    if scope is None:
        raise errors.EventNotPublished()
    async with connection(pool) as conn:
        row = await conn.fetchrow(EVENT, scope.event_id)
        slot = None
        if row is not None and scope.slot_id is not None:
            slot = await conn.fetchrow(SLOT, scope.slot_id, scope.event_id)
            if slot is None:
                raise errors.EventNotPublished()
    if row is None or not is_visible(dict(row), now):
        raise errors.EventNotPublished()
    return build_calendar(dict(row), dict(slot) if slot else None)
