-- The operator console (/studio) signs its session cookies with EVENTS_CONSOLE_SECRET, or,
-- when that is not set, with this secret: generated once per database, so every process and
-- every restart of a deployment verify the same cookies without any configuration.
CREATE TABLE event.console_secret (
    id     smallint PRIMARY KEY DEFAULT 1,
    secret text NOT NULL,
    CONSTRAINT console_secret_one_row CHECK (id = 1),
    CONSTRAINT console_secret_long CHECK (length(secret) >= 32)
);

-- two random UUIDs: 244 random bits, from the core gen_random_uuid()
INSERT INTO event.console_secret (secret)
VALUES (replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''));
