"""Publication: the only writers of an event's publication pair, and what it means.

`publish` and `unpublish` write `is_published` / `date_publish` (an event PATCH
carrying either is refused `publish_fenced`). An event is visible to the public
when it is published, its publication date has passed, and it is not archived:
`is_visible`, the one definition every public surface and the host surface read.

A publish that writes (a first publication, or a new publication date) records the
`event.published` webhook fact, with its `date_publish`; unpublishing records none (no
event type says it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.events.records import event_view
from events_svc.verbs.facts import record_event_fact
from events_svc.verbs.fence import get_event_row, lock_event

_SET_PUBLISHED = """
UPDATE event.events SET is_published = $2, date_publish = $3, revision = revision + 1,
    updated_at = $4
WHERE id = $1
"""


def is_visible(event: dict[str, Any], now: datetime) -> bool:
    """Published, publication date passed, not archived."""
    when = event["date_publish"]
    return bool(event["is_published"] and event["active"] and (when is None or when <= now))


async def get_publication_state(
    pool: Pool, actor: Actor, event_id: UUID, now: datetime
) -> dict[str, Any]:
    """{event_id, is_published, date_publish, is_visible} of one event."""
    async with connection(pool) as conn:
        event = await get_event_row(conn, actor, event_id)
    return {
        "event_id": event_id,
        "is_published": event["is_published"],
        "date_publish": event["date_publish"],
        "is_visible": is_visible(event, now),
    }


async def publish_event(
    pool: Pool, actor: Actor, event_id: UUID, now: datetime, *, date_publish: datetime | None = None
) -> dict[str, Any]:
    """Publish (the only writer of the publication pair, with unpublish)."""
    async with transaction(pool) as conn:
        current = await lock_event(conn, actor, event_id)
        if not current["active"]:
            refused = True
        else:
            refused = False
            when = date_publish or current["date_publish"] or now
            if not current["is_published"] or current["date_publish"] != when:
                await conn.execute(_SET_PUBLISHED, event_id, True, when, now)
                await write_audit(
                    conn,
                    actor,
                    "event_published",
                    "event",
                    event_id,
                    event_id=event_id,
                    summary={"date_publish": when.isoformat()},
                )
                extra = {"date_publish": when.isoformat()}
                await record_event_fact(conn, "event.published", event_id, now, extra)
            result = await event_view(conn, await get_event_row(conn, actor, event_id), now)
    if refused:
        async with transaction(pool) as conn:
            await write_audit(
                conn,
                actor,
                "publish_refused",
                "event",
                event_id,
                event_id=event_id,
                summary={"reason": "event_archived"},
            )
        raise errors.EventArchived()
    return result


async def unpublish_event(
    pool: Pool, actor: Actor, event_id: UUID, now: datetime
) -> dict[str, Any]:
    """Unpublish: clears the publication pair."""
    async with transaction(pool) as conn:
        current = await lock_event(conn, actor, event_id)
        if current["is_published"] or current["date_publish"] is not None:
            await conn.execute(_SET_PUBLISHED, event_id, False, None, now)
            await write_audit(
                conn, actor, "event_unpublished", "event", event_id, event_id=event_id
            )
            changed = {"changed": ["date_publish", "is_published"]}
            await record_event_fact(conn, "event.updated", event_id, now, changed)
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)
