-- Typed CRM lead rules (ECR-4 narrowed): rules over a CLOSED vocabulary of predicate axes,
-- the per-event queue the lead pass claims with a lease, the provenance of every group it
-- handed to the host's lead sink, and the junction that makes re-runs walk only new rows.
-- No domain text is stored and nothing is evaluated: a predicate is an axis and uuids.

CREATE TYPE event.lead_predicate_axis AS ENUM ('event', 'event_type', 'company', 'question_answer');
CREATE TYPE event.lead_trigger AS ENUM ('create', 'confirm');
CREATE TYPE event.lead_grain AS ENUM ('per_order', 'per_event_day');
CREATE TYPE event.lead_sink_state AS ENUM ('pending', 'delivered', 'refused');

-- a JSON array of canonical (lowercase) uuid strings: the shape of every value_ids
CREATE FUNCTION event.is_uuid_array(ids jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_typeof(ids) = 'array' AND coalesce(bool_and(
        jsonb_typeof(x.item) = 'string'
        AND (x.item #>> '{}') ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'),
        true)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(ids) = 'array' THEN ids
                                   ELSE '[]'::jsonb END) AS x(item)
$$;

CREATE TABLE event.lead_rules (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name           text NOT NULL,
    active         boolean NOT NULL DEFAULT true,
    trigger        event.lead_trigger NOT NULL DEFAULT 'create',
    last_error     text,  -- a safe reason (the sink's refusal), never attendee data
    last_error_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lead_rules_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT lead_rules_name_length CHECK (char_length(name) <= 256),
    CONSTRAINT lead_rules_last_error_length CHECK (char_length(last_error) <= 500)
);
-- the arm rule's hot-path question "is any rule active?" is one probe of this index
CREATE INDEX lead_rules_active_idx ON event.lead_rules (trigger) WHERE active;
CREATE INDEX lead_rules_list_idx ON event.lead_rules (created_at, id);

-- Predicates of one rule are ANDed; the value_ids of one predicate are ORed.
CREATE TABLE event.lead_rule_predicates (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    rule_id     uuid NOT NULL,
    axis        event.lead_predicate_axis NOT NULL,
    value_ids   jsonb NOT NULL,
    question_id uuid,
    position    integer NOT NULL DEFAULT 0,
    CONSTRAINT lead_rule_predicates_rule_fkey FOREIGN KEY (rule_id)
        REFERENCES event.lead_rules (id) ON DELETE CASCADE,
    CONSTRAINT lead_rule_predicates_question_fkey FOREIGN KEY (question_id)
        REFERENCES event.questions (id) ON DELETE RESTRICT,
    -- question_id exists on the question_answer axis, and only there
    CONSTRAINT lead_rule_predicates_question_on_answer_axis
        CHECK ((axis = 'question_answer') = (question_id IS NOT NULL)),
    CONSTRAINT lead_rule_predicates_value_ids_shape CHECK (
        event.is_uuid_array(value_ids) AND jsonb_array_length(value_ids) BETWEEN 1 AND 200)
);
CREATE INDEX lead_rule_predicates_rule_idx ON event.lead_rule_predicates (rule_id, position);
CREATE INDEX lead_rule_predicates_question_idx ON event.lead_rule_predicates (question_id)
    WHERE question_id IS NOT NULL;

-- Whether one predicate admits an event (the event-level axes; a question_answer predicate
-- admits the events its question is linked to), and whether it admits one registration
-- (only question_answer looks at the attendee: an answer among value_ids).
CREATE FUNCTION event.lead_admits_event(
    axis event.lead_predicate_axis, value_ids jsonb, question_id uuid,
    event_id uuid, event_type_id uuid, company_id uuid)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE axis
        WHEN 'event' THEN value_ids ? event_id::text
        WHEN 'event_type' THEN event_type_id IS NOT NULL AND value_ids ? event_type_id::text
        WHEN 'company' THEN company_id IS NOT NULL AND value_ids ? company_id::text
        ELSE EXISTS (SELECT 1 FROM event.registration_questions rq
                     WHERE rq.event_id = lead_admits_event.event_id
                       AND rq.question_id = lead_admits_event.question_id)
    END
$$;
CREATE FUNCTION event.lead_admits_registration(
    axis event.lead_predicate_axis, value_ids jsonb, question_id uuid, registration_id uuid)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT axis <> 'question_answer' OR EXISTS (
        SELECT 1 FROM event.registration_answers a
        WHERE a.registration_id = lead_admits_registration.registration_id
          AND a.question_id = lead_admits_registration.question_id
          AND value_ids ? a.value_answer_id::text)
$$;

-- The queue: one request per event. `generation` grows with every arming, so a walk that
-- started before an arming never marks the request done; `claimed_at` + `claimed_by` is
-- the lease (900 s), cleared by finishing; `attempts` / `next_attempt_at` back a parked
-- request off like a failing mail line (1 min doubling to 1 h).
CREATE TABLE event.lead_requests (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id         uuid NOT NULL,
    done             boolean NOT NULL DEFAULT false,
    generation       bigint NOT NULL DEFAULT 1,
    claimed_at       timestamptz,
    claimed_by       uuid,
    claimed_generation bigint,
    error_detail     text,
    error_at         timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    queued_at        timestamptz NOT NULL DEFAULT now(),
    done_at          timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lead_requests_event_key UNIQUE (event_id),
    CONSTRAINT lead_requests_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT lead_requests_error_detail_length CHECK (char_length(error_detail) <= 500),
    CONSTRAINT lead_requests_lease_whole CHECK ((claimed_at IS NULL) = (claimed_by IS NULL))
);
-- the pass's claim and the loop's next-due question read only open requests
CREATE INDEX lead_requests_open_idx ON event.lead_requests (next_attempt_at, queued_at)
    WHERE NOT done;

-- One group handed to the sink per (rule, group_key): `per_order` groups key on the sale
-- order id, `per_event_day` groups on `{event_id}:{YYYY-MM-DD}` (the event-local day of the
-- registration's creation). Deliveries are numbered: `delivery_no` is the latest delivery
-- holding rows, `sent_no` the latest handed to the sink (frozen from then: new rows start
-- the next number), `delivered_no` the latest the sink confirmed. The idempotency key of a
-- delivery is `{id}:{number}`, so a retried call repeats its key and an update never
-- reuses its create's.
CREATE TABLE event.lead_provenances (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    rule_id       uuid NOT NULL,
    group_key     text NOT NULL,
    grain         event.lead_grain NOT NULL,
    event_id      uuid NOT NULL,  -- the event whose rows joined last: its request delivers
    lead_id       text,           -- the host's lead, once a create succeeded
    delivery_no   integer NOT NULL DEFAULT 1,
    sent_no       integer NOT NULL DEFAULT 0,
    delivered_no  integer NOT NULL DEFAULT 0,
    sink_state    event.lead_sink_state NOT NULL DEFAULT 'pending',
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lead_provenances_rule_group_key UNIQUE (rule_id, group_key),
    CONSTRAINT lead_provenances_rule_fkey FOREIGN KEY (rule_id)
        REFERENCES event.lead_rules (id) ON DELETE CASCADE,
    CONSTRAINT lead_provenances_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT lead_provenances_numbers CHECK (
        delivered_no >= 0 AND sent_no >= delivered_no AND delivery_no >= sent_no),
    CONSTRAINT lead_provenances_group_key_length CHECK (char_length(group_key) <= 200),
    CONSTRAINT lead_provenances_lead_id_length CHECK (char_length(lead_id) BETWEEN 1 AND 200),
    CONSTRAINT lead_provenances_last_error_length CHECK (char_length(last_error) <= 500)
);
-- a request delivers its event's pending groups; relink finds a lead's groups
CREATE INDEX lead_provenances_pending_idx ON event.lead_provenances (event_id, rule_id)
    WHERE delivered_no < delivery_no;
CREATE INDEX lead_provenances_lead_idx ON event.lead_provenances (lead_id)
    WHERE lead_id IS NOT NULL;
CREATE INDEX lead_provenances_rule_grain_idx ON event.lead_provenances (rule_id, grain);

-- A registration joins at most one group per rule; `delivery_no` is the delivery that
-- carried it (its group's `new_registration_ids` then).
CREATE TABLE event.lead_provenance_registrations (
    provenance_id   uuid NOT NULL,
    registration_id uuid NOT NULL,
    rule_id         uuid NOT NULL,
    delivery_no     integer NOT NULL,
    CONSTRAINT lead_provenance_registrations_key UNIQUE (provenance_id, registration_id),
    -- the walk's anti-join: rows of a rule already in one of its groups
    CONSTRAINT lead_provenance_registrations_rule_key UNIQUE (rule_id, registration_id),
    CONSTRAINT lead_provenance_registrations_provenance_fkey FOREIGN KEY (provenance_id)
        REFERENCES event.lead_provenances (id) ON DELETE CASCADE,
    CONSTRAINT lead_provenance_registrations_registration_fkey FOREIGN KEY (registration_id)
        REFERENCES event.registrations (id) ON DELETE CASCADE
);
CREATE INDEX lead_provenance_registrations_registration_idx
    ON event.lead_provenance_registrations (registration_id);

-- A rule as the API reads it: its predicates in order, its groups per grain (ECS-2) and
-- its last sink error.
CREATE VIEW event.lead_rule_view AS
SELECT r.id, r.name, r.active, r.trigger::text AS trigger, r.last_error, r.last_error_at,
    r.created_at, r.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('axis', p.axis::text,
        'value_ids', p.value_ids, 'question_id', p.question_id) ORDER BY p.position), '[]')
     FROM event.lead_rule_predicates p WHERE p.rule_id = r.id) AS predicates,
    jsonb_build_object(
        'per_order', (SELECT count(*) FROM event.lead_provenances v
                      WHERE v.rule_id = r.id AND v.grain = 'per_order'),
        'per_event_day', (SELECT count(*) FROM event.lead_provenances v
                          WHERE v.rule_id = r.id AND v.grain = 'per_event_day')) AS groups
FROM event.lead_rules r;
