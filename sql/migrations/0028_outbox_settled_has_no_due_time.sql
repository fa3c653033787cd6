-- A sent or failed outbox message is tried no more: it has no due time (null), which the
-- admin views show as `next_attempt_at: null`; every message still to send has one.

ALTER TABLE event.outbox_messages ALTER COLUMN next_attempt_at DROP NOT NULL;

UPDATE event.outbox_messages SET next_attempt_at = NULL
WHERE delivery_state IN ('sent', 'failed');

ALTER TABLE event.outbox_messages
    ADD CONSTRAINT outbox_messages_due_when_unsent
        CHECK ((delivery_state IN ('sent', 'failed')) = (next_attempt_at IS NULL));
