-- Booths: categories (naming the host's product), the booths of an event, their bookings
-- (intents of an order line or an officer), the claim that pins an order line to ONE event,
-- a type's booth lines; tickets gain a product ref; the linked-products read.

CREATE TYPE event.booth_state AS ENUM ('available', 'unavailable');
CREATE TYPE event.booth_booking_status AS ENUM ('pending', 'confirmed');

-- company-shared configuration, like types and stages (no company column)
CREATE TABLE event.booth_categories (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    product_ref text,  -- logical ref to the host's product; no FK (the catalog is not ours)
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booth_categories_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT booth_categories_product_ref_length CHECK (
        product_ref IS NULL OR char_length(product_ref) BETWEEN 1 AND 256)
);

-- A booth follows its event's company fence. `state` moves to unavailable only with a
-- confirmed booking, back only through release; `is_paid` is latched by the paid fact
-- (one-way, survives release); `sale_linked` latches when an order line first books it.
CREATE TABLE event.booths (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id          uuid NOT NULL,
    name              text NOT NULL,
    booth_category_id uuid NOT NULL,
    state             event.booth_state NOT NULL DEFAULT 'available',
    is_paid           boolean NOT NULL DEFAULT false,
    sale_linked       boolean NOT NULL DEFAULT false,
    contact_name      text NOT NULL DEFAULT '',
    contact_email     text NOT NULL DEFAULT '',
    contact_phone     text NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booths_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE RESTRICT,
    CONSTRAINT booths_category_fkey FOREIGN KEY (booth_category_id)
        REFERENCES event.booth_categories (id) ON DELETE RESTRICT,
    CONSTRAINT booths_name_not_blank CHECK (btrim(name) <> ''),
    -- target of the bookings' composite FK (a booking's event is its booth's event)
    CONSTRAINT booths_id_event_key UNIQUE (id, event_id)
);
CREATE INDEX booths_event_idx ON event.booths (event_id, created_at, id);
CREATE INDEX booths_category_idx ON event.booths (booth_category_id);
CREATE INDEX booths_list_idx ON event.booths (created_at, id);

-- EBS-4: the FIRST booking of an order line claims the line for its event (INSERT .. ON
-- CONFLICT DO NOTHING, then compare); a line never books booths of two events.
CREATE TABLE event.booth_order_lines (
    order_line_id uuid PRIMARY KEY,
    event_id      uuid NOT NULL,
    order_id      uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booth_order_lines_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE RESTRICT,
    -- target of the bookings' FK: (line, event) must be the line's claim
    CONSTRAINT booth_order_lines_line_event_key UNIQUE (order_line_id, event_id)
);

CREATE TABLE event.booth_bookings (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_booth_id uuid NOT NULL,
    event_id       uuid NOT NULL,  -- the booth's event, carried for the EBS-4 wall
    status         event.booth_booking_status NOT NULL DEFAULT 'pending',
    order_id       uuid,  -- logical refs to the host's sale documents
    order_line_id  uuid,
    contact_name   text NOT NULL DEFAULT '',
    contact_email  text NOT NULL DEFAULT '',
    contact_phone  text NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    confirmed_at   timestamptz,
    CONSTRAINT booth_bookings_booth_fkey FOREIGN KEY (event_booth_id, event_id)
        REFERENCES event.booths (id, event_id) ON DELETE RESTRICT,
    -- EBS-4 wall: a booking of an order line names the one event the line claimed
    CONSTRAINT booth_bookings_order_line_event_fkey FOREIGN KEY (order_line_id, event_id)
        REFERENCES event.booth_order_lines (order_line_id, event_id) ON DELETE RESTRICT,
    -- EBS-2: one booking per (order line, booth); bookings without a line never collide
    CONSTRAINT booth_bookings_order_line_booth_key UNIQUE (order_line_id, event_booth_id)
);
-- EBS-1: THE wall of exclusivity: at most one confirmed booking per booth
CREATE UNIQUE INDEX booths_confirmed_exclusivity ON event.booth_bookings (event_booth_id)
    WHERE status = 'confirmed';
CREATE INDEX booth_bookings_booth_idx ON event.booth_bookings (event_booth_id, created_at, id);
-- the paid fact latches is_paid on the booths of an order's bookings
CREATE INDEX booth_bookings_order_idx ON event.booth_bookings (order_id)
    WHERE order_id IS NOT NULL;

-- a type's booth lines: copied ONCE at event create (name and category only)
CREATE TABLE event.type_booths (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    type_id           uuid NOT NULL,
    name              text NOT NULL,
    booth_category_id uuid NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT type_booths_type_fkey FOREIGN KEY (type_id)
        REFERENCES event.types (id) ON DELETE CASCADE,
    CONSTRAINT type_booths_category_fkey FOREIGN KEY (booth_category_id)
        REFERENCES event.booth_categories (id) ON DELETE RESTRICT,
    CONSTRAINT type_booths_name_not_blank CHECK (btrim(name) <> '')
);
CREATE INDEX type_booths_type_idx ON event.type_booths (type_id);
CREATE INDEX type_booths_category_idx ON event.type_booths (booth_category_id);

-- tickets name the host's product they sell (free text, bounded)
ALTER TABLE event.tickets ADD COLUMN product_ref text;
ALTER TABLE event.tickets ADD CONSTRAINT tickets_product_ref_length CHECK (
    product_ref IS NULL OR char_length(product_ref) BETWEEN 1 AND 256);

-- A booth as the API reads it, with its bookings (oldest first).
CREATE VIEW event.booth_view AS
SELECT b.id, b.event_id, b.name, b.booth_category_id, b.state::text AS state, b.is_paid,
    b.sale_linked, b.contact_name, b.contact_email, b.contact_phone, b.created_at,
    b.updated_at,
    (SELECT coalesce(jsonb_agg(jsonb_build_object('id', k.id, 'booth_id', k.event_booth_id,
        'event_id', k.event_id, 'status', k.status::text, 'order_id', k.order_id,
        'order_line_id', k.order_line_id, 'contact_name', k.contact_name,
        'contact_email', k.contact_email, 'contact_phone', k.contact_phone,
        'created_at', k.created_at, 'confirmed_at', k.confirmed_at)
        ORDER BY k.created_at, k.id), '[]')
     FROM event.booth_bookings k WHERE k.event_booth_id = b.id) AS bookings
FROM event.booths b;

-- the type read model gains its booth lines (a column added at the end)
CREATE OR REPLACE VIEW event.type_view AS
SELECT t.id, t.name, t.note, t.date_tz, t.seats_limited, t.seats_max, t.created_at,
    t.updated_at,
    (SELECT coalesce(jsonb_agg(to_jsonb(m) - 'type_id' ORDER BY m.sequence, m.id), '[]')
     FROM event.type_mails m WHERE m.type_id = t.id) AS mails,
    (SELECT coalesce(jsonb_agg(to_jsonb(k) - 'type_id' ORDER BY k.created_at, k.id), '[]')
     FROM event.type_tickets k WHERE k.type_id = t.id) AS tickets,
    (SELECT coalesce(jsonb_agg(to_jsonb(q) - 'type_id' ORDER BY q.sequence, q.question_id),
        '[]')
     FROM event.type_questions q WHERE q.type_id = t.id) AS questions,
    (SELECT coalesce(jsonb_agg(to_jsonb(b) - 'type_id' ORDER BY b.created_at, b.id), '[]')
     FROM event.type_booths b WHERE b.type_id = t.id) AS booths
FROM event.types t;

-- EP-2: the products an event links to, events-owned (the catalog is never written from
-- here): the distinct product refs of its tickets and of the categories of its booths.
CREATE VIEW event.event_linked_products AS
SELECT t.event_id, t.product_ref, 'ticket'::text AS source
FROM event.tickets t WHERE t.product_ref IS NOT NULL
UNION
SELECT b.event_id, c.product_ref, 'booth_category'::text AS source
FROM event.booths b JOIN event.booth_categories c ON c.id = b.booth_category_id
WHERE c.product_ref IS NOT NULL;
