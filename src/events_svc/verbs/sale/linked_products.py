"""The linked-products read (EP-2): the host products an event links to, from the view
`event.event_linked_products` (the distinct product refs of the event's tickets and of
the categories of its booths). Events own this side only; the host's catalog is never
written from here.

One item per distinct `product_ref`, sorted by code point (`COLLATE "C"`), with the
sources it comes from (`ticket` before `booth_category`). Without an event, the refs of
every event the actor sees (its company's and the shared ones); keyset pages on the ref.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection
from events_svc.verbs.common import clamp_limit, decode_cursor, page

_EVENT_VISIBLE = """
SELECT EXISTS (SELECT 1 FROM event.events WHERE id = $1 AND event.visible_to(company_id, $2))
"""
_LIST = """
SELECT v.product_ref, array_agg(DISTINCT v.source) AS sources
FROM event.event_linked_products v JOIN event.events e ON e.id = v.event_id
WHERE ($1::uuid IS NULL OR v.event_id = $1)
  AND event.visible_to(e.company_id, $2)
  AND ($3::text IS NULL OR v.product_ref COLLATE "C" > $3)
GROUP BY v.product_ref
ORDER BY v.product_ref COLLATE "C"
LIMIT $4
"""
_SOURCE_ORDER = {"ticket": 0, "booth_category": 1}
# the cursor carries the last ref; its id part is unused (refs are the key)
_NO_ID = UUID(int=0)


async def linked_products(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """{items: [{product_ref, sources}], next_cursor}; an unseen event is 404."""
    size = clamp_limit(limit)
    after, _ = decode_cursor(cursor, str)
    async with connection(pool) as conn:
        if event_id is not None and not await conn.fetchval(
            _EVENT_VISIBLE, event_id, actor.company_id
        ):
            raise errors.NotFound("No such event.")
        rows = await conn.fetch(_LIST, event_id, actor.company_id, after, size + 1)
    items = [
        {
            "id": _NO_ID,
            "product_ref": r["product_ref"],
            "sources": sorted(r["sources"], key=_SOURCE_ORDER.__getitem__),
        }
        for r in rows
    ]
    return page(items, size, "product_ref")
