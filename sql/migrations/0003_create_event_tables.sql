-- Events and what hangs off one event: tags, tickets, slots, the question links.

CREATE TABLE event.events (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name           text NOT NULL,
    description    text NOT NULL DEFAULT '',
    date_begin     timestamptz NOT NULL,
    date_end       timestamptz NOT NULL,
    date_tz        text NOT NULL DEFAULT 'UTC',  -- IANA name, for presentation only
    seats_limited  boolean NOT NULL DEFAULT false,
    seats_max      integer NOT NULL DEFAULT 0,   -- 0 = unlimited
    is_multi_slots boolean NOT NULL DEFAULT false,
    event_type_id  uuid,
    stage_id       uuid,
    kanban_state   event.kanban_state NOT NULL DEFAULT 'normal',  -- 'cancel' = cancelled, sticky
    is_published   boolean NOT NULL DEFAULT false,  -- written only by publish/unpublish
    date_publish   timestamptz,                     -- written only by publish/unpublish
    company_id     uuid,  -- NULL = shared with every company
    organizer_id   uuid,  -- logical refs to the host's party records
    address_id     uuid,
    location       text NOT NULL DEFAULT '',
    event_url      text,
    badge_format   event.badge_format NOT NULL DEFAULT 'A6',
    active         boolean NOT NULL DEFAULT true,
    revision       integer NOT NULL DEFAULT 1,  -- bumped by every write of the row
    ics_sequence   integer NOT NULL DEFAULT 0,  -- bumped by calendar-visible changes
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT events_date_order CHECK (date_end >= date_begin),
    CONSTRAINT events_seats_max_nonneg CHECK (seats_max >= 0),
    CONSTRAINT events_url_absolute CHECK (
        event_url IS NULL OR event_url ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#[:space:]]+'),
    CONSTRAINT events_type_fkey FOREIGN KEY (event_type_id)
        REFERENCES event.types (id) ON DELETE SET NULL,
    CONSTRAINT events_stage_fkey FOREIGN KEY (stage_id)
        REFERENCES event.stages (id) ON DELETE RESTRICT,
    -- target of the registrations FK that mirrors is_multi_slots (slot-required guard)
    CONSTRAINT events_id_multi_slots_key UNIQUE (id, is_multi_slots)
);
CREATE INDEX events_date_begin_idx ON event.events (date_begin, id);
CREATE INDEX events_stage_idx ON event.events (stage_id);
CREATE INDEX events_company_idx ON event.events (company_id);
-- the done sweep: finished events not yet in a pipe_end stage
CREATE INDEX events_date_end_idx ON event.events (date_end) WHERE active;

CREATE TABLE event.event_tags (
    event_id uuid NOT NULL,
    tag_id   uuid NOT NULL,
    CONSTRAINT event_tags_pkey PRIMARY KEY (event_id, tag_id),
    CONSTRAINT event_tags_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT event_tags_tag_fkey FOREIGN KEY (tag_id)
        REFERENCES event.tags (id) ON DELETE CASCADE
);
CREATE INDEX event_tags_tag_idx ON event.event_tags (tag_id);

CREATE TABLE event.tickets (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id            uuid NOT NULL,
    name                text NOT NULL,
    description         text NOT NULL DEFAULT '',
    seats_max           integer NOT NULL DEFAULT 0,  -- 0 = unlimited
    limit_max_per_order integer NOT NULL DEFAULT 0,  -- 0 = no per-order cap beyond the ceiling
    start_sale_datetime timestamptz,
    end_sale_datetime   timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tickets_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT tickets_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT tickets_seats_max_nonneg CHECK (seats_max >= 0),
    CONSTRAINT tickets_per_order_cap_range CHECK (limit_max_per_order BETWEEN 0 AND 30),
    CONSTRAINT tickets_sale_window_order CHECK (
        start_sale_datetime IS NULL OR end_sale_datetime IS NULL
        OR end_sale_datetime >= start_sale_datetime),
    CONSTRAINT tickets_id_event_key UNIQUE (id, event_id)
);
CREATE INDEX tickets_event_idx ON event.tickets (event_id);

CREATE TABLE event.slots (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id   uuid NOT NULL,
    date_begin timestamptz NOT NULL,
    date_end   timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT slots_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT slots_date_order CHECK (date_end > date_begin),
    CONSTRAINT slots_id_event_key UNIQUE (id, event_id)
);
CREATE INDEX slots_event_idx ON event.slots (event_id, date_begin);

-- The ONE registration-question relation: the event's questions, general or specific.
CREATE TABLE event.registration_questions (
    event_id    uuid NOT NULL,
    question_id uuid NOT NULL,
    sequence    integer NOT NULL DEFAULT 10,
    CONSTRAINT registration_questions_pkey PRIMARY KEY (event_id, question_id),
    CONSTRAINT registration_questions_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT registration_questions_question_fkey FOREIGN KEY (question_id)
        REFERENCES event.questions (id) ON DELETE CASCADE
);
CREATE INDEX registration_questions_question_idx ON event.registration_questions (question_id);
