-- A statement trigger fires even when its statement inserted no row: the delivery pass's
-- fan-out (which inserts attempts only when it made messages) and a verb's fact insert
-- (which writes nothing when no endpoint listens) woke every webhook loop each time,
-- and a woken loop fans out again. The wake now happens only when rows were written.
CREATE OR REPLACE FUNCTION event.wake_webhook_pass() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM written) THEN
        PERFORM pg_notify('event_webhook_due', '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER webhook_facts_wake_pass ON event.webhook_facts;
CREATE TRIGGER webhook_facts_wake_pass
    AFTER INSERT ON event.webhook_facts REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_webhook_pass();

DROP TRIGGER webhook_deliveries_wake_pass ON event.webhook_deliveries;
CREATE TRIGGER webhook_deliveries_wake_pass
    AFTER INSERT ON event.webhook_deliveries REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION event.wake_webhook_pass();
