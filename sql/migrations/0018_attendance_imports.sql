-- Attendance imports: a job per (company of the actor, event, Idempotency-Key), its rows
-- stored first (what is needed to resolve each one, never the text given), then worked in
-- batches by the scheduler loop and by `resume`. A row's outcome is written once, by the
-- batch that claimed it; the job's counters advance with each batch.

CREATE TYPE event.attendance_import_state AS ENUM
    ('queued', 'running', 'paused', 'completed', 'cancelled', 'failed');
CREATE TYPE event.attendance_import_outcome AS ENUM
    ('marked', 'already_marked', 'unknown_barcode', 'wrong_event', 'not_confirmed',
     'duplicate_row', 'malformed_row');

CREATE TABLE event.attendance_imports (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id         uuid NOT NULL,
    idempotency_key  text NOT NULL,
    -- who created it: the batches audit as this actor and see what it sees
    actor_id         text NOT NULL,
    actor_kind       text NOT NULL,
    actor_company_id uuid,
    state            event.attendance_import_state NOT NULL DEFAULT 'queued',
    total            integer NOT NULL,
    processed        integer NOT NULL DEFAULT 0,
    marked           integer NOT NULL DEFAULT 0,
    already_marked   integer NOT NULL DEFAULT 0,
    error_count      integer NOT NULL DEFAULT 0,
    -- a failing batch: the error's class or code only (never a message: it may quote
    -- values), consecutive failures, and when the loop may try again
    last_error       text,
    last_error_at    timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    CONSTRAINT attendance_imports_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    -- the replay claim: one job per key, per company (platform operators share NULL)
    CONSTRAINT attendance_imports_key UNIQUE NULLS NOT DISTINCT
        (event_id, idempotency_key, actor_company_id),
    CONSTRAINT attendance_imports_key_length
        CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    CONSTRAINT attendance_imports_counts CHECK (
        total BETWEEN 0 AND 10000 AND processed BETWEEN 0 AND total
        AND marked >= 0 AND already_marked >= 0 AND error_count >= 0
        AND marked + already_marked + error_count = processed),
    CONSTRAINT attendance_imports_last_error_length CHECK (char_length(last_error) <= 200)
);
-- the pass's pick and the loop's next-due question read only jobs with work left
CREATE INDEX attendance_imports_open_idx ON event.attendance_imports (next_attempt_at, created_at)
    WHERE state IN ('queued', 'running', 'paused');
CREATE INDEX attendance_imports_event_idx ON event.attendance_imports (event_id, created_at);

-- One row per data row of the import (row_no is 1-based; the header is not counted).
-- `barcode` holds decimal digits and `registration_id` a uuid, as given and trimmed; a row
-- that holds neither usable value is `malformed` (nothing of it is stored).
CREATE TABLE event.attendance_import_rows (
    job_id          uuid NOT NULL,
    row_no          integer NOT NULL,
    barcode         text,
    registration_id uuid,
    malformed       boolean NOT NULL DEFAULT false,
    outcome         event.attendance_import_outcome,  -- null until a batch works the row
    resolved_registration_id uuid,  -- the registration the row named (no FK: a fact)
    CONSTRAINT attendance_import_rows_pkey PRIMARY KEY (job_id, row_no),
    CONSTRAINT attendance_import_rows_job_fkey FOREIGN KEY (job_id)
        REFERENCES event.attendance_imports (id) ON DELETE CASCADE,
    CONSTRAINT attendance_import_rows_row_no_range CHECK (row_no BETWEEN 1 AND 10000),
    CONSTRAINT attendance_import_rows_barcode_digits CHECK (barcode ~ '^[0-9]{1,20}$'),
    CONSTRAINT attendance_import_rows_shape CHECK (
        malformed = (barcode IS NULL AND registration_id IS NULL))
);
-- the batch's claim: the next unprocessed rows of a job, in row order
CREATE INDEX attendance_import_rows_pending_idx ON event.attendance_import_rows (job_id, row_no)
    WHERE outcome IS NULL;
-- the job's error list: the first rows whose outcome is an error
CREATE INDEX attendance_import_rows_errors_idx ON event.attendance_import_rows (job_id, row_no)
    WHERE outcome NOT IN ('marked', 'already_marked');
-- duplicate_row: has an earlier row of this job named the same registration?
CREATE INDEX attendance_import_rows_resolved_idx
    ON event.attendance_import_rows (job_id, resolved_registration_id)
    WHERE resolved_registration_id IS NOT NULL;
