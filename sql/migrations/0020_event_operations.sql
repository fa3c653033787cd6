-- Event operations and their triggers.
--
-- An operation (reschedule, cancellation, reminder, follow-up) is previewed on an event
-- revision, then started: ONE transaction applies the event change (reschedule,
-- cancellation), bumps ics_sequence once, and snapshots the audience into
-- operation_audience. Batches then turn the snapshot into triggers, one transaction each.
--
-- A trigger is a fact for a downstream consumer: ids, purpose, the event revision and
-- calendar sequence after the change, the registration version, the ICS method and a
-- small typed context. It never holds a template, a text, a sender or an address.
-- Triggers are immutable: nothing in the service updates or deletes one, and the
-- guards below refuse UPDATE, DELETE and TRUNCATE at the database too.

CREATE TYPE event.operation_kind AS ENUM ('reschedule', 'cancellation', 'reminder', 'follow_up');
CREATE TYPE event.operation_state AS ENUM
    ('previewed', 'running', 'paused', 'completed', 'cancelled', 'failed');
CREATE TYPE event.trigger_purpose AS ENUM
    ('event_rescheduled', 'event_cancelled', 'event_reminder', 'event_follow_up');
CREATE TYPE event.audience_outcome AS ENUM ('created', 'existing', 'skipped_inactive');

-- The ONE audience rule: an active registration in `open` or `done` (for a reminder or a
-- follow-up, created at or before the cutoff; no cutoff: any). The estimate, the snapshot
-- and each batch's "still in it?" read it.
CREATE FUNCTION event.in_audience(
    state event.registration_state, active boolean, created_at timestamptz,
    cutoff timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN active AND state IN ('open', 'done') AND (cutoff IS NULL OR created_at <= cutoff);

CREATE TABLE event.event_operations (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id          uuid NOT NULL,
    kind              event.operation_kind NOT NULL,
    state             event.operation_state NOT NULL DEFAULT 'previewed',
    -- the typed parameters of the kind (dates and zone and location, a reason, a cutoff)
    params            jsonb NOT NULL,
    revision          integer NOT NULL,  -- the event revision the preview saw
    audience_estimate integer NOT NULL,
    -- who previewed it: the batches audit as this actor
    actor_id          text NOT NULL,
    actor_kind        text NOT NULL,
    actor_company_id  uuid,
    -- set by the start, in its transaction: the event after the change, the snapshot size
    started_by        text,
    event_revision    integer,
    ics_sequence      integer,
    ctx_date_begin    timestamptz,
    ctx_date_end      timestamptz,
    ctx_date_tz       text,
    ctx_location      text,
    audience          integer NOT NULL DEFAULT 0,
    processed         integer NOT NULL DEFAULT 0,
    triggers_created  integer NOT NULL DEFAULT 0,
    skipped_inactive  integer NOT NULL DEFAULT 0,
    -- failed batches: how many, the latest ones' codes (class or code, never a message),
    -- consecutive failures and when the loop may try again
    error_count       integer NOT NULL DEFAULT 0,
    errors            jsonb NOT NULL DEFAULT '[]'::jsonb,
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz,
    -- an event is deleted only without registrations, so without triggers: its
    -- operations (previewed, or completed on an empty audience) go with it
    CONSTRAINT event_operations_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT event_operations_params_object CHECK (jsonb_typeof(params) = 'object'),
    CONSTRAINT event_operations_counts CHECK (
        audience_estimate >= 0 AND audience >= 0 AND processed BETWEEN 0 AND audience
        AND triggers_created >= 0 AND skipped_inactive >= 0
        AND triggers_created + skipped_inactive = processed
        AND error_count >= 0 AND attempts >= 0),
    CONSTRAINT event_operations_errors_capped
        CHECK (jsonb_typeof(errors) = 'array' AND jsonb_array_length(errors) <= 20),
    CONSTRAINT event_operations_started CHECK (
        state = 'previewed' OR (state = 'cancelled' AND started_at IS NULL)
        OR (started_at IS NOT NULL AND event_revision IS NOT NULL
            AND ics_sequence IS NOT NULL AND ctx_date_begin IS NOT NULL))
);
-- one operation of a kind in progress per event: the start's typed check under the event
-- lock answers 409 operation_in_progress; this index is the backstop
CREATE UNIQUE INDEX event_operations_one_in_progress
    ON event.event_operations (event_id, kind) WHERE state IN ('running', 'paused', 'failed');
-- the pass's pick and the loop's next-due question read only operations with work left
CREATE INDEX event_operations_open_idx ON event.event_operations (next_attempt_at, started_at)
    WHERE state IN ('running', 'paused');
CREATE INDEX event_operations_event_idx ON event.event_operations (event_id, created_at);

-- The audience snapshot of a started operation: who it is for, as they were at the start.
-- A batch records each row's outcome once.
CREATE TABLE event.operation_audience (
    operation_id         uuid NOT NULL,
    registration_id      uuid NOT NULL,
    registration_version integer NOT NULL,
    event_revision       integer NOT NULL,  -- the event's, after the change
    ics_sequence         integer NOT NULL,  -- the event's, after the change
    outcome              event.audience_outcome,  -- null until a batch works the row
    CONSTRAINT operation_audience_pkey PRIMARY KEY (operation_id, registration_id),
    CONSTRAINT operation_audience_operation_fkey FOREIGN KEY (operation_id)
        REFERENCES event.event_operations (id) ON DELETE CASCADE
);
-- the batch's claim: the next unworked rows of an operation, in registration order
CREATE INDEX operation_audience_pending_idx ON event.operation_audience (operation_id, registration_id)
    WHERE outcome IS NULL;

CREATE TABLE event.triggers (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    -- the feed's order: trigger writers serialise on one transaction lock while they
    -- insert, so this order is the commit order and a stored position never skips a row
    seq                  bigint GENERATED ALWAYS AS IDENTITY,
    operation_id         uuid NOT NULL,
    event_id             uuid NOT NULL,
    registration_id      uuid NOT NULL,
    purpose              event.trigger_purpose NOT NULL,
    event_revision       integer NOT NULL,
    registration_version integer NOT NULL,
    ics_sequence         integer NOT NULL,
    ics_method           text,
    ctx_date_begin       timestamptz NOT NULL,
    ctx_date_end         timestamptz NOT NULL,
    ctx_date_tz          text NOT NULL,
    ctx_location         text,
    -- the registration's slot when its batch wrote the trigger, with the slot's times
    -- (its calendar entry is the slot's: another UID, other times)
    event_slot_id        uuid,
    ctx_slot_begin       timestamptz,
    ctx_slot_end         timestamptz,
    created_at           timestamptz NOT NULL,
    CONSTRAINT triggers_seq_key UNIQUE (seq),
    CONSTRAINT triggers_operation_fkey FOREIGN KEY (operation_id)
        REFERENCES event.event_operations (id) ON DELETE RESTRICT,
    CONSTRAINT triggers_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE RESTRICT,
    CONSTRAINT triggers_registration_fkey FOREIGN KEY (registration_id)
        REFERENCES event.registrations (id) ON DELETE RESTRICT,
    -- the method follows the purpose: calendar changes carry one, messages none
    CONSTRAINT triggers_method_of_purpose CHECK (
        (purpose = 'event_rescheduled' AND ics_method = 'REQUEST')
        OR (purpose = 'event_cancelled' AND ics_method = 'CANCEL')
        OR (purpose IN ('event_reminder', 'event_follow_up') AND ics_method IS NULL)),
    CONSTRAINT triggers_context_order CHECK (ctx_date_end >= ctx_date_begin),
    CONSTRAINT triggers_slot_context CHECK (
        (event_slot_id IS NULL AND ctx_slot_begin IS NULL AND ctx_slot_end IS NULL)
        OR (event_slot_id IS NOT NULL AND ctx_slot_end >= ctx_slot_begin))
);
-- the identity: one calendar change per (registration, purpose, sequence); one message
-- per (registration, operation). A replay, a resume or a restarted worker inserts with ON
-- CONFLICT DO NOTHING and never duplicates one.
CREATE UNIQUE INDEX triggers_calendar_identity
    ON event.triggers (registration_id, purpose, ics_sequence)
    WHERE purpose IN ('event_rescheduled', 'event_cancelled');
CREATE UNIQUE INDEX triggers_message_identity
    ON event.triggers (registration_id, operation_id)
    WHERE purpose IN ('event_reminder', 'event_follow_up');
-- the feed of one event
CREATE INDEX triggers_event_feed_idx ON event.triggers (event_id, seq);

CREATE TRIGGER triggers_immutable
    BEFORE UPDATE OR DELETE ON event.triggers
    FOR EACH ROW EXECUTE FUNCTION event.refuse_history_rewrite();
CREATE TRIGGER triggers_no_truncate
    BEFORE TRUNCATE ON event.triggers
    FOR EACH STATEMENT EXECUTE FUNCTION event.refuse_history_rewrite();
