-- The locked seat count in two halves, each counted over a partial index with no per-row
-- test. Until now every row the count met was tested against the instant
-- (`hold_expires_at IS NULL OR hold_expires_at > now()`, from the index's INCLUDE column),
-- an O(rows) cost under the event's lock. Now:
--   * the rows that hold their seat for good (no hold: `open`, `done`, an unpaid order's
--     draft): an index-only count of their own partial indexes, nothing tested per row;
--   * the held drafts (a waiting-list offer) whose hold has not ended: a range scan of a
--     small index of their own, `hold_expires_at > now()` its index condition.
-- `holds_seat_at` stays THE definition; the two halves are its parts:
--   holds_seat_at(r, at) = holds_seat_for_good(r) OR (holds_seat_held(r) AND r.hold_expires_at > at)
-- (a probe checks it over every state and random instants).
CREATE FUNCTION event.holds_seat_for_good(
    state event.registration_state, active boolean, sale_status event.sale_status,
    hold_expires_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN event.holds_seat(state, active, sale_status, hold_expires_at) AND hold_expires_at IS NULL;
CREATE FUNCTION event.holds_seat_held(
    state event.registration_state, active boolean, sale_status event.sale_status,
    hold_expires_at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN event.holds_seat(state, active, sale_status, hold_expires_at)
       AND hold_expires_at IS NOT NULL;

DROP INDEX event.registrations_seat_event_idx;
DROP INDEX event.registrations_seat_ticket_idx;
DROP INDEX event.registrations_seat_slot_idx;
CREATE INDEX registrations_seat_event_idx ON event.registrations (event_id, state)
    WHERE event.holds_seat_for_good(state, active, sale_status, hold_expires_at);
CREATE INDEX registrations_seat_ticket_idx ON event.registrations (event_ticket_id, state)
    WHERE event.holds_seat_for_good(state, active, sale_status, hold_expires_at)
      AND event_ticket_id IS NOT NULL;
CREATE INDEX registrations_seat_slot_idx ON event.registrations
    (event_slot_id, event_ticket_id, state)
    WHERE event.holds_seat_for_good(state, active, sale_status, hold_expires_at)
      AND event_slot_id IS NOT NULL;
CREATE INDEX registrations_seat_held_idx ON event.registrations (event_id, hold_expires_at)
    INCLUDE (event_ticket_id, event_slot_id, state)
    WHERE event.holds_seat_held(state, active, sale_status, hold_expires_at);
