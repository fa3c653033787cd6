-- Webhooks, second pass (issue 30).
--
-- 1. At most 4 attempts in flight to an endpoint across every process: the claim counts
--    the endpoint's leased attempts (this index) under a lock on the endpoint's row.
-- 2. A message remembers which keys of its `data` are the attendee's PII, so turning an
--    endpoint's `include_pii` off can take them out of the bodies it keeps (a waiting
--    attempt, a later redelivery send none).
CREATE INDEX webhook_deliveries_leased_idx ON event.webhook_deliveries (endpoint_id)
    WHERE state = 'pending' AND lease_until IS NOT NULL;

ALTER TABLE event.webhook_messages ADD COLUMN pii_keys text[];
COMMENT ON COLUMN event.webhook_messages.pii_keys IS
    'the keys of data that carry the attendee''s PII (NULL: none)';

-- The verbs ask this for every fact they might write: only the company's own active
-- endpoints and the platform's are read, not every endpoint (a fact of a shared event,
-- of no company, still reaches every company's).
CREATE INDEX webhook_endpoints_listening_idx ON event.webhook_endpoints (company_id)
    WHERE active;

CREATE OR REPLACE FUNCTION event.webhook_listens(company uuid, event uuid, kind text)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
RETURN EXISTS (SELECT 1 FROM event.webhook_endpoints w
               WHERE w.active
                 AND (w.company_id = company OR w.company_id IS NULL OR company IS NULL)
                 AND event.webhook_wants(w, company, event, kind));
