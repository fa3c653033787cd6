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

from events_svc.db import Connection, affected, must
from events_svc.verbs.mail import reschedule_event

# a line whose template is a store template the new event's company may not use stays
# behind (`event.template_serves`; a template the store does not hold belongs to a host
# renderer, which answers for its own templates); answers (copied, left behind)
_APPLY_MAILS = """
WITH lines AS (
    SELECT tm.*, t.id IS NULL OR event.template_serves(t.company_id, e.company_id) AS serves
    FROM event.type_mails tm JOIN event.events e ON e.id = $1
    LEFT JOIN event.message_templates t ON t.id = tm.template_ref
    WHERE tm.type_id = $2
), copied AS (
    INSERT INTO event.mails (event_id, sequence, interval_nbr, interval_unit, interval_kind,
        template_ref, template_kind, notification_channel, created_at, updated_at)
    SELECT $1, sequence, interval_nbr, interval_unit, interval_kind, template_ref,
        template_kind, notification_channel, $3, $3
    FROM lines WHERE serves ORDER BY sequence, id
    RETURNING 1
)
SELECT (SELECT count(*) FROM copied) AS copied,
       (SELECT count(*) FROM lines WHERE NOT serves) AS skipped
"""
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


async def apply_type(
    conn: Connection, event_id: UUID, type_id: UUID, now: datetime
) -> dict[str, int]:
    """Copy the type's lines onto the event; answers how many of each were copied (and
    `mails_skipped`: mail lines left behind, their template another company's)."""
    mails = must(await conn.fetchrow(_APPLY_MAILS, event_id, type_id, now))
    applied = {
        "mails": int(mails["copied"]),
        "mails_skipped": int(mails["skipped"]),
        "tickets": affected(await conn.execute(_APPLY_TICKETS, event_id, type_id, now)),
        "questions": affected(await conn.execute(_APPLY_QUESTIONS, event_id, type_id)),
        "booths": affected(await conn.execute(_APPLY_BOOTHS, event_id, type_id, now)),
    }
    if applied["mails"]:
        await reschedule_event(conn, event_id, now)
    return applied
