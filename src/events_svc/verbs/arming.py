"""The arm rule: the ONE place that says what happens when registrations enter 'open'.

Rows entering `open` from nowhere (create), `draft` or `cancel` get `date_open`
stamped (their eligibility time), and the event's after-subscription
schedulers are armed in the same transaction: `mail_done` cleared and
`scheduled_date` pulled forward to the earliest new due time (`date_open` +
the scheduler's interval), then a NOTIFY wakes the scheduler loops. Verbs
never send anything themselves. Re-confirming an open row and `open -> done`
never come here.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events_svc.db import Connection

CHANNEL = "event_mail_due"

_STAMP_OPEN = """
UPDATE event.registrations SET date_open = $2 WHERE id = ANY($1::uuid[])
"""
# due = date_open + interval; the scheduler row keeps its earliest pending due time
_ARM = """
WITH armed AS (
    UPDATE event.mails m SET
        mail_done = false,
        scheduled_date = least(coalesce(m.scheduled_date, 'infinity'), $2::timestamptz + CASE
            m.interval_unit
            WHEN 'now' THEN interval '0'
            WHEN 'hours' THEN make_interval(hours => m.interval_nbr)
            WHEN 'days' THEN make_interval(days => m.interval_nbr)
            WHEN 'weeks' THEN make_interval(weeks => m.interval_nbr)
            WHEN 'months' THEN make_interval(months => m.interval_nbr)
        END),
        updated_at = $2
    WHERE m.event_id = $1 AND m.interval_kind = 'after_sub'
    RETURNING m.id
)
SELECT count(*) FROM armed
"""
_NOTIFY = "SELECT pg_notify($1, $2)"


async def arm_entering_open(
    conn: Connection,
    event_id: UUID,
    registration_ids: list[UUID],
    now: datetime,
    *,
    stamped: bool = False,
) -> int:
    """Stamp date_open and arm the event's after-subscription schedulers; returns rows armed.

    `stamped` says the caller already wrote date_open = now (the register verb does
    it in its INSERT). Runs inside the caller's transaction, under its event lock.
    """
    if not registration_ids:
        return 0
    if not stamped:
        await conn.execute(_STAMP_OPEN, registration_ids, now)
    armed = int(await conn.fetchval(_ARM, event_id, now))
    if armed:
        await conn.execute(_NOTIFY, CHANNEL, str(event_id))
    return armed
