-- Lead rules belong to a company (issue 26, item 4): `company_id` is the company of the
-- actor that created the rule (NULL: a platform rule, made by an actor without a company).
-- A rule reaches only events and registrations visible to its company
-- (`event.visible_to(row company, rule company)`: its own and the shared ones; a platform
-- rule every one), and a company actor reads, writes, runs and relinks only its company's
-- rules (`event.lead_rule_visible_to`).

ALTER TABLE event.lead_rules ADD COLUMN company_id uuid;

-- Existing rules take the company of the actor that created them, as the rule's creation
-- audit row recorded it (a rule made by an actor without a company stays a platform rule).
UPDATE event.lead_rules r SET company_id = a.company_id
FROM (
    SELECT DISTINCT ON (object_id) object_id, company_id
    FROM event.event_audit_log
    WHERE object_kind = 'lead_rule'
      AND verb IN ('lead_rule_created', 'lead_rule_created_from_answer')
    ORDER BY object_id, at, id
) a
WHERE a.object_id = r.id AND a.company_id IS NOT NULL;

-- A rule with no creation row (written outside the verbs) takes the company of the events
-- it can match when those events (the shared ones aside) all belong to one company;
-- otherwise it stays a platform rule, which keeps what it reached so far.
UPDATE event.lead_rules r SET company_id = m.company_id
FROM (
    SELECT r2.id, min(e.company_id::text)::uuid AS company_id
    FROM event.lead_rules r2
    JOIN event.events e ON e.company_id IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM event.lead_rule_predicates p
        WHERE p.rule_id = r2.id AND NOT event.lead_admits_event(
            p.axis, p.value_ids, p.question_id, e.id, e.event_type_id, e.company_id))
    GROUP BY r2.id
    HAVING count(DISTINCT e.company_id) = 1
) m
WHERE m.id = r.id AND r.company_id IS NULL AND NOT EXISTS (
    SELECT 1 FROM event.event_audit_log a
    WHERE a.object_id = r.id AND a.object_kind = 'lead_rule'
      AND a.verb IN ('lead_rule_created', 'lead_rule_created_from_answer'));

CREATE INDEX lead_rules_company_idx ON event.lead_rules (company_id, created_at, id);

-- Who sees a rule (its read model, writes, relink of its groups' leads): the platform
-- actor (no company) every rule; a company actor its company's rules only. Stricter than
-- `event.visible_to`: a platform rule is not shared configuration (its predicates may
-- name any company's events and its groups count their registrations).
CREATE FUNCTION event.lead_rule_visible_to(rule_company uuid, actor_company uuid)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN actor_company IS NULL OR rule_company = actor_company;

-- The read model carries the rule's company (read-only).
CREATE OR REPLACE VIEW event.lead_rule_view AS
SELECT r.id, r.name, r.active, r.trigger::text AS trigger, r.last_error, r.last_error_at,
    r.created_at, r.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('axis', p.axis::text,
        'value_ids', p.value_ids, 'question_id', p.question_id) ORDER BY p.position), '[]')
     FROM event.lead_rule_predicates p WHERE p.rule_id = r.id) AS predicates,
    jsonb_build_object(
        'per_order', (SELECT count(*) FROM event.lead_provenances v
                      WHERE v.rule_id = r.id AND v.grain = 'per_order'),
        'per_event_day', (SELECT count(*) FROM event.lead_provenances v
                          WHERE v.rule_id = r.id AND v.grain = 'per_event_day')) AS groups,
    r.company_id
FROM event.lead_rules r;
