"""Template apply: an event type's lines, copied onto a new event ONCE, at create.

The copies are plain rows of the event (mails, tickets, question links, booths); nothing
links them back to the type, so later edits of the type never reach existing events.
Types are shared by every company: a mail line whose template belongs to another
company than the event's (a store template, `message_templates.company_id`) is not
copied, and the answer counts it (`mails_skipped`, in the event's audit row).
A booth line copies only its `name` and `booth_category_id`: booking state, contacts,
sale links and `is_paid` are the event's own, never templated. The caller holds the new
event row (it inserted it in the same transaction).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events_svc.db import Connection
from events_svc.verbs.mail import reschedule_event

# a line whose template is a store template of another company than the event's stays
# behind: an event's lines use its company's templates or platform ones (a template the
# store does not hold belongs to a host renderer, which answers for its own templates)
_APPLY_MAILS = """
INSERT INTO event.mails (event_id, sequence, interval_nbr, interval_unit, interval_kind,
    template_ref, template_kind, notification_channel, created_at, updated_at)
SELECT $1, tm.sequence, tm.interval_nbr, tm.interval_unit, tm.interval_kind, tm.template_ref,
    tm.template_kind, tm.notification_channel, $3, $3
FROM event.type_mails tm JOIN event.events e ON e.id = $1
WHERE tm.type_id = $2 AND NOT EXISTS (
    SELECT 1 FROM event.message_templates t
    WHERE t.id = tm.template_ref AND t.company_id IS NOT NULL
      AND t.company_id IS DISTINCT FROM e.company_id)
ORDER BY tm.sequence, tm.id
"""
_TYPE_MAILS = "SELECT count(*) FROM event.type_mails WHERE type_id = $1"
_APPLY_TICKETS = """
INSERT INTO event.tickets (event_id, name, description, seats_max, limit_max_per_order,
    created_at, updated_at)
SELECT $1, name, description, seats_max, limit_max_per_order, $3, $3
FROM event.type_tickets WHERE type_id = $2 ORDER BY created_at, id
"""
_APPLY_QUESTIONS = """
INSERT INTO event.registration_questions (event_id, question_id, sequence)
SELECT $1, question_id, sequence FROM event.type_questions WHERE type_id = $2
"""
# whitelisted columns: a new booth is born available, unpaid, without contacts or bookings
_APPLY_BOOTHS = """
INSERT INTO event.booths (event_id, name, booth_category_id, created_at, updated_at)
SELECT $1, name, booth_category_id, $3, $3
FROM event.type_booths WHERE type_id = $2 ORDER BY created_at, id
"""


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


async def apply_type(
    conn: Connection, event_id: UUID, type_id: UUID, now: datetime
) -> dict[str, int]:
    """Copy the type's lines onto the event; answers how many of each were copied (and
    `mails_skipped`: mail lines left behind, their template another company's)."""
    applied = {
        "mails": _count(await conn.execute(_APPLY_MAILS, event_id, type_id, now)),
        "tickets": _count(await conn.execute(_APPLY_TICKETS, event_id, type_id, now)),
        "questions": _count(await conn.execute(_APPLY_QUESTIONS, event_id, type_id)),
        "booths": _count(await conn.execute(_APPLY_BOOTHS, event_id, type_id, now)),
    }
    applied["mails_skipped"] = int(await conn.fetchval(_TYPE_MAILS, type_id)) - applied["mails"]
    if applied["mails"]:
        await reschedule_event(conn, event_id, now)
    return applied
