-- One definition of a scheduler's offset ("2 days", "now", ...), used by every statement
-- that computes a due time: arming, scheduling, slot children, receipts.
CREATE FUNCTION event.mail_offset(unit event.interval_unit, nbr integer) RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE unit
    WHEN 'now' THEN interval '0'
    WHEN 'hours' THEN make_interval(hours => nbr)
    WHEN 'days' THEN make_interval(days => nbr)
    WHEN 'weeks' THEN make_interval(weeks => nbr)
    WHEN 'months' THEN make_interval(months => nbr)
END;

-- When an event-based scheduler is due: before_* subtract the offset from its anchor,
-- the others add it; the anchor is the start (before_event, after_event_start) or the end.
CREATE FUNCTION event.mail_due(kind event.interval_kind, unit event.interval_unit, nbr integer,
                               date_begin timestamptz, date_end timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE kind
    WHEN 'before_event' THEN date_begin - event.mail_offset(unit, nbr)
    WHEN 'after_event_start' THEN date_begin + event.mail_offset(unit, nbr)
    WHEN 'before_event_end' THEN date_end - event.mail_offset(unit, nbr)
    WHEN 'after_event' THEN date_end + event.mail_offset(unit, nbr)
END;

-- pending receipts of one scheduler, in due order (the attendee engine's claim)
CREATE INDEX mail_registrations_pending_idx ON event.mail_registrations (scheduler_id, scheduled_date)
    WHERE NOT mail_sent AND outcome = 'pending';
CREATE INDEX mail_slots_scheduler_idx ON event.mail_slots (scheduler_id, scheduled_date);
CREATE INDEX mails_template_idx ON event.mails (template_ref);
