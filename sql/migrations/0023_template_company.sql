-- Templates belong to a company (issue 26). `company_id` is the company of the actor who
-- created the template; NULL is a platform template: created by an actor without a
-- company, read by every company, written only by an actor without a company. A line of
-- an event may use a template of the event's company or a platform template; a type's line
-- one of the writing actor's company or a platform template; the dispatcher's mapping,
-- shared by every company, only a platform template.
ALTER TABLE event.message_templates ADD COLUMN company_id uuid;
-- bumped by every edit: the renderer's compiled templates are keyed by (id, revision), so
-- a pass compiles a template once per revision, before it takes any row lock
ALTER TABLE event.message_templates ADD COLUMN revision integer NOT NULL DEFAULT 1;
ALTER TABLE event.message_templates ADD CONSTRAINT message_templates_revision_positive
    CHECK (revision > 0);
CREATE INDEX message_templates_company_idx ON event.message_templates (company_id);

-- THE rule of whose templates a line may use: a template of the line's company, or a
-- platform template (NULL); a line of a shared event (NULL) only a platform template
CREATE FUNCTION event.template_serves(template_company uuid, line_company uuid)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN template_company IS NULL OR template_company IS NOT DISTINCT FROM line_company;

-- Existing templates take the company of the events whose scheduler lines use them, when
-- those events all belong to one company. One used by the events of several companies (or
-- by a shared event, company NULL), and one the trigger dispatcher maps (its mapping
-- serves every company) become platform templates (one no line uses: below): every
-- existing line keeps working, and from now on only a platform operator edits their text,
-- so no company can change what another company's attendees receive.
UPDATE event.message_templates t SET company_id = u.company_id
FROM (
    SELECT m.template_ref, (array_agg(e.company_id))[1] AS company_id
    FROM event.mails m
    JOIN event.events e ON e.id = m.event_id
    GROUP BY m.template_ref
    HAVING count(DISTINCT e.company_id) = 1 AND bool_and(e.company_id IS NOT NULL)
) u
WHERE u.template_ref = t.id
  AND NOT EXISTS (SELECT 1 FROM event.trigger_templates tt WHERE tt.template_id = t.id);

-- A template no line uses and the dispatcher does not map takes the company of the actor
-- who created it, as its creation audit row recorded it (an actor without a company made
-- a platform template): its texts stay its company's, unseen by the others.
UPDATE event.message_templates t SET company_id = a.company_id
FROM (
    SELECT DISTINCT ON (object_id) object_id, company_id
    FROM event.event_audit_log
    WHERE object_kind = 'template' AND verb = 'template_created'
    ORDER BY object_id, at, id
) a
WHERE a.object_id = t.id AND a.company_id IS NOT NULL AND t.company_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM event.mails m WHERE m.template_ref = t.id)
  AND NOT EXISTS (SELECT 1 FROM event.trigger_templates tt WHERE tt.template_id = t.id);

-- the template's read model shows its company (read-only)
CREATE OR REPLACE VIEW event.template_view AS
SELECT id, kind::text AS kind, name, subject, body, created_at, updated_at, company_id
FROM event.message_templates;
