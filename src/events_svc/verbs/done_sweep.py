"""The done sweep: ended events not yet in a pipe_end stage get the mark-done verb.

Bounded batches claimed with `FOR NO KEY UPDATE SKIP LOCKED` (several instances may
sweep at once), each event moved by the same code as `POST .../mark-done`, and
audited. Without any pipe_end stage there is nothing to move to: the sweep
reports it and moves nothing.
"""

from __future__ import annotations

from datetime import datetime

from events_svc import errors
from events_svc.actors import SYSTEM
from events_svc.db import Pool, transaction
from events_svc.verbs.events import mark_done_locked

_CLAIM = """
SELECT e.id FROM event.events e LEFT JOIN event.stages s ON s.id = e.stage_id
WHERE e.active AND e.date_end < $1 AND (s.id IS NULL OR NOT s.pipe_end)
  AND EXISTS (SELECT 1 FROM event.stages p WHERE p.pipe_end)
ORDER BY e.date_end, e.id LIMIT $2
FOR NO KEY UPDATE OF e SKIP LOCKED
"""


async def sweep_done_events(pool: Pool, now: datetime, *, batch: int = 50) -> int:
    """Mark ended events done, batch by batch; answers how many moved."""
    moved = 0
    while True:
        async with transaction(pool) as conn:
            ids = [r["id"] for r in await conn.fetch(_CLAIM, now, batch)]
            for event_id in ids:
                try:
                    moved += await mark_done_locked(conn, SYSTEM, event_id, now)
                except errors.NoPipeEndStage:
                    return moved
        if len(ids) < batch:
            return moved
