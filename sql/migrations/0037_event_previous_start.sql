-- Where a published event used to start: set when a change moves `date_begin` while the
-- event is public (published, its publication date passed: a reschedule the public saw),
-- kept until the next such move. The
-- public event page reads it: its schema.org `eventStatus` is `EventRescheduled` with
-- the former start as `previousStartDate`. NULL: never moved since it was published.
ALTER TABLE event.events ADD COLUMN previous_date_begin timestamptz;
