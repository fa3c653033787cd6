-- The waiting list: per-event settings, the queue of entries, and offers made of held
-- draft registrations that the ONE seat counter counts (design 7.15: no second counter).

-- An offer's drafts carry the instant their hold ends. Only a draft born of an offer has
-- one; the state transition clears it when the row leaves `draft`.
ALTER TABLE event.registrations ADD COLUMN hold_expires_at timestamptz;
ALTER TABLE event.registrations DROP CONSTRAINT registrations_state_origin_with_order;
ALTER TABLE event.registrations ADD CONSTRAINT registrations_state_origin_with_order
    CHECK (state_origin IS NULL OR sale_order_id IS NOT NULL OR state_origin = 'waitlist');
ALTER TABLE event.registrations ADD CONSTRAINT registrations_hold_is_waitlist_draft
    CHECK (hold_expires_at IS NULL OR (state = 'draft' AND state_origin = 'waitlist'));

-- the registration read model shows the end of a held offer's hold
CREATE OR REPLACE VIEW event.registration_view AS
SELECT r.id, r.event_id, r.event_slot_id, r.event_ticket_id, r.state::text AS state,
    r.sale_status::text AS sale_status, r.sale_order_id, r.name, r.email, r.phone,
    r.company_name, r.partner_id, r.barcode, r.active, r.date_open, r.date_closed, r.version,
    r.company_id, r.created_at, r.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('question_id', a.question_id,
        'value_answer_id', a.value_answer_id, 'value_text', a.value_text)
        ORDER BY a.question_id), '[]')
     FROM event.registration_answers a WHERE a.registration_id = r.id) AS answers,
    r.state_origin::text AS state_origin, r.hold_expires_at
FROM event.registrations r;

-- The seat counter's domain widens once more: a held draft holds its seat while its hold
-- lasts. `holds_seat` is the time-free part (the partial indexes' predicate: a held draft
-- is in it whether or not its hold has ended); `holds_seat_at` is THE definition, the
-- time-free part and a hold that has not ended at `at`. Every count asks `holds_seat_at`.
DROP INDEX event.registrations_seat_event_idx;
DROP INDEX event.registrations_seat_ticket_idx;
DROP INDEX event.registrations_seat_slot_idx;
DROP FUNCTION event.holds_seat(event.registration_state, boolean, event.sale_status);
CREATE FUNCTION event.holds_seat(
    state event.registration_state, active boolean, sale_status event.sale_status,
    hold_expires_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN active AND (state IN ('open', 'done')
                   OR (state = 'draft' AND (sale_status IS NOT DISTINCT FROM 'to_pay'
                                            OR hold_expires_at IS NOT NULL)));
CREATE FUNCTION event.holds_seat_at(
    state event.registration_state, active boolean, sale_status event.sale_status,
    hold_expires_at timestamptz, at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN event.holds_seat(state, active, sale_status, hold_expires_at)
       AND (hold_expires_at IS NULL OR hold_expires_at > at);
CREATE INDEX registrations_seat_event_idx ON event.registrations (event_id, state)
    INCLUDE (hold_expires_at)
    WHERE event.holds_seat(state, active, sale_status, hold_expires_at);
CREATE INDEX registrations_seat_ticket_idx ON event.registrations (event_ticket_id, state)
    INCLUDE (hold_expires_at)
    WHERE event.holds_seat(state, active, sale_status, hold_expires_at)
      AND event_ticket_id IS NOT NULL;
CREATE INDEX registrations_seat_slot_idx ON event.registrations
    (event_slot_id, event_ticket_id, state) INCLUDE (hold_expires_at)
    WHERE event.holds_seat(state, active, sale_status, hold_expires_at)
      AND event_slot_id IS NOT NULL;

-- Per event: whether the list takes entries, how long an offer is held, and the mail
-- template of an offer (none: the built-in text). No row: the defaults (off, 48 h).
CREATE TABLE event.waitlist_settings (
    event_id          uuid PRIMARY KEY REFERENCES event.events (id) ON DELETE CASCADE,
    enabled           boolean NOT NULL DEFAULT false,
    offer_hours       integer NOT NULL DEFAULT 48 CHECK (offer_hours BETWEEN 1 AND 336),
    offer_template_id uuid,  -- a template ref (the composed renderer's; checked at write)
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TYPE event.waitlist_status AS ENUM
    ('waiting', 'offered', 'accepted', 'declined', 'expired', 'removed');

-- One person's place in the queue of one scope (event, ticket, slot). The queue order is
-- created_at, then id. An offer records its drafts (`registration_ids`) and its deadline.
CREATE TABLE event.waitlist_entry (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id         uuid NOT NULL REFERENCES event.events (id) ON DELETE CASCADE,
    company_id       uuid,  -- copied from the event at write, as on registrations
    event_ticket_id  uuid REFERENCES event.tickets (id) ON DELETE CASCADE,
    event_slot_id    uuid REFERENCES event.slots (id) ON DELETE CASCADE,
    seats            integer NOT NULL CHECK (seats BETWEEN 1 AND 30),
    name             text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 256),
    email            text NOT NULL CHECK (char_length(email) BETWEEN 3 AND 320),
    phone            text NOT NULL DEFAULT '' CHECK (char_length(phone) <= 64),
    status           event.waitlist_status NOT NULL DEFAULT 'waiting',
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    offered_at       timestamptz,
    offer_expires_at timestamptz,
    decided_at       timestamptz,
    registration_ids uuid[] NOT NULL DEFAULT '{}',
    CONSTRAINT waitlist_entry_offer_has_deadline
        CHECK (status <> 'offered' OR (offered_at IS NOT NULL AND offer_expires_at IS NOT NULL))
);
-- one live place per person and scope (a NULL ticket or slot is a value here)
CREATE UNIQUE INDEX waitlist_entry_once_idx ON event.waitlist_entry
    (event_id, event_ticket_id, event_slot_id, lower(email)) NULLS NOT DISTINCT
    WHERE status IN ('waiting', 'offered');
-- the queue, in order
CREATE INDEX waitlist_entry_queue_idx ON event.waitlist_entry (event_id, created_at, id)
    INCLUDE (event_ticket_id, event_slot_id, seats) WHERE status = 'waiting';
-- offers by deadline (the expiry sweep and the pass's next due time)
CREATE INDEX waitlist_entry_offer_idx ON event.waitlist_entry (offer_expires_at, event_id)
    WHERE status = 'offered';
-- the admin list and the per-event reads
CREATE INDEX waitlist_entry_event_idx ON event.waitlist_entry (event_id, created_at, id);

-- Seats freed where somebody waits wake the offer pass when the transaction commits: a
-- registration leaving the seat counter (cancel, archive, a released offer), a raised
-- event or ticket cap. One notice per event and transaction (NOTIFY folds duplicates).
CREATE FUNCTION event.wake_waitlist() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    eid uuid;
BEGIN
    IF TG_TABLE_NAME = 'events' THEN  -- each branch reads only its own table's columns
        eid := NEW.id;
    ELSE
        eid := NEW.event_id;
    END IF;
    IF EXISTS (SELECT 1 FROM event.waitlist_entry w
               WHERE w.event_id = eid AND w.status = 'waiting') THEN
        PERFORM pg_notify('event_waitlist_due', eid::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER registrations_wake_waitlist
    AFTER UPDATE OF state, active, hold_expires_at ON event.registrations
    FOR EACH ROW
    WHEN (event.holds_seat(OLD.state, OLD.active, OLD.sale_status, OLD.hold_expires_at)
          AND NOT event.holds_seat(NEW.state, NEW.active, NEW.sale_status, NEW.hold_expires_at))
    EXECUTE FUNCTION event.wake_waitlist();
CREATE TRIGGER events_wake_waitlist
    AFTER UPDATE OF seats_max, seats_limited ON event.events
    FOR EACH ROW
    WHEN (NEW.seats_max IS DISTINCT FROM OLD.seats_max
          OR NEW.seats_limited IS DISTINCT FROM OLD.seats_limited)
    EXECUTE FUNCTION event.wake_waitlist();
CREATE TRIGGER tickets_wake_waitlist
    AFTER UPDATE OF seats_max ON event.tickets
    FOR EACH ROW WHEN (NEW.seats_max IS DISTINCT FROM OLD.seats_max)
    EXECUTE FUNCTION event.wake_waitlist();
