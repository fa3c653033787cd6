-- Read models as views: the ONE definition of each object's columns as the API reads them
-- (casts, aggregated children), so statements select whole rows instead of splicing lists.
CREATE VIEW event.event_view AS
SELECT e.id, e.name, e.description, e.date_begin, e.date_end, e.date_tz, e.seats_limited,
    e.seats_max, e.is_multi_slots, e.event_type_id, e.stage_id,
    e.kanban_state::text AS kanban_state, e.is_published, e.date_publish, e.company_id,
    e.organizer_id, e.address_id, e.location, e.event_url,
    e.badge_format::text AS badge_format, e.active, e.revision, e.ics_sequence,
    e.created_at, e.updated_at,
    ARRAY(SELECT t.tag_id FROM event.event_tags t WHERE t.event_id = e.id ORDER BY t.tag_id)
        AS tag_ids
FROM event.events e;

CREATE VIEW event.registration_view AS
SELECT r.id, r.event_id, r.event_slot_id, r.event_ticket_id, r.state::text AS state,
    r.sale_status::text AS sale_status, r.sale_order_id, r.name, r.email, r.phone,
    r.company_name, r.partner_id, r.barcode, r.active, r.date_open, r.date_closed, r.version,
    r.company_id, r.created_at, r.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('question_id', a.question_id,
        'value_answer_id', a.value_answer_id, 'value_text', a.value_text)
        ORDER BY a.question_id), '[]')
     FROM event.registration_answers a WHERE a.registration_id = r.id) AS answers
FROM event.registrations r;

CREATE VIEW event.question_view AS
SELECT q.id, q.title, q.question_type::text AS question_type, q.is_mandatory_answer,
    q.is_default, q.is_reusable, q.sequence, q.created_at, q.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('id', a.id, 'name', a.name,
        'sequence', a.sequence) ORDER BY a.sequence, a.id), '[]')
     FROM event.question_answers a WHERE a.question_id = q.id) AS answers
FROM event.questions q;

CREATE VIEW event.type_view AS
SELECT t.id, t.name, t.note, t.date_tz, t.seats_limited, t.seats_max, t.created_at,
    t.updated_at,
    (SELECT coalesce(jsonb_agg(to_jsonb(m) - 'type_id' ORDER BY m.sequence, m.id), '[]')
     FROM event.type_mails m WHERE m.type_id = t.id) AS mails,
    (SELECT coalesce(jsonb_agg(to_jsonb(k) - 'type_id' ORDER BY k.created_at, k.id), '[]')
     FROM event.type_tickets k WHERE k.type_id = t.id) AS tickets,
    (SELECT coalesce(jsonb_agg(to_jsonb(q) - 'type_id' ORDER BY q.sequence, q.question_id),
        '[]')
     FROM event.type_questions q WHERE q.type_id = t.id) AS questions
FROM event.types t;

CREATE VIEW event.template_view AS
SELECT id, kind::text AS kind, name, subject, body, created_at, updated_at
FROM event.message_templates;

-- A question on an event is general (asked once per order: the first attendee's answer is
-- copied to the whole group) or specific (asked of every attendee).
ALTER TABLE event.registration_questions
    ADD COLUMN once_per_order boolean NOT NULL DEFAULT false;

-- the done sweep reaches archived events too: its index no longer filters on `active`
DROP INDEX event.events_date_end_idx;
CREATE INDEX events_date_end_idx ON event.events (date_end);
