-- One definition of each rule the SQL applies: every statement, index and read calls these
-- (simple SQL functions: the planner inlines them, so partial indexes still match).

-- The ONE seat counter's domain: a registration that holds a seat (counts, indexes, reads).
CREATE FUNCTION event.holds_seat(state event.registration_state, active boolean)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN active AND state IN ('open', 'done');

-- Who the scheduler mails: today the same attendees as hold a seat; kept apart because a
-- held seat (an unpaid order's draft) is not a confirmed attendee.
CREATE FUNCTION event.gets_mail(state event.registration_state, active boolean)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN active AND state IN ('open', 'done');

-- The company fence: an actor of a company sees its own rows and the shared (NULL) rows; an
-- actor without a company (a platform operator) sees every row.
CREATE FUNCTION event.visible_to(row_company uuid, actor_company uuid)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN actor_company IS NULL OR row_company IS NULL OR row_company = actor_company;

-- A scheduler line the pass may work: not done, on an active event that is not cancelled;
-- an after-subscription line dies with its event's end.
CREATE FUNCTION event.line_is_live(m event.mails, e event.events, at timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
    AND (m.interval_kind <> 'after_sub' OR e.date_end > at);

-- the seat-count indexes, on the one predicate
DROP INDEX event.registrations_seat_event_idx;
DROP INDEX event.registrations_seat_ticket_idx;
DROP INDEX event.registrations_seat_slot_idx;
CREATE INDEX registrations_seat_event_idx ON event.registrations (event_id, state)
    WHERE event.holds_seat(state, active);
CREATE INDEX registrations_seat_ticket_idx ON event.registrations (event_ticket_id, state)
    WHERE event.holds_seat(state, active) AND event_ticket_id IS NOT NULL;
CREATE INDEX registrations_seat_slot_idx ON event.registrations
    (event_slot_id, event_ticket_id, state)
    WHERE event.holds_seat(state, active) AND event_slot_id IS NOT NULL;
