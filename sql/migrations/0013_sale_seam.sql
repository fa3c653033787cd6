-- The sale seam: unpaid orders hold seats, who set a sale-linked row's state last, the
-- billing side's order facts as the seam remembers them, and the exactly-once inbox.

-- Who set a sale-linked registration's state last: the sale (mint, heal, cancel cascade) or
-- an officer's verb. NULL on rows no order is linked to. The heal lifts only `sale` rows.
CREATE TYPE event.state_origin AS ENUM ('sale', 'officer');
ALTER TABLE event.registrations ADD COLUMN state_origin event.state_origin;
ALTER TABLE event.registrations ADD CONSTRAINT registrations_state_origin_with_order
    CHECK (state_origin IS NULL OR sale_order_id IS NOT NULL);

-- The ONE seat counter's domain widens: a draft of an unpaid order holds its seat. The seat
-- indexes are rebuilt on the new predicate in the same migration (the old function goes).
DROP INDEX event.registrations_seat_event_idx;
DROP INDEX event.registrations_seat_ticket_idx;
DROP INDEX event.registrations_seat_slot_idx;
DROP FUNCTION event.holds_seat(event.registration_state, boolean);
CREATE FUNCTION event.holds_seat(
    state event.registration_state, active boolean, sale_status event.sale_status)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN active AND (state IN ('open', 'done')
                   OR (state = 'draft' AND sale_status IS NOT DISTINCT FROM 'to_pay'));
CREATE INDEX registrations_seat_event_idx ON event.registrations (event_id, state)
    WHERE event.holds_seat(state, active, sale_status);
CREATE INDEX registrations_seat_ticket_idx ON event.registrations (event_ticket_id, state)
    WHERE event.holds_seat(state, active, sale_status) AND event_ticket_id IS NOT NULL;
CREATE INDEX registrations_seat_slot_idx ON event.registrations
    (event_slot_id, event_ticket_id, state)
    WHERE event.holds_seat(state, active, sale_status) AND event_slot_id IS NOT NULL;

-- The orders the billing side told us about: the latest order state the facts imply, and
-- whether it was ever paid (a paid fact that arrives before its confirmed fact is kept
-- here, so the confirmed fact then mints the attendees paid).
CREATE TABLE event.sale_orders (
    order_id        uuid PRIMARY KEY,
    state           event.sale_order_state NOT NULL,
    amount_is_zero  boolean,  -- NULL until a confirmed fact says it
    currency        text CHECK (char_length(currency) <= 16),
    paid_at         timestamptz,
    cancelled_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The exactly-once inbox: one row per delivered fact, claimed with INSERT .. ON CONFLICT DO
-- NOTHING in the fact's own transaction; the row records the outcome that every
-- redelivery answers again.
CREATE TABLE event.seam_inbox (
    consumer          text NOT NULL,
    external_id       text NOT NULL CHECK (char_length(external_id) <= 300),
    verb              text NOT NULL CHECK (verb IN ('confirmed', 'paid', 'cancelled')),
    order_id          uuid NOT NULL,
    outcome           text NOT NULL DEFAULT 'claimed',
    detail            jsonb NOT NULL DEFAULT '{}',
    registration_ids  uuid[] NOT NULL DEFAULT '{}',
    skipped_ids       uuid[] NOT NULL DEFAULT '{}',
    overbooked        boolean NOT NULL DEFAULT false,
    actor_id          text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, external_id)
);
CREATE INDEX seam_inbox_order_idx ON event.seam_inbox (order_id, created_at);

-- the registration read model gains who set the state last
CREATE OR REPLACE VIEW event.registration_view AS
SELECT r.id, r.event_id, r.event_slot_id, r.event_ticket_id, r.state::text AS state,
    r.sale_status::text AS sale_status, r.sale_order_id, r.name, r.email, r.phone,
    r.company_name, r.partner_id, r.barcode, r.active, r.date_open, r.date_closed, r.version,
    r.company_id, r.created_at, r.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('question_id', a.question_id,
        'value_answer_id', a.value_answer_id, 'value_text', a.value_text)
        ORDER BY a.question_id), '[]')
     FROM event.registration_answers a WHERE a.registration_id = r.id) AS answers,
    r.state_origin::text AS state_origin
FROM event.registrations r;
