-- A receipt can record a per-recipient failure (an attendee without a usable address).
-- Alone in its file: a new enum value cannot be used in the transaction that adds it.
ALTER TYPE event.receipt_outcome ADD VALUE 'failed';
ALTER TYPE event.mail_error_kind ADD VALUE 'batch_failed';
