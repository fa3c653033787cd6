-- A fact keeps the attendee's PII (`webhook_facts.pii`) only when an active endpoint that
-- wants it has opted into PII: otherwise no message would carry it, yet it would wait in
-- `webhook_facts` until the fan-out took the fact (minutes, while deliveries yield to a
-- surge of requests). The same rule as `webhook_listens`, narrowed to `include_pii`. An
-- endpoint that opts in receives the PII of the facts written from then on.
CREATE FUNCTION event.webhook_listens_with_pii(company uuid, event uuid, kind text)
RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
RETURN EXISTS (SELECT 1 FROM event.webhook_endpoints w
               WHERE w.active AND w.include_pii
                 AND (w.company_id = company OR w.company_id IS NULL OR company IS NULL)
                 AND event.webhook_wants(w, company, event, kind));
