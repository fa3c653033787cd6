"""The dispatcher's read of the trigger feed: its cursor, and the pass's next due time.

**One feed batch is one transaction**: it locks the cursor row `FOR UPDATE SKIP LOCKED`
(one reader at a time: another instance that holds it is reading already, and this one
goes on to the receipts), reads the next triggers after the stored position in `seq`
order (a bounded batch), writes one `pending` receipt per trigger (`ON CONFLICT DO
NOTHING`: a receipt is unique per trigger), and advances the position to the last one
read. Trigger writers serialise while they insert, so `seq` order is commit order and a
stored position never skips a trigger (see migration 0020). A process killed mid-batch
loses the whole batch, position included: the next reader takes the same triggers again.
"""

from __future__ import annotations

from datetime import datetime

from events_svc.db import Pool, transaction

FEED_BATCH = 1000  # triggers per feed transaction
# the dispatcher LISTENs here: written triggers NOTIFY it at commit (the `triggers` table's
# trigger), and so does a purpose's template set (its parked receipts released)
WAKE_CHANNEL = "event_dispatch_due"

_LOCK_CURSOR = """
SELECT position FROM event.trigger_dispatch_cursor WHERE singleton
FOR UPDATE SKIP LOCKED  -- one feed reader at a time; a held cursor is being read already
"""
_TAKE = """
WITH taken AS (
    SELECT id, seq, purpose FROM event.triggers
    WHERE seq > $1
    ORDER BY seq
    LIMIT $2
), receipts AS (
    INSERT INTO event.trigger_dispatch_receipts
        (trigger_id, seq, purpose, state, next_attempt_at, created_at, updated_at)
    SELECT id, seq, purpose, 'pending', $3, $3, $3 FROM taken
    ON CONFLICT ON CONSTRAINT trigger_dispatch_receipts_pkey DO NOTHING
)
UPDATE event.trigger_dispatch_cursor
SET position = coalesce((SELECT max(seq) FROM taken), position), updated_at = $3
WHERE singleton
RETURNING (SELECT count(*) FROM taken) AS taken
"""
_UNREAD = """
SELECT EXISTS (SELECT 1 FROM event.triggers
               WHERE seq > (SELECT position FROM event.trigger_dispatch_cursor))
"""
_NEXT_RECEIPT = """
SELECT min(next_attempt_at) FROM event.trigger_dispatch_receipts
WHERE state IN ('pending', 'parked')
"""


async def take_feed(pool: Pool, now: datetime, batch: int = FEED_BATCH) -> int | None:
    """Take the next `batch` triggers of the feed into pending receipts (the cursor row
    locked); how many were read, or None when another instance holds the cursor."""
    async with transaction(pool) as conn:
        position = await conn.fetchval(_LOCK_CURSOR)
        if position is None:
            return None
        return int(await conn.fetchval(_TAKE, position, batch, now))


async def next_dispatch_due(pool: Pool, now: datetime) -> datetime | None:
    """When the dispatcher has work: `now` when the feed holds triggers it has not read,
    else the earliest open receipt's time (its due time, or the end of its back-off), or
    None when there is nothing to do."""
    async with transaction(pool) as conn:
        if await conn.fetchval(_UNREAD):
            return now
        due: datetime | None = await conn.fetchval(_NEXT_RECEIPT)
    return due
