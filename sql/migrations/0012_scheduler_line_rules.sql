-- When a scheduler line can next be worked: its due time, or the end of its back-off,
-- whichever is later; NULL when nothing is due. The ONE definition the pass's pick, its
-- claim and the loop's next-due time share.
CREATE FUNCTION event.line_workable_at(m event.mails)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN m.scheduled_date IS NOT NULL
            THEN greatest(m.scheduled_date, coalesce(m.next_attempt_at, m.scheduled_date)) END;

-- A scheduler line as the API reads it: its receipt counts and its derived state
-- (`cancelled` when its event is cancelled, `error` while a failure is recorded, `sent`
-- once done, `running` when some attendees got it, else `scheduled`).
CREATE VIEW event.mail_line_view AS
SELECT m.id, m.event_id, m.sequence, m.interval_nbr, m.interval_unit::text AS interval_unit,
    m.interval_kind::text AS interval_kind, m.template_ref,
    m.notification_channel::text AS notification_channel, m.scheduled_date, m.mail_done,
    m.error_kind::text AS error_kind, m.error_datetime, m.error_detail, m.attempts,
    m.next_attempt_at, m.created_at, m.updated_at, e.company_id AS event_company_id,
    sent.n AS count_sent, dropped.n AS count_dropped, failed.n AS count_failed,
    (SELECT count(*) FROM event.registrations r
     WHERE r.event_id = m.event_id AND event.gets_mail(r.state, r.active)
       AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x WHERE x.scheduler_id = m.id
                       AND x.registration_id = r.id AND x.outcome <> 'pending')) AS count_pending,
    CASE WHEN e.kanban_state = 'cancel' THEN 'cancelled'
         WHEN m.error_datetime IS NOT NULL THEN 'error'
         WHEN m.mail_done THEN 'sent'
         WHEN sent.n > 0 THEN 'running'
         ELSE 'scheduled' END AS mail_state
FROM event.mails m
JOIN event.events e ON e.id = m.event_id
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.mail_sent) sent
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.outcome = 'dropped_window_closed') dropped
CROSS JOIN LATERAL (SELECT count(*) AS n FROM event.mail_registrations x
                    WHERE x.scheduler_id = m.id AND x.outcome = 'failed') failed;
