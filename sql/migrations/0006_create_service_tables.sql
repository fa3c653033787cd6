-- The audit log, API tokens, the standalone template store and the outbox.

CREATE TABLE event.event_audit_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor_id    text NOT NULL,
    actor_kind  text NOT NULL,
    company_id  uuid,
    verb        text NOT NULL,
    object_kind text NOT NULL,
    object_id   uuid,
    event_id    uuid,  -- no FK: the audit trail outlives what it describes
    summary     jsonb NOT NULL DEFAULT '{}'::jsonb  -- field names and states, never raw PII
);
CREATE INDEX event_audit_log_event_idx ON event.event_audit_log (event_id, at);
CREATE INDEX event_audit_log_object_idx ON event.event_audit_log (object_id, at);

CREATE TABLE event.api_tokens (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name         text NOT NULL,
    token_hash   bytea NOT NULL,  -- sha256 of the token; the token itself is never stored
    token_prefix text NOT NULL,   -- the first characters, to recognise a token in lists
    scopes       text[] NOT NULL,
    company_id   uuid,            -- NULL = platform operator
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CONSTRAINT api_tokens_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash),
    CONSTRAINT api_tokens_scopes_not_empty CHECK (cardinality(scopes) > 0)
);

CREATE TABLE event.message_templates (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    kind       event.template_kind NOT NULL DEFAULT 'mail',
    name       text NOT NULL,
    subject    text NOT NULL DEFAULT '',
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT message_templates_name_not_blank CHECK (btrim(name) <> '')
);

CREATE TABLE event.outbox_messages (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    channel         event.notification_channel NOT NULL,
    recipient       text NOT NULL,
    sender          text NOT NULL DEFAULT '',
    subject         text NOT NULL DEFAULT '',
    body            text NOT NULL,
    event_id        uuid,
    registration_id uuid,
    scheduler_id    uuid,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_messages_event_idx ON event.outbox_messages (event_id, created_at);
