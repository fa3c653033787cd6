-- A message's body without the PII keys it carries: the ONE scrub, for the patch that
-- turns `include_pii` off, the claim (a message made by a fan-out that overlapped that
-- patch is sent without them) and the sweep (which scrubs such a message where it is kept).
CREATE FUNCTION event.webhook_body_without_pii(body text, pii_keys text[])
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN pii_keys IS NULL THEN body
    ELSE jsonb_set(body::jsonb, '{data}', (body::jsonb -> 'data') - pii_keys)::text END;

-- The sweep's scrub reads the kept PII bodies of each endpoint that no longer receives PII.
CREATE INDEX webhook_messages_pii_idx ON event.webhook_messages (endpoint_id)
    WHERE pii_keys IS NOT NULL;

-- The retention sweep takes the oldest messages first.
CREATE INDEX webhook_messages_created_idx ON event.webhook_messages (created_at);
