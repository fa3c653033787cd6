-- Delivery (issue 27): every outbox row carries its send state, so the drainer can claim,
-- send, retry and record it, and an operator can see and retry it.
--
--   queued    written, waiting for its first attempt (or put back by a retry)
--   sending   claimed by a drainer until `lease_until` (then claimable again)
--   sent      the relay (or gateway) accepted it: `sent_at`
--   retrying  a temporary failure: tried again at `next_attempt_at`
--   failed    a permanent failure, one that could not be built, or 48 h of retries
--
-- `message_id` is the RFC 5322 Message-ID, fixed when the row is written: every attempt
-- sends the same one, so a receiver can recognise a message sent twice after a crash.

CREATE TYPE event.delivery_state AS ENUM ('queued', 'sending', 'sent', 'retrying', 'failed');

ALTER TABLE event.outbox_messages
    ADD COLUMN delivery_state  event.delivery_state NOT NULL DEFAULT 'queued',
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN lease_until     timestamptz,
    ADD COLUMN sent_at         timestamptz,
    ADD COLUMN message_id      text NOT NULL
        DEFAULT '<' || gen_random_uuid()::text || '@events-svc>',
    ADD COLUMN reply_to        text NOT NULL DEFAULT '',
    ADD COLUMN last_error      jsonb,
    ADD CONSTRAINT outbox_messages_sending_leased
        CHECK (delivery_state <> 'sending' OR lease_until IS NOT NULL),
    ADD CONSTRAINT outbox_messages_sent_stamped
        CHECK (delivery_state <> 'sent' OR sent_at IS NOT NULL);

-- Rows written before: queued, due since they were written, each with its own Message-ID.
UPDATE event.outbox_messages
SET next_attempt_at = created_at, message_id = '<' || id::text || '@events-svc>';

CREATE UNIQUE INDEX outbox_messages_message_id_key ON event.outbox_messages (message_id);
-- the drainer's claim: the rows it works (queued, retrying, or sending with a lease that
-- may run out), in due order; sent and failed rows leave the index
CREATE INDEX outbox_messages_due_idx ON event.outbox_messages (next_attempt_at, delivery_state)
    WHERE delivery_state IN ('queued', 'retrying', 'sending');
-- the operator's views: an event's messages by state
CREATE INDEX outbox_messages_event_state_idx
    ON event.outbox_messages (event_id, delivery_state);

-- Written (or requeued) messages wake the drainers when their transaction commits: one
-- notice per statement, whatever the number of rows.
CREATE FUNCTION event.wake_outbox_drain() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('event_outbox_due', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_messages_wake_drain
    AFTER INSERT ON event.outbox_messages
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_outbox_drain();

-- A mail template may attach the attendee's tickets PDF: the outbox row keeps a reference
-- ({kind: "tickets_pdf", registration_id}), the file is rendered when the message is sent.
ALTER TABLE event.message_templates
    ADD COLUMN attach_tickets boolean NOT NULL DEFAULT false;

-- the template's read model shows it
CREATE OR REPLACE VIEW event.template_view AS
SELECT id, kind::text AS kind, name, subject, body, created_at, updated_at, company_id,
    attach_tickets
FROM event.message_templates;
