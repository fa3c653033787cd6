"""The stage axis's terminal writes: mark-done, and the daily done sweep.

`pipe_end` is the only semantic of a stage; an event reaches a `pipe_end` stage
only through `mark_event_done` (the first `pipe_end` stage by sequence) or the
sweep, which applies the same verb (full write, audit row, `event.updated` fact) to
every event whose `date_end` has passed, archived ones included, in bounded batches
claimed with `FOR NO KEY UPDATE SKIP LOCKED` (several instances may sweep at once).
Without any `pipe_end` stage there is nothing to move to: the sweep moves nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import SYSTEM, Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.events.change import reset_kanban
from events_svc.verbs.events.records import event_view
from events_svc.verbs.facts import record_event_fact
from events_svc.verbs.fence import get_event_row, lock_event

_FIRST_PIPE_END = """
SELECT id FROM event.stages WHERE pipe_end ORDER BY sequence, id LIMIT 1
"""

_SET_STAGE = """
UPDATE event.events SET stage_id = $2, kanban_state = $3::event.kanban_state,
    revision = revision + 1, updated_at = $4
WHERE id = $1
"""

_SWEEP_CLAIM = """
SELECT e.id FROM event.events e LEFT JOIN event.stages s ON s.id = e.stage_id
WHERE e.date_end < $1 AND (s.id IS NULL OR NOT s.pipe_end)
  AND EXISTS (SELECT 1 FROM event.stages p WHERE p.pipe_end)
ORDER BY e.date_end, e.id LIMIT $2
FOR NO KEY UPDATE OF e SKIP LOCKED
"""


async def mark_done_locked(conn: Connection, actor: Actor, event_id: UUID, now: datetime) -> bool:
    """Move a locked event to the first pipe_end stage; False when it is there already."""
    current = await get_event_row(conn, actor, event_id)
    stage_id = await conn.fetchval(_FIRST_PIPE_END)
    if stage_id is None:
        raise errors.NoPipeEndStage()
    if current["stage_id"] == stage_id:
        return False
    kanban = reset_kanban(current["kanban_state"])
    await conn.execute(_SET_STAGE, event_id, stage_id, kanban, now)
    changed = ["stage_id"] + (["kanban_state"] if kanban != current["kanban_state"] else [])
    await record_event_fact(conn, "event.updated", event_id, now, {"changed": changed})
    await write_audit(
        conn,
        actor,
        "event_marked_done",
        "event",
        event_id,
        event_id=event_id,
        summary={"stage_id": str(stage_id)},
    )
    return True


async def mark_event_done(
    pool: Pool, actor: Actor, event_id: UUID, now: datetime
) -> dict[str, Any]:
    """Move the event to the first pipe_end stage by sequence (the terminal write)."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, event_id)
        await mark_done_locked(conn, actor, event_id, now)
        return await event_view(conn, await get_event_row(conn, actor, event_id), now)


async def sweep_done_events(pool: Pool, now: datetime, *, batch: int = 50) -> int:
    """Mark ended events done, batch by batch; answers how many moved."""
    moved = 0
    while True:
        async with transaction(pool) as conn:
            ids = [r["id"] for r in await conn.fetch(_SWEEP_CLAIM, now, batch)]
            for event_id in ids:
                try:
                    moved += await mark_done_locked(conn, SYSTEM, event_id, now)
                except errors.NoPipeEndStage:
                    return moved
        if len(ids) < batch:
            return moved
