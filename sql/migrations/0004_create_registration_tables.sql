-- Registrations (the attendee row) and their answers, with the seat-count indexes.

CREATE TABLE event.registrations (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id            uuid NOT NULL,
    -- mirror of events.is_multi_slots, kept by ON UPDATE CASCADE: lets a CHECK require a slot
    event_is_multi_slots boolean NOT NULL DEFAULT false,
    event_slot_id       uuid,
    event_ticket_id     uuid,
    state               event.registration_state NOT NULL DEFAULT 'open',
    -- the sale seam mirrors: written only by the sale seam
    sale_order_id       uuid,
    sale_order_state    event.sale_order_state,
    sale_amount_is_zero boolean,
    sale_status         event.sale_status,
    name                text NOT NULL DEFAULT '',
    email               text NOT NULL DEFAULT '',
    phone               text NOT NULL DEFAULT '',
    company_name        text NOT NULL DEFAULT '',
    partner_id          uuid,  -- logical ref, "booked by"
    barcode             text NOT NULL,
    active              boolean NOT NULL DEFAULT true,
    date_open           timestamptz,  -- when the row last entered 'open'
    date_closed         timestamptz,
    version             integer NOT NULL DEFAULT 1,
    company_id          uuid,  -- copied from the event at write
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT registrations_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE RESTRICT,
    CONSTRAINT registrations_event_multi_slots_fkey FOREIGN KEY (event_id, event_is_multi_slots)
        REFERENCES event.events (id, is_multi_slots) ON UPDATE CASCADE ON DELETE RESTRICT,
    CONSTRAINT registrations_slot_in_event_fkey FOREIGN KEY (event_slot_id, event_id)
        REFERENCES event.slots (id, event_id) ON DELETE RESTRICT,
    CONSTRAINT registrations_ticket_in_event_fkey FOREIGN KEY (event_ticket_id, event_id)
        REFERENCES event.tickets (id, event_id) ON DELETE RESTRICT,
    CONSTRAINT registrations_slot_required CHECK (NOT event_is_multi_slots OR event_slot_id IS NOT NULL),
    CONSTRAINT registrations_barcode_key UNIQUE (barcode),
    CONSTRAINT registrations_barcode_digits CHECK (barcode ~ '^[0-9]{1,20}$')
);
-- Seat counts: count(*) of state IN ('open','done') AND active per scope, as index-only scans.
CREATE INDEX registrations_seat_event_idx ON event.registrations (event_id, state)
    WHERE state IN ('open', 'done') AND active;
CREATE INDEX registrations_seat_ticket_idx ON event.registrations (event_ticket_id, state)
    WHERE state IN ('open', 'done') AND active AND event_ticket_id IS NOT NULL;
CREATE INDEX registrations_seat_slot_idx ON event.registrations (event_slot_id, event_ticket_id, state)
    WHERE state IN ('open', 'done') AND active AND event_slot_id IS NOT NULL;
CREATE INDEX registrations_event_list_idx ON event.registrations (event_id, id);
CREATE INDEX registrations_sale_order_idx ON event.registrations (sale_order_id)
    WHERE sale_order_id IS NOT NULL;

CREATE TABLE event.registration_answers (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    registration_id uuid NOT NULL,
    question_id     uuid NOT NULL,
    value_answer_id uuid,
    value_text      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT registration_answers_registration_fkey FOREIGN KEY (registration_id)
        REFERENCES event.registrations (id) ON DELETE CASCADE,
    CONSTRAINT registration_answers_question_fkey FOREIGN KEY (question_id)
        REFERENCES event.questions (id) ON DELETE RESTRICT,
    CONSTRAINT registration_answers_answer_of_question_fkey FOREIGN KEY (value_answer_id, question_id)
        REFERENCES event.question_answers (id, question_id) ON DELETE RESTRICT,
    CONSTRAINT registration_answers_value_xor CHECK ((value_answer_id IS NULL) <> (value_text IS NULL)),
    CONSTRAINT registration_answers_registration_question_key UNIQUE (registration_id, question_id)
);
CREATE INDEX registration_answers_question_idx ON event.registration_answers (question_id);
