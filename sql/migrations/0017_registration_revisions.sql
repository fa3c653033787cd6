-- Operator operations on registrations: the revision history of reasoned commands
-- (corrections, cancel, reactivate, the partner sync), and the replay store that makes a
-- command sent twice with one Idempotency-Key answer its first result.
--
-- Revisions are append-only: nothing in the service updates or deletes one, and the
-- triggers below refuse UPDATE, DELETE and TRUNCATE at the database too. A revision lives
-- as long as its registration (registrations are archived, never deleted). A replay row
-- is written once by its claiming transaction (the claim, then its answer) and never
-- deleted; it holds no attendee data.

CREATE TYPE event.revision_verb AS ENUM ('correct', 'cancel', 'reactivate', 'sync_from_partner');

CREATE TABLE event.registration_revisions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    registration_id  uuid NOT NULL,
    version          integer NOT NULL,  -- the registration's version after the change
    verb             event.revision_verb NOT NULL,
    actor_id         text NOT NULL,
    actor_kind       text NOT NULL,
    reason           text NOT NULL,
    fields           text[] NOT NULL,
    -- {field: {before, after}}: attendee values, read only through the masked history
    changes          jsonb NOT NULL,
    at               timestamptz NOT NULL,
    CONSTRAINT registration_revisions_registration_fkey FOREIGN KEY (registration_id)
        REFERENCES event.registrations (id) ON DELETE RESTRICT,
    -- one revision per version: every reasoned write bumps the version under the row lock
    CONSTRAINT registration_revisions_version_key UNIQUE (registration_id, version),
    CONSTRAINT registration_revisions_reason_length
        CHECK (char_length(reason) BETWEEN 1 AND 500 AND btrim(reason) <> ''),
    CONSTRAINT registration_revisions_fields_not_empty CHECK (cardinality(fields) > 0),
    CONSTRAINT registration_revisions_changes_object CHECK (jsonb_typeof(changes) = 'object')
);

-- A command's first answer, kept for its replays. The claim is the primary key: a twin
-- sent at the same time waits on it and then reads the first one's answer.
CREATE TABLE event.command_replays (
    actor_id         text NOT NULL,
    idempotency_key  text NOT NULL,
    verb             text NOT NULL,
    object_id        uuid NOT NULL,
    -- sha256 of the verb, the object and the body: the same key with another command is
    -- refused, never answered with the first command's result
    fingerprint      text NOT NULL,
    -- the first answer without the attendee's name, email, phone and answers; set in the
    -- claiming transaction, before it commits
    answer           jsonb,
    created_at       timestamptz NOT NULL,
    CONSTRAINT command_replays_pkey PRIMARY KEY (actor_id, idempotency_key),
    CONSTRAINT command_replays_key_length CHECK (char_length(idempotency_key) BETWEEN 1 AND 200)
);

CREATE FUNCTION event.refuse_history_rewrite() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'history rows are append-only (%)', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE TRIGGER registration_revisions_append_only
    BEFORE UPDATE OR DELETE ON event.registration_revisions
    FOR EACH ROW EXECUTE FUNCTION event.refuse_history_rewrite();
CREATE TRIGGER registration_revisions_no_truncate
    BEFORE TRUNCATE ON event.registration_revisions
    FOR EACH STATEMENT EXECUTE FUNCTION event.refuse_history_rewrite();
