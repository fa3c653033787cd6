-- One outbound edge (design 7.18): every row that leaves the building is claimed by the
-- one leased queue, which writes a lease (`lease_until`) and a token (`lease_token`, a
-- random uuid per claim). A claimant records its answers only onto the rows it still holds
-- (same token): a claimant whose lease ran out and whose rows were claimed again writes
-- nothing over the new holder's.

-- the outbox (mail, sms) and the webhook attempts: the token beside their lease
ALTER TABLE event.outbox_messages ADD COLUMN lease_token uuid;
ALTER TABLE event.webhook_deliveries ADD COLUMN lease_token uuid;

-- the dispatcher's receipts: claimed with a lease (the partner directory is asked outside
-- any transaction, then the receipts still held are worked in one)
ALTER TABLE event.trigger_dispatch_receipts
    ADD COLUMN lease_until timestamptz,
    ADD COLUMN lease_token uuid,
    ADD CONSTRAINT trigger_dispatch_receipts_lease_whole
        CHECK ((lease_until IS NULL) = (lease_token IS NULL));

-- lead requests: the claimant's id becomes the lease token, and the lease an instant
ALTER TABLE event.lead_requests DROP CONSTRAINT lead_requests_lease_whole;
ALTER TABLE event.lead_requests RENAME COLUMN claimed_by TO lease_token;
ALTER TABLE event.lead_requests ADD COLUMN lease_until timestamptz;
UPDATE event.lead_requests SET lease_until = claimed_at + interval '900 seconds'
WHERE claimed_at IS NOT NULL;
ALTER TABLE event.lead_requests ADD CONSTRAINT lead_requests_lease_whole
    CHECK ((lease_token IS NULL) = (lease_until IS NULL)
           AND (lease_token IS NULL) = (claimed_at IS NULL));

-- a queued lead request wakes the lead pass on a channel of its own (the arming verb
-- NOTIFYs `event_lead_due`); written triggers wake the dispatcher on its own channel
CREATE OR REPLACE FUNCTION event.wake_trigger_dispatch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('event_dispatch_due', 'triggers');
    RETURN NULL;
END
$$;

-- An event whose waiting-list offers failed backs off on its own (5 s doubling to 10 min),
-- so the other events' offers go on and the failure is logged once, not every pass.
ALTER TABLE event.waitlist_settings
    ADD COLUMN offer_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN offer_retry_at timestamptz,
    ADD COLUMN offer_error text,
    ADD CONSTRAINT waitlist_settings_offer_failures_nonneg CHECK (offer_failures >= 0),
    ADD CONSTRAINT waitlist_settings_offer_error_capped CHECK (length(offer_error) <= 200);
