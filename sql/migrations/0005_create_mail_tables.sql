-- The communication scheduler: scheduler rows, per-attendee receipts, per-slot children.

CREATE TABLE event.mails (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_id             uuid NOT NULL,
    sequence             integer NOT NULL DEFAULT 10,
    interval_nbr         integer NOT NULL DEFAULT 1,
    interval_unit        event.interval_unit NOT NULL DEFAULT 'hours',
    interval_kind        event.interval_kind NOT NULL DEFAULT 'before_event',
    template_ref         uuid NOT NULL,  -- logical ref (+ template_kind): no FK
    template_kind        event.template_kind NOT NULL DEFAULT 'mail',
    notification_channel event.notification_channel NOT NULL DEFAULT 'mail',
    scheduled_date       timestamptz,
    mail_done            boolean NOT NULL DEFAULT false,
    last_registration_id uuid,  -- the event-based engine's cursor
    error_kind           event.mail_error_kind,
    error_datetime       timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mails_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    CONSTRAINT mails_interval_nbr_nonneg CHECK (interval_nbr >= 0),
    CONSTRAINT mails_error_pair CHECK ((error_kind IS NULL) = (error_datetime IS NULL))
);
CREATE INDEX mails_event_idx ON event.mails (event_id);
-- the scheduler pass claims due rows in date order
CREATE INDEX mails_due_idx ON event.mails (scheduled_date) WHERE NOT mail_done;

CREATE TABLE event.mail_registrations (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scheduler_id    uuid NOT NULL,
    registration_id uuid NOT NULL,
    scheduled_date  timestamptz,
    mail_sent       boolean NOT NULL DEFAULT false,
    outcome         event.receipt_outcome NOT NULL DEFAULT 'pending',
    sent_at         timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mail_registrations_scheduler_fkey FOREIGN KEY (scheduler_id)
        REFERENCES event.mails (id) ON DELETE CASCADE,
    CONSTRAINT mail_registrations_registration_fkey FOREIGN KEY (registration_id)
        REFERENCES event.registrations (id) ON DELETE CASCADE,
    -- the per-attendee grain of every engine: one receipt per scheduler and attendee
    CONSTRAINT mail_registrations_scheduler_registration_key UNIQUE (scheduler_id, registration_id)
);
CREATE INDEX mail_registrations_registration_idx ON event.mail_registrations (registration_id);
CREATE INDEX mail_registrations_due_idx ON event.mail_registrations (scheduled_date)
    WHERE NOT mail_sent;

CREATE TABLE event.mail_slots (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scheduler_id         uuid NOT NULL,
    slot_id              uuid NOT NULL,
    scheduled_date       timestamptz,
    mail_done            boolean NOT NULL DEFAULT false,
    last_registration_id uuid,
    error_kind           event.mail_error_kind,
    error_datetime       timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT mail_slots_scheduler_fkey FOREIGN KEY (scheduler_id)
        REFERENCES event.mails (id) ON DELETE CASCADE,
    CONSTRAINT mail_slots_slot_fkey FOREIGN KEY (slot_id)
        REFERENCES event.slots (id) ON DELETE CASCADE,
    CONSTRAINT mail_slots_scheduler_slot_key UNIQUE (scheduler_id, slot_id),
    CONSTRAINT mail_slots_error_pair CHECK ((error_kind IS NULL) = (error_datetime IS NULL))
);
CREATE INDEX mail_slots_due_idx ON event.mail_slots (scheduled_date) WHERE NOT mail_done;
