"""The arm rule: the ONE place that says what happens when registrations enter 'open'.

Rows entering `open` from nowhere (create), `draft` or `cancel` get `date_open`
stamped (their eligibility time), and the event's schedulers are armed in the
same transaction: after-subscription schedulers get `mail_done` cleared and
`scheduled_date` pulled forward to the earliest new due time (`date_open` +
the scheduler's interval); event-based schedulers that already finished are
reopened (the late registrant is owed their mail); then a NOTIFY wakes the
scheduler loops. Verbs
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
# after_sub: due = date_open + offset, the scheduler keeps its earliest pending due time.
# Event-based schedulers that already finished are reopened: a late registrant is owed
# the mails the others got, at their due time (the pass claims only due rows, and drops
# what a closed window no longer allows).
_ARM = """
WITH armed AS (
    UPDATE event.mails m SET
        mail_done = false,
        scheduled_date = CASE WHEN m.interval_kind = 'after_sub' THEN
            least(coalesce(m.scheduled_date, 'infinity'),
                  $2::timestamptz + event.mail_offset(m.interval_unit, m.interval_nbr))
            ELSE m.scheduled_date END,
        updated_at = $2
    WHERE m.event_id = $1
      AND (m.interval_kind = 'after_sub' OR m.mail_done)
    RETURNING m.id
), children AS (
    UPDATE event.mail_slots c SET mail_done = false
    FROM armed WHERE c.scheduler_id = armed.id AND c.mail_done
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
