"""Due times of scheduler rows: computed at write, recomputed when dates move.

One statement set, used by the mail verbs (create/patch), the event verbs (date
changes) and the slot verbs (slot changes), in the writer's transaction, under
its event lock. Only unsent work moves: receipts already sent stay sent. The
event's scheduler rows are locked (by id) before their slot children and
receipts are touched: the lock order every scheduler writer and the pass share.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events_svc.db import Connection
from events_svc.verbs.mail.arming import lock_schedulers, wake_schedulers

# multi-slot events: one child per slot for each event-based scheduler of the event (or the
# one named: the pass creates the children of the row it holds, never of another)
_MATERIALIZE_CHILDREN = """
INSERT INTO event.mail_slots (scheduler_id, slot_id, scheduled_date)
SELECT m.id, s.id, event.mail_due(m.interval_kind, m.interval_unit, m.interval_nbr,
                                  s.date_begin, s.date_end)
FROM event.mails m
JOIN event.events e ON e.id = m.event_id AND e.is_multi_slots
JOIN event.slots s ON s.event_id = m.event_id
WHERE m.event_id = $1 AND ($2::uuid IS NULL OR m.id = $2) AND m.interval_kind <> 'after_sub'
ON CONFLICT ON CONSTRAINT mail_slots_scheduler_slot_key DO NOTHING
"""
_RESCHEDULE_CHILDREN = """
UPDATE event.mail_slots c SET scheduled_date = event.mail_due(m.interval_kind, m.interval_unit,
    m.interval_nbr, s.date_begin, s.date_end)
FROM event.mails m, event.slots s
WHERE m.event_id = $1 AND c.scheduler_id = m.id AND s.id = c.slot_id AND NOT c.mail_done
"""
# event-based rows: their own due time, or (multi-slot) the earliest pending child;
# after_sub rows: the earliest pending receipt (re-timed from date_open when the offset moves)
_RESCHEDULE_AFTER_SUB_RECEIPTS = """
UPDATE event.mail_registrations mr
SET scheduled_date = coalesce(r.date_open, r.created_at)
    + event.mail_offset(m.interval_unit, m.interval_nbr)
FROM event.mails m, event.registrations r
WHERE m.event_id = $1 AND m.interval_kind = 'after_sub' AND mr.scheduler_id = m.id
  AND r.id = mr.registration_id AND NOT mr.mail_sent AND mr.outcome = 'pending'
"""
_RESCHEDULE_PARENTS = """
UPDATE event.mails m SET scheduled_date = CASE
    WHEN m.interval_kind = 'after_sub' THEN (
        SELECT min(t) FROM (
            SELECT mr.scheduled_date AS t FROM event.mail_registrations mr
            WHERE mr.scheduler_id = m.id AND NOT mr.mail_sent AND mr.outcome = 'pending'
            UNION ALL
            SELECT coalesce(r.date_open, r.created_at)
                + event.mail_offset(m.interval_unit, m.interval_nbr)
            FROM event.registrations r
            WHERE r.event_id = m.event_id AND event.gets_mail(r.state, r.active)
              AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                              WHERE x.scheduler_id = m.id AND x.registration_id = r.id)
        ) due)
    WHEN e.is_multi_slots THEN (
        SELECT min(c.scheduled_date) FROM event.mail_slots c
        WHERE c.scheduler_id = m.id AND NOT c.mail_done)
    ELSE event.mail_due(m.interval_kind, m.interval_unit, m.interval_nbr,
                        e.date_begin, e.date_end)
    END,
    updated_at = $2
FROM event.events e
WHERE m.event_id = $1 AND e.id = m.event_id AND NOT m.mail_done
"""


async def materialize_slot_children(conn: Connection, event_id: UUID, scheduler_id: UUID) -> None:
    """Create the missing per-slot children of one event-based scheduler (the pass holds
    its row; it never writes the children of a row it does not hold)."""
    await conn.execute(_MATERIALIZE_CHILDREN, event_id, scheduler_id)


async def reschedule_event(conn: Connection, event_id: UUID, now: datetime) -> None:
    """Recompute the due times of the event's unsent scheduler work; wake the loops."""
    if not await lock_schedulers(conn, event_id):
        return
    await conn.execute(_MATERIALIZE_CHILDREN, event_id, None)
    await conn.execute(_RESCHEDULE_CHILDREN, event_id)
    await conn.execute(_RESCHEDULE_AFTER_SUB_RECEIPTS, event_id)
    await conn.execute(_RESCHEDULE_PARENTS, event_id, now)
    await wake_schedulers(conn, event_id)
