-- The operator console's sessions live here, one row per sign-in: the cookie carries a
-- random key (signed), the row keeps only its sha256, as api_tokens keeps its tokens'.
-- A session is live while ended_at is NULL, its token is not revoked and it was seen in
-- the last 12 hours; sign-out and the token's revocation set ended_at, so a copied
-- cookie stops working. last_seen_at is written at most once a minute per session.
CREATE TABLE event.console_sessions (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key_hash     bytea NOT NULL,  -- sha256 of the key the cookie carries; the key is never stored
    token_id     uuid NOT NULL,   -- the API token the operator signed in with
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    ended_at     timestamptz,     -- sign-out or the token's revocation; NULL while live
    CONSTRAINT console_sessions_key_hash_key UNIQUE (key_hash),
    CONSTRAINT console_sessions_token_fkey FOREIGN KEY (token_id)
        REFERENCES event.api_tokens (id) ON DELETE CASCADE
);

-- the token's revocation ends its sessions (and the foreign key's cascade finds them)
CREATE INDEX console_sessions_token_idx ON event.console_sessions (token_id);
-- the sweep at sign-in deletes sessions dead (ended or idle) for 30 days, oldest first
CREATE INDEX console_sessions_last_seen_idx ON event.console_sessions (last_seen_at);
