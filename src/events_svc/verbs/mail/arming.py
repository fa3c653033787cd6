"""The arm rule: the ONE place that says what a registration change owes the scheduler.

Rows entering `open` from nowhere (create), `draft` or `cancel` get `date_open`
stamped (their eligibility time), and ALL the event's schedulers are armed in the
same transaction: after-subscription ones get `mail_done` cleared and
`scheduled_date` pulled forward to the earliest new due time (`date_open` + the
scheduler's interval); event-based ones that already finished are reopened (the
late registrant is owed their mail); then a NOTIFY wakes the mail pass of every loop.
Unarchiving an `open`/`done` row arms the same way, keeping its `date_open`.
Re-confirming an open row and `open -> done` never come here. When an attendee's
address changes, the mails that failed for that attendee
alone (no usable address) are forgotten and their schedulers reopened, so the
next pass tries again. Verbs never send anything themselves.

Scheduler rows come last in the service's lock order (event, slot, ticket,
registrations, then scheduler rows by id, then their slot children and receipts):
`lock_schedulers` takes them in id order before any of them is written, so a
writer never waits on a scheduler row while holding one a pass needs.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events_svc.db import Connection

CHANNEL = "event_mail_due"

_STAMP_OPEN = """
UPDATE event.registrations SET date_open = $2 WHERE id = ANY($1::uuid[])
"""
_LOCK_EVENT_LINES = """
SELECT id FROM event.mails WHERE event_id = $1 ORDER BY id
FOR NO KEY UPDATE  -- scheduler rows: after the event and registrations, by id
"""
# after_sub: due = date_open + offset, the scheduler keeps its earliest pending due time.
# Event-based schedulers that already finished are reopened: a late registrant is owed
# the mails the others got, at their due time (the pass claims only due rows, and drops
# what a closed window no longer allows). The rows are locked first (a new statement then
# sees a pass's committed `mail_done`), so a pass finishing concurrently cannot hide them.
_ARM = """
WITH armed AS (
    UPDATE event.mails m SET
        mail_done = false,
        scheduled_date = CASE WHEN m.interval_kind = 'after_sub' THEN
            least(coalesce(m.scheduled_date, 'infinity'),
                  $2::timestamptz + event.mail_offset(m.interval_unit, m.interval_nbr))
            ELSE m.scheduled_date END,
        updated_at = $2
    WHERE m.id = ANY($1::uuid[]) AND (m.interval_kind = 'after_sub' OR m.mail_done)
    RETURNING m.id
), children AS (
    UPDATE event.mail_slots c SET mail_done = false
    FROM armed WHERE c.scheduler_id = armed.id AND c.mail_done
)
SELECT count(*) FROM armed
"""
_FAILED_LINES = """
SELECT DISTINCT scheduler_id FROM event.mail_registrations
WHERE registration_id = $1 AND outcome = 'failed'
"""
# due again now: after_sub re-creates the receipt (due in the past), the walks find the
# attendee without a receipt; a slot child reopens for the attendee's own slot only
_REOPEN = """
WITH lines AS (
    UPDATE event.mails m SET
        mail_done = false,
        scheduled_date = CASE WHEN m.interval_kind = 'after_sub'
            THEN least(coalesce(m.scheduled_date, 'infinity'), $2) ELSE m.scheduled_date END,
        updated_at = $2
    WHERE m.id = ANY($1::uuid[])
    RETURNING m.id
), children AS (
    UPDATE event.mail_slots c SET mail_done = false
    FROM lines WHERE c.scheduler_id = lines.id AND c.slot_id = $3 AND c.mail_done
)
SELECT count(*) FROM lines
"""
_FORGET_FAILED = """
DELETE FROM event.mail_registrations
WHERE registration_id = $1 AND outcome = 'failed' AND scheduler_id = ANY($2::uuid[])
"""
_NOTIFY = "SELECT pg_notify($1, $2)"


async def lock_schedulers(conn: Connection, event_id: UUID) -> list[UUID]:
    """Lock the event's scheduler rows in id order (the caller holds the event row)."""
    return [r["id"] for r in await conn.fetch(_LOCK_EVENT_LINES, event_id)]


async def wake_schedulers(conn: Connection, event_id: UUID) -> None:
    """Wake the mail pass of every loop when this transaction commits."""
    await conn.execute(_NOTIFY, CHANNEL, str(event_id))


async def arm_entering_open(
    conn: Connection,
    event_id: UUID,
    registration_ids: list[UUID],
    now: datetime,
    *,
    stamped: bool = False,
) -> int:
    """Stamp date_open and arm the event's schedulers; returns rows armed.

    `stamped` says the caller already wrote date_open = now (the register verb does
    it in its INSERT). Runs inside the caller's transaction, under its event lock.
    """
    if not registration_ids:
        return 0
    if not stamped:
        await conn.execute(_STAMP_OPEN, registration_ids, now)
    lines = await lock_schedulers(conn, event_id)
    if not lines:
        return 0
    armed = int(await conn.fetchval(_ARM, lines, now))
    if armed:
        await wake_schedulers(conn, event_id)
    return armed


async def retry_failed_mails(
    conn: Connection,
    event_id: UUID,
    registration_id: UUID,
    slot_id: UUID | None,
    now: datetime,
) -> int:
    """Forget the attendee's failed receipts and reopen their schedulers; returns how many.

    Called by the verbs that change an attendee's details, under the registration lock.
    The event's scheduler rows are locked BEFORE the failed receipts are read: a pass
    that read the old details and is about to record their failure commits first, and
    its receipt is forgotten here too.
    """
    if not await lock_schedulers(conn, event_id):
        return 0
    lines = [r["scheduler_id"] for r in await conn.fetch(_FAILED_LINES, registration_id)]
    if not lines:
        return 0
    await conn.fetchval(_REOPEN, lines, now, slot_id)
    await conn.execute(_FORGET_FAILED, registration_id, lines)
    await wake_schedulers(conn, event_id)
    return len(lines)
