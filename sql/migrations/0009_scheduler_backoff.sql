-- Scheduler failures: per-recipient failures live on their receipt; line-level failures
-- back off with a stored next attempt. The outbox gains the fields of its read model.

ALTER TABLE event.mail_registrations
    ADD COLUMN error_kind event.mail_error_kind,
    ADD COLUMN failed_at  timestamptz,
    ADD CONSTRAINT mail_registrations_failure_pair CHECK (
        (outcome = 'failed') = (error_kind IS NOT NULL AND failed_at IS NOT NULL));
-- the failed receipts of one attendee, reset when the registration changes
CREATE INDEX mail_registrations_failed_idx ON event.mail_registrations (registration_id)
    WHERE outcome = 'failed';

ALTER TABLE event.mails
    ADD COLUMN error_detail    text,  -- the exception type and template line, never data
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,  -- consecutive failed attempts
    ADD COLUMN next_attempt_at timestamptz,  -- a failing line is not claimed before this
    ADD CONSTRAINT mails_attempts_nonneg CHECK (attempts >= 0),
    ADD CONSTRAINT mails_backoff_needs_error CHECK (
        next_attempt_at IS NULL OR error_kind IS NOT NULL);

ALTER TABLE event.outbox_messages
    ADD COLUMN attachments jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN trigger_id  uuid;
