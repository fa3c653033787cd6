-- The optional trigger dispatcher (EVENT_TRIGGER_DISPATCH=true).
--
-- It follows the trigger feed with a cursor of its own, takes every trigger into a
-- receipt (one per trigger), and turns a receipt into at most one message through the
-- composed template renderer and mail queue. A receipt is settled (sent, skipped) in the
-- transaction that queues its message, so a process killed mid-dispatch leaves either the
-- message and its settled receipt, or neither. A receipt that cannot be sent yet (its
-- purpose has no template, the render or the queue fails) parks and backs off.

CREATE TYPE event.trigger_dispatch_state AS ENUM ('pending', 'sent', 'parked', 'skipped');

-- ONE row: how far the dispatcher has read the feed. Readers lock it FOR UPDATE SKIP
-- LOCKED, so one instance at a time reads the feed and the others go on to the receipts.
CREATE TABLE event.trigger_dispatch_cursor (
    singleton  boolean NOT NULL DEFAULT true,
    position   bigint NOT NULL DEFAULT 0,  -- the last triggers.seq taken into a receipt
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT trigger_dispatch_cursor_pkey PRIMARY KEY (singleton),
    CONSTRAINT trigger_dispatch_cursor_one_row CHECK (singleton),
    CONSTRAINT trigger_dispatch_cursor_position_nonneg CHECK (position >= 0)
);
INSERT INTO event.trigger_dispatch_cursor (singleton, position) VALUES (true, 0);

-- The template of each purpose. No foreign key: the template belongs to the composed
-- renderer, which may keep its templates outside this database; the mapping's write asks
-- the renderer that it exists and is a mail template.
CREATE TABLE event.trigger_templates (
    purpose     event.trigger_purpose NOT NULL,
    template_id uuid NOT NULL,
    updated_at  timestamptz NOT NULL,
    updated_by  text NOT NULL,  -- the actor id of the last write
    CONSTRAINT trigger_templates_pkey PRIMARY KEY (purpose)
);

CREATE TABLE event.trigger_dispatch_receipts (
    trigger_id      uuid NOT NULL,
    seq             bigint NOT NULL,  -- the trigger's feed position (claims go oldest first)
    purpose         event.trigger_purpose NOT NULL,  -- the trigger's: what parks together
    state           event.trigger_dispatch_state NOT NULL DEFAULT 'pending',
    -- why it parked (its latest failure) or was skipped; never attendee data
    error_kind      text,
    error_detail    text,
    attempts        integer NOT NULL DEFAULT 0,  -- consecutive parkings
    next_attempt_at timestamptz,  -- not claimed before this; null once settled
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    settled_at      timestamptz,  -- when it was sent or skipped
    CONSTRAINT trigger_dispatch_receipts_pkey PRIMARY KEY (trigger_id),
    CONSTRAINT trigger_dispatch_receipts_trigger_fkey FOREIGN KEY (trigger_id)
        REFERENCES event.triggers (id) ON DELETE RESTRICT,
    CONSTRAINT trigger_dispatch_receipts_attempts_nonneg CHECK (attempts >= 0),
    CONSTRAINT trigger_dispatch_receipts_due_while_open
        CHECK ((state IN ('pending', 'parked')) = (next_attempt_at IS NOT NULL)),
    CONSTRAINT trigger_dispatch_receipts_settled_when_closed
        CHECK ((state IN ('sent', 'skipped')) = (settled_at IS NOT NULL)),
    CONSTRAINT trigger_dispatch_receipts_error_of_state CHECK (
        (state IN ('pending', 'sent') AND error_kind IS NULL AND error_detail IS NULL)
        OR (state = 'parked' AND error_kind IN ('template_unmapped', 'template_unresolved',
            'template_renderer_not_composed', 'render_failed', 'enqueue_refused',
            'batch_failed'))
        OR (state = 'skipped' AND error_kind IN ('registration_inactive', 'recipient_invalid',
            'superseded', 'event_archived', 'event_cancelled'))),
    CONSTRAINT trigger_dispatch_receipts_detail_capped CHECK (length(error_detail) <= 300)
);
-- the claim: open receipts whose time has come, oldest first
CREATE INDEX trigger_dispatch_receipts_due_idx
    ON event.trigger_dispatch_receipts (next_attempt_at, seq)
    WHERE state IN ('pending', 'parked');
-- the parked receipts of a purpose: released when its template is set, counted in the list
CREATE INDEX trigger_dispatch_receipts_parked_idx
    ON event.trigger_dispatch_receipts (purpose, error_kind)
    WHERE state = 'parked';

-- One message per trigger in the standalone outbox: the receipt already guarantees it, this
-- index is the backstop.
CREATE UNIQUE INDEX outbox_messages_trigger_key
    ON event.outbox_messages (trigger_id) WHERE trigger_id IS NOT NULL;

-- Written triggers wake the scheduler loops when their transaction commits (one notice per
-- transaction, whatever the number of rows), so a dispatcher follows the feed at once.
CREATE FUNCTION event.wake_trigger_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('event_mail_due', 'triggers');
    RETURN NULL;
END
$$;
CREATE TRIGGER triggers_wake_dispatch
    AFTER INSERT ON event.triggers
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_trigger_dispatch();
