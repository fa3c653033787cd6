"""The trigger feed: every trigger the actor may see (of one event, or of all), in
creation order.

The position is a trigger's `seq`: writers of triggers insert under one transaction
lock (`batch.FEED_LOCK`), so a later `seq` always commits later, and a reader that keeps
the position of the last trigger it read (the page's `next_cursor`, never null: the
same position again when the page is empty) neither misses nor re-reads one.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Pool, transaction
from events_svc.verbs.common import clamp_limit, decode_cursor, encode_cursor
from events_svc.verbs.fence import get_event_row

_START = UUID(int=0)
# the triggers of operations the actor may see (the operation view's rule: the event's
# company and the company of the operation's creator)
_FEED = """
SELECT t.id, t.seq, t.operation_id, t.event_id, t.registration_id, t.purpose::text AS purpose,
    t.event_revision, t.registration_version, t.ics_sequence, t.ics_method, t.event_slot_id,
    t.ctx_date_begin, t.ctx_date_end, t.ctx_date_tz, t.ctx_location, t.ctx_slot_begin,
    t.ctx_slot_end, t.created_at
FROM event.triggers t
JOIN event.events e ON e.id = t.event_id
JOIN event.event_operations o ON o.id = t.operation_id
WHERE t.seq > $1 AND ($2::uuid IS NULL OR t.event_id = $2)
  AND event.visible_to(e.company_id, $3) AND event.visible_to(o.actor_company_id, $3)
ORDER BY t.seq
LIMIT $4
"""
_CONTEXT = ("date_begin", "date_end", "date_tz", "location", "slot_begin", "slot_end")


def _trigger(row: dict[str, Any]) -> dict[str, Any]:
    row["context"] = {k: row.pop(f"ctx_{k}") for k in _CONTEXT}
    return row


async def list_triggers(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    after: str | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """A page of the feed after the position `after` (from the start without one)."""
    size = clamp_limit(limit)
    seq, last_id = decode_cursor(after, int, int_bits=64)
    position = max(seq or 0, 0)
    async with transaction(pool) as conn:
        if event_id is not None:
            await get_event_row(conn, actor, event_id)  # 404 for an event it cannot see
        rows = [
            _trigger(dict(r))
            for r in await conn.fetch(_FEED, position, event_id, actor.company_id, size)
        ]
    if rows:
        cursor = encode_cursor(rows[-1]["seq"], rows[-1]["id"])
    else:
        cursor = encode_cursor(position, last_id or _START)
    return {"items": rows, "next_cursor": cursor}
