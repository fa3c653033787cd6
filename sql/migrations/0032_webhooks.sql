-- Webhooks for integrators (issue 30): endpoints, the facts the verbs write with their
-- change, and the messages and delivery attempts the delivery pass makes of them.
--
-- A verb writes ONE fact row per change, in its own transaction, and only when some
-- active endpoint wants it (`event.webhook_listens`): a rolled-back change leaves no
-- fact, a committed one cannot be lost. The delivery pass fans each fact out to the
-- endpoints that want it (one message per endpoint, its body fixed then) and deletes the
-- fact; each message then has one delivery row per attempt:
--
--   pending    due at `next_attempt_at` (while a pass holds it: `lease_until`, and
--              `next_attempt_at` moved to the lease's end, so a dead holder's row is
--              due again when its lease runs out)
--   succeeded  answered 2xx
--   retrying   failed; the next attempt is its own pending row at `next_attempt_at`
--   failed     failed, and no attempt follows (schedule spent, 410, or disabled)

CREATE TABLE event.webhook_endpoints (
    id                    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    company_id            uuid,  -- NULL: a platform endpoint (every company's facts)
    url                   text NOT NULL CHECK (length(url) BETWEEN 8 AND 2048),
    event_types           text[] NOT NULL CHECK (cardinality(event_types) BETWEEN 1 AND 16),
    event_id              uuid REFERENCES event.events (id) ON DELETE CASCADE,
    description           text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    include_pii           boolean NOT NULL DEFAULT false,
    active                boolean NOT NULL DEFAULT true,
    -- `whsec_` + base64 of 32 random bytes: the service signs with it, so it is kept as
    -- is; no read model, log or audit row ever carries it
    secret                text NOT NULL,
    previous_secret       text,  -- still signs (a second signature) until ...
    previous_secret_until timestamptz,
    disabled_reason       text CHECK (disabled_reason IN ('gone', 'failing')),
    failing_since         timestamptz,  -- the first failure since the last success
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    CONSTRAINT webhook_endpoints_rotation_pair
        CHECK ((previous_secret IS NULL) = (previous_secret_until IS NULL))
);
CREATE INDEX webhook_endpoints_company_idx ON event.webhook_endpoints (company_id, created_at);

-- Whether endpoint `w` wants a fact of `kind` about `event` (of `company`): the ONE rule,
-- for the verbs' write (`webhook_listens`) and the pass's fan-out alike.
CREATE FUNCTION event.webhook_wants(w event.webhook_endpoints, company uuid, event uuid, kind text)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
RETURN w.active AND kind = ANY (w.event_types) AND event.visible_to(company, w.company_id)
    AND (w.event_id IS NULL OR w.event_id = event);

CREATE FUNCTION event.webhook_listens(company uuid, event uuid, kind text)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
RETURN EXISTS (SELECT 1 FROM event.webhook_endpoints w
               WHERE event.webhook_wants(w, company, event, kind));

-- What a registration fact says: ids, states and times; `registration_pii` holds what only
-- an endpoint with `include_pii` receives (the barcode too: it opens the door).
CREATE FUNCTION event.registration_fact(r event.registrations)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
RETURN jsonb_build_object(
    'registration_id', r.id, 'event_id', r.event_id, 'event_slot_id', r.event_slot_id,
    'event_ticket_id', r.event_ticket_id, 'state', r.state, 'active', r.active,
    'sale_status', r.sale_status, 'sale_order_id', r.sale_order_id,
    'origin', r.state_origin, 'version', r.version, 'date_open', r.date_open,
    'date_closed', r.date_closed, 'created_at', r.created_at, 'updated_at', r.updated_at);

CREATE FUNCTION event.registration_pii(r event.registrations)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
RETURN jsonb_build_object('name', r.name, 'email', r.email, 'phone', r.phone,
    'company_name', r.company_name, 'barcode', r.barcode);

CREATE FUNCTION event.event_fact(e event.events)
RETURNS jsonb LANGUAGE sql STABLE PARALLEL SAFE
RETURN jsonb_build_object(
    'event_id', e.id, 'name', e.name, 'date_begin', e.date_begin, 'date_end', e.date_end,
    'date_tz', e.date_tz, 'location', e.location, 'is_published', e.is_published,
    'kanban_state', e.kanban_state, 'stage_id', e.stage_id, 'active', e.active,
    'revision', e.revision, 'updated_at', e.updated_at);

CREATE TABLE event.webhook_facts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    company_id  uuid,
    event_id    uuid,
    type        text NOT NULL,
    occurred_at timestamptz NOT NULL,
    data        jsonb NOT NULL,
    pii         jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE event.webhook_messages (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),  -- `webhook-id`: msg_<hex>
    endpoint_id uuid NOT NULL REFERENCES event.webhook_endpoints (id) ON DELETE CASCADE,
    event_type  text NOT NULL,
    body        text NOT NULL,  -- the exact bytes signed and sent, on every attempt
    created_at  timestamptz NOT NULL
);
CREATE INDEX webhook_messages_endpoint_idx ON event.webhook_messages (endpoint_id, created_at);

CREATE TYPE event.webhook_delivery_state AS ENUM ('pending', 'succeeded', 'retrying', 'failed');

CREATE TABLE event.webhook_deliveries (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    message_id      uuid NOT NULL REFERENCES event.webhook_messages (id) ON DELETE CASCADE,
    endpoint_id     uuid NOT NULL REFERENCES event.webhook_endpoints (id) ON DELETE CASCADE,
    attempt         integer NOT NULL CHECK (attempt BETWEEN 1 AND 10000),
    state           event.webhook_delivery_state NOT NULL DEFAULT 'pending',
    response_status integer,
    duration_ms     integer,
    error           text,  -- a short reason (timeout, connection, blocked address), no body
    next_attempt_at timestamptz,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL,
    attempted_at    timestamptz,
    CONSTRAINT webhook_deliveries_pending_due
        CHECK (state <> 'pending' OR next_attempt_at IS NOT NULL)
);
-- the pass's claim: per endpoint, its due attempts in order
CREATE INDEX webhook_deliveries_due_idx ON event.webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE state = 'pending';
-- at most one attempt of a message waits at a time
CREATE UNIQUE INDEX webhook_deliveries_one_pending
    ON event.webhook_deliveries (message_id) WHERE state = 'pending';
-- the delivery log: an endpoint's attempts, newest first
CREATE INDEX webhook_deliveries_log_idx
    ON event.webhook_deliveries (endpoint_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_message_idx ON event.webhook_deliveries (message_id);

-- A written fact or a queued attempt wakes the delivery passes when its transaction
-- commits: one notice per statement.
CREATE FUNCTION event.wake_webhook_pass() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('event_webhook_due', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER webhook_facts_wake_pass
    AFTER INSERT ON event.webhook_facts
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_webhook_pass();
CREATE TRIGGER webhook_deliveries_wake_pass
    AFTER INSERT ON event.webhook_deliveries
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_webhook_pass();

-- The read models: never the secrets.
CREATE VIEW event.webhook_endpoint_view AS
SELECT id, company_id, url, event_types, event_id, description, include_pii, active,
    disabled_reason, failing_since, previous_secret_until AS rotation_ends_at, created_at,
    updated_at
FROM event.webhook_endpoints;

CREATE VIEW event.webhook_delivery_view AS
SELECT d.id, d.endpoint_id, d.message_id AS message_uuid,
    'msg_' || replace(d.message_id::text, '-', '') AS message_id, m.event_type, d.attempt,
    d.state::text AS state, d.response_status, d.duration_ms, d.error, d.next_attempt_at,
    d.created_at, d.attempted_at
FROM event.webhook_deliveries d JOIN event.webhook_messages m ON m.id = d.message_id;
