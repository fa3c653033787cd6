-- Seam orders are company-scoped (issue 26): an order is (company, order_id), never
-- order_id alone. A company's facts about an order id touch that company's order only:
-- its order row, its registrations, its booth bookings, its order lines, its inbox keys.
-- An order's company is the company of the actor that sends its facts; a platform
-- actor's (no company) is the company of the events the order names, or none (a platform
-- order, of shared events only). `company_key` columns are that company as keys hold it
-- (`'*'` for a platform order): a key and a foreign key never match a NULL.
--
-- Existing rows take their company from what they record (the verbs decide the same way
-- from now on):
-- - a registration of an order: the company of the delivery that minted it (the consumer
--   of the `confirmed` inbox row listing it); a platform's delivery: the one company of
--   that order's platform-minted rows' events, or each row's own event's company when they
--   span several (such an order splits into one order per company);
-- - a booth booking of an order or an order line: an officer's booking, the officer's
--   company (its `booth_booking_created` audit row), else its booth's event's; a seam
--   booking, the one company actor that confirmed the order, else its event's company;
-- - an order line's claim: the company of its bookings (one claim per company when two
--   companies booked the same line id), else its event's company;
-- - an order row: one per company among its registrations, bookings and the company
--   actors whose facts about it applied (a platform order when there is none); when
--   several companies share one, each company's row takes the state its own applied
--   facts imply (the old row's state when it sent none);
-- - inbox rows of a platform actor: re-keyed to the order's company when the order now has
--   exactly one company (so a redelivery finds them), unless that company recorded the
--   same key itself.

-- the old keys name order_id and order_line_id alone: down first, back at the end
ALTER TABLE event.booth_bookings DROP CONSTRAINT booth_bookings_order_line_event_fkey;
ALTER TABLE event.booth_bookings DROP CONSTRAINT booth_bookings_order_line_booth_key;
ALTER TABLE event.booth_order_lines DROP CONSTRAINT booth_order_lines_line_event_key;
ALTER TABLE event.booth_order_lines DROP CONSTRAINT booth_order_lines_pkey;
ALTER TABLE event.sale_orders DROP CONSTRAINT sale_orders_pkey;

-- the company of the order a registration belongs to (NULL: a platform order, or none)
ALTER TABLE event.registrations ADD COLUMN sale_order_company_id uuid;
ALTER TABLE event.registrations ADD CONSTRAINT registrations_sale_order_company_with_order
    CHECK (sale_order_company_id IS NULL OR sale_order_id IS NOT NULL);

-- rows a company actor's delivery minted
UPDATE event.registrations r SET sale_order_company_id = m.company
FROM (
    SELECT DISTINCT ON (x.registration_id) x.registration_id,
        split_part(i.consumer, ':', 2)::uuid AS company
    FROM event.seam_inbox i CROSS JOIN LATERAL unnest(i.registration_ids) AS x(registration_id)
    WHERE i.verb = 'confirmed' AND split_part(i.consumer, ':', 2) <> '*'
    ORDER BY x.registration_id, i.created_at
) m
WHERE r.id = m.registration_id AND r.sale_order_id IS NOT NULL;

-- the other rows of an order (a platform's deliveries): the company of their events
UPDATE event.registrations r
SET sale_order_company_id = CASE WHEN o.companies = 1 THEN o.company ELSE r.company_id END
FROM (
    SELECT sale_order_id, count(DISTINCT company_id) AS companies,
        min(company_id::text)::uuid AS company
    FROM event.registrations
    WHERE sale_order_id IS NOT NULL AND sale_order_company_id IS NULL
    GROUP BY sale_order_id
) o
WHERE r.sale_order_id = o.sale_order_id AND r.sale_order_company_id IS NULL;

-- the company of a booking's order (or order line)
ALTER TABLE event.booth_bookings ADD COLUMN order_company_id uuid;

WITH seam AS (  -- the one company actor that confirmed the order, when only one did
    SELECT order_id, min(split_part(consumer, ':', 2))::uuid AS company
    FROM event.seam_inbox
    WHERE verb = 'confirmed' AND outcome = 'applied' AND split_part(consumer, ':', 2) <> '*'
    GROUP BY order_id
    HAVING count(DISTINCT consumer) = 1
), officer AS (  -- an officer's booking: its audit row names the officer's company
    SELECT DISTINCT ON (object_id) object_id AS booking_id, company_id
    FROM event.event_audit_log
    WHERE verb = 'booth_booking_created' AND object_kind = 'booth_booking'
    ORDER BY object_id, id
), decided AS (
    SELECT k.id, CASE
        WHEN f.booking_id IS NOT NULL THEN coalesce(f.company_id, e.company_id)
        WHEN s.company IS NOT NULL AND event.visible_to(e.company_id, s.company) THEN s.company
        ELSE e.company_id END AS company
    FROM event.booth_bookings k
    JOIN event.events e ON e.id = k.event_id
    LEFT JOIN officer f ON f.booking_id = k.id
    LEFT JOIN seam s ON s.order_id = k.order_id
    WHERE k.order_id IS NOT NULL OR k.order_line_id IS NOT NULL
)
UPDATE event.booth_bookings k SET order_company_id = d.company
FROM decided d WHERE d.id = k.id;

ALTER TABLE event.booth_bookings ADD COLUMN order_company_key text NOT NULL
    GENERATED ALWAYS AS (coalesce(order_company_id::text, '*')) STORED;

-- the company of an order line's claim
ALTER TABLE event.booth_order_lines ADD COLUMN company_id uuid;

UPDATE event.booth_order_lines l SET company_id = CASE
    WHEN EXISTS (SELECT 1 FROM event.booth_bookings k WHERE k.order_line_id = l.order_line_id)
    THEN (SELECT k.order_company_id FROM event.booth_bookings k
          WHERE k.order_line_id = l.order_line_id
          ORDER BY k.order_company_id::text NULLS FIRST LIMIT 1)
    ELSE (SELECT e.company_id FROM event.events e WHERE e.id = l.event_id) END;

-- two companies booked with one line id (one event, under the old global claim): a claim each
INSERT INTO event.booth_order_lines (order_line_id, event_id, order_id, company_id, created_at)
SELECT DISTINCT ON (k.order_line_id, k.order_company_id)
    k.order_line_id, l.event_id, k.order_id, k.order_company_id, l.created_at
FROM event.booth_bookings k JOIN event.booth_order_lines l ON l.order_line_id = k.order_line_id
WHERE k.order_company_id IS DISTINCT FROM l.company_id;

ALTER TABLE event.booth_order_lines ADD COLUMN company_key text NOT NULL
    GENERATED ALWAYS AS (coalesce(company_id::text, '*')) STORED;

-- the company of an order: one order row per company that has a part in it
ALTER TABLE event.sale_orders ADD COLUMN company_id uuid;

WITH owners AS (
    SELECT sale_order_id AS order_id, sale_order_company_id AS company_id
    FROM event.registrations WHERE sale_order_id IS NOT NULL
    UNION
    SELECT order_id, order_company_id FROM event.booth_bookings WHERE order_id IS NOT NULL
    UNION
    SELECT order_id, split_part(consumer, ':', 2)::uuid
    FROM event.seam_inbox WHERE split_part(consumer, ':', 2) <> '*' AND outcome = 'applied'
), ranked AS (
    SELECT order_id, company_id,
        row_number() OVER (PARTITION BY order_id ORDER BY company_id::text NULLS FIRST) AS n
    FROM owners
), first_owner AS (
    UPDATE event.sale_orders o SET company_id = r.company_id
    FROM ranked r WHERE r.order_id = o.order_id AND r.n = 1
)
INSERT INTO event.sale_orders (order_id, company_id, state, amount_is_zero, currency, paid_at,
    cancelled_at, created_at, updated_at)
SELECT o.order_id, r.company_id, o.state, o.amount_is_zero, o.currency, o.paid_at,
    o.cancelled_at, o.created_at, o.updated_at
FROM event.sale_orders o JOIN ranked r ON r.order_id = o.order_id
WHERE r.n > 1;

-- an order several companies had a part in: each company's row takes the state its own
-- applied facts imply (another company's paid or cancelled fact, such as the attack this
-- migration closes, stays that company's); a company without facts keeps the row's state
WITH facts AS (
    SELECT order_id, split_part(consumer, ':', 2)::uuid AS company_id,
        min(created_at) FILTER (WHERE verb = 'paid') AS paid_at,
        max(created_at) FILTER (WHERE verb = 'cancelled') AS cancelled_at,
        (array_agg(verb ORDER BY created_at DESC))[1] AS last_verb
    FROM event.seam_inbox
    WHERE outcome = 'applied' AND split_part(consumer, ':', 2) <> '*'
    GROUP BY 1, 2
), split AS (
    SELECT order_id FROM event.sale_orders GROUP BY order_id HAVING count(*) > 1
)
UPDATE event.sale_orders o SET paid_at = f.paid_at, cancelled_at = f.cancelled_at,
    state = CASE f.last_verb
        WHEN 'paid' THEN 'sale'
        WHEN 'cancelled' THEN 'cancel'
        ELSE CASE WHEN o.amount_is_zero OR f.paid_at IS NOT NULL THEN 'sale' ELSE 'sent' END
    END::event.sale_order_state
FROM facts f
WHERE o.order_id = f.order_id AND o.company_id = f.company_id
  AND o.order_id IN (SELECT order_id FROM split);

ALTER TABLE event.sale_orders ADD COLUMN company_key text NOT NULL
    GENERATED ALWAYS AS (coalesce(company_id::text, '*')) STORED;

-- a platform actor's inbox rows follow its order to its one company
UPDATE event.seam_inbox i SET consumer = 'event_sale:' || o.company_key
FROM (
    SELECT order_id, min(company_key) AS company_key
    FROM event.sale_orders GROUP BY order_id HAVING count(*) = 1
) o
WHERE i.consumer = 'event_sale:*' AND i.order_id = o.order_id AND o.company_key <> '*'
  AND NOT EXISTS (SELECT 1 FROM event.seam_inbox t
                  WHERE t.consumer = 'event_sale:' || o.company_key
                    AND t.external_id = i.external_id);

-- the keys again, each with the order's company
ALTER TABLE event.sale_orders ADD CONSTRAINT sale_orders_pkey PRIMARY KEY (order_id, company_key);
-- EBS-4: the first booking of a (company, order line) claims it for its event
ALTER TABLE event.booth_order_lines ADD CONSTRAINT booth_order_lines_pkey
    PRIMARY KEY (order_line_id, company_key);
ALTER TABLE event.booth_order_lines ADD CONSTRAINT booth_order_lines_line_event_key
    UNIQUE (order_line_id, event_id, company_key);
-- EBS-4 wall: a booking of an order line names the one event its company's line claimed
ALTER TABLE event.booth_bookings ADD CONSTRAINT booth_bookings_order_line_event_fkey
    FOREIGN KEY (order_line_id, event_id, order_company_key)
    REFERENCES event.booth_order_lines (order_line_id, event_id, company_key)
    ON DELETE RESTRICT;
-- EBS-2: one booking per (company, order line, booth); bookings without a line never collide
ALTER TABLE event.booth_bookings ADD CONSTRAINT booth_bookings_order_line_booth_key
    UNIQUE (order_line_id, event_booth_id, order_company_key);
