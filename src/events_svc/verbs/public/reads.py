"""What the public reads share: the event row as they read it, and a slot of it."""

EVENT = """
SELECT id, name, description, date_begin, date_end, date_tz, location, event_url,
    kanban_state::text AS kanban_state, is_published, date_publish, active, ics_sequence,
    updated_at, badge_format::text AS badge_format
FROM event.events WHERE id = $1
"""
SLOT = "SELECT id, date_begin, date_end FROM event.slots WHERE id = $1 AND event_id = $2"
