-- Company-shared configuration: stages, tags, the question library, event types and
-- their template lines. None of these carry a company column (shared for all companies).

CREATE TABLE event.stages (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL,
    description text NOT NULL DEFAULT '',
    sequence    integer NOT NULL DEFAULT 10,
    fold        boolean NOT NULL DEFAULT false,
    pipe_end    boolean NOT NULL DEFAULT false,  -- the only semantic: the terminal stage
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT stages_name_not_blank CHECK (btrim(name) <> '')
);
-- mark-done picks the first pipe_end stage by sequence
CREATE INDEX stages_pipe_end_idx ON event.stages (sequence, id) WHERE pipe_end;

CREATE TABLE event.tag_categories (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL,
    sequence   integer NOT NULL DEFAULT 10,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tag_categories_name_not_blank CHECK (btrim(name) <> '')
);

CREATE TABLE event.tags (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    category_id uuid NOT NULL,
    name        text NOT NULL,
    sequence    integer NOT NULL DEFAULT 10,
    color       integer,  -- officer-set, never random
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tags_category_fkey FOREIGN KEY (category_id)
        REFERENCES event.tag_categories (id) ON DELETE CASCADE,
    CONSTRAINT tags_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT tags_color_range CHECK (color IS NULL OR color BETWEEN 0 AND 11)
);
CREATE INDEX tags_category_idx ON event.tags (category_id);

CREATE TABLE event.questions (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    title               text NOT NULL,
    question_type       event.question_kind NOT NULL DEFAULT 'simple_choice',
    is_mandatory_answer boolean NOT NULL DEFAULT false,
    is_default          boolean NOT NULL DEFAULT false,
    is_reusable         boolean NOT NULL DEFAULT false,
    sequence            integer NOT NULL DEFAULT 10,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT questions_title_not_blank CHECK (btrim(title) <> ''),
    CONSTRAINT questions_default_is_reusable CHECK (NOT is_default OR is_reusable)
);

CREATE TABLE event.question_answers (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    question_id uuid NOT NULL,
    name        text NOT NULL,
    sequence    integer NOT NULL DEFAULT 10,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT question_answers_question_fkey FOREIGN KEY (question_id)
        REFERENCES event.questions (id) ON DELETE CASCADE,
    CONSTRAINT question_answers_name_not_blank CHECK (btrim(name) <> ''),
    -- target of the composite FK that keeps an attendee's choice inside its question
    CONSTRAINT question_answers_id_question_key UNIQUE (id, question_id)
);

CREATE TABLE event.types (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name          text NOT NULL,
    note          text NOT NULL DEFAULT '',
    date_tz       text NOT NULL DEFAULT 'UTC',
    seats_limited boolean NOT NULL DEFAULT false,
    seats_max     integer NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT types_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT types_seats_max_nonneg CHECK (seats_max >= 0)
);

CREATE TABLE event.type_mails (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    type_id              uuid NOT NULL,
    sequence             integer NOT NULL DEFAULT 10,
    interval_nbr         integer NOT NULL DEFAULT 1,
    interval_unit        event.interval_unit NOT NULL DEFAULT 'hours',
    interval_kind        event.interval_kind NOT NULL DEFAULT 'before_event',
    template_ref         uuid NOT NULL,  -- logical ref: no FK, a dead ref is reported by the scheduler
    template_kind        event.template_kind NOT NULL DEFAULT 'mail',
    notification_channel event.notification_channel NOT NULL DEFAULT 'mail',
    created_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT type_mails_type_fkey FOREIGN KEY (type_id)
        REFERENCES event.types (id) ON DELETE CASCADE,
    CONSTRAINT type_mails_interval_nbr_nonneg CHECK (interval_nbr >= 0)
);
CREATE INDEX type_mails_type_idx ON event.type_mails (type_id);

CREATE TABLE event.type_tickets (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    type_id             uuid NOT NULL,
    name                text NOT NULL,
    description         text NOT NULL DEFAULT '',
    seats_max           integer NOT NULL DEFAULT 0,
    limit_max_per_order integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT type_tickets_type_fkey FOREIGN KEY (type_id)
        REFERENCES event.types (id) ON DELETE CASCADE,
    CONSTRAINT type_tickets_name_not_blank CHECK (btrim(name) <> ''),
    CONSTRAINT type_tickets_seats_max_nonneg CHECK (seats_max >= 0),
    CONSTRAINT type_tickets_per_order_cap_range CHECK (limit_max_per_order BETWEEN 0 AND 30)
);
CREATE INDEX type_tickets_type_idx ON event.type_tickets (type_id);

CREATE TABLE event.type_questions (
    type_id     uuid NOT NULL,
    question_id uuid NOT NULL,
    sequence    integer NOT NULL DEFAULT 10,
    CONSTRAINT type_questions_pkey PRIMARY KEY (type_id, question_id),
    CONSTRAINT type_questions_type_fkey FOREIGN KEY (type_id)
        REFERENCES event.types (id) ON DELETE CASCADE,
    CONSTRAINT type_questions_question_fkey FOREIGN KEY (question_id)
        REFERENCES event.questions (id) ON DELETE CASCADE
);
