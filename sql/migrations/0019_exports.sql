-- Formula-safe exports (issue 13 §5): the single-use confirmations a preview hands out, the
-- SQL functions the export's COPY applies to its cells, and the masked attendee fields kept
-- beside the full ones. Masking and neutralisation are SQL, so an export streams at COPY
-- speed; the masks give exactly the output of `verbs/pii.py` (a probe compares them, code
-- point by code point).

-- A preview's confirmation: a random token (only its sha256 is stored) bound to one actor, one
-- event, the columns and the state filter; consumed once by the export, within 10 minutes.
CREATE TABLE event.export_confirmations (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    token_hash   bytea NOT NULL,  -- sha256 of the token; the token itself is never stored
    actor_id     text NOT NULL,
    company_id   uuid,            -- the actor's company (NULL: a platform operator)
    event_id     uuid NOT NULL,
    columns      text[] NOT NULL,
    state_filter event.registration_state,  -- NULL: every state
    row_count    bigint NOT NULL,           -- at the preview; the export audits its own count
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz,
    -- the preview reads the event FOR KEY SHARE before it inserts: never violated by a request
    CONSTRAINT export_confirmations_event_fkey FOREIGN KEY (event_id)
        REFERENCES event.events (id) ON DELETE CASCADE,
    -- 32 random bytes: a collision is not a request's doing
    CONSTRAINT export_confirmations_token_hash_key UNIQUE (token_hash),
    -- the models check the closed list first: a safety net, never a request's answer
    CONSTRAINT export_confirmations_columns_known CHECK (
        cardinality(columns) BETWEEN 1 AND 11
        AND columns <@ ARRAY['id', 'name', 'email', 'phone', 'company_name', 'state', 'ticket',
                             'slot', 'barcode', 'created_at', 'date_closed']),
    CONSTRAINT export_confirmations_expiry_order CHECK (expires_at > created_at),
    CONSTRAINT export_confirmations_row_count_nonneg CHECK (row_count >= 0)
);
-- an event's deletion cascades to its confirmations through this index
CREATE INDEX export_confirmations_event_idx ON event.export_confirmations (event_id, created_at);

-- Formula neutralisation (design.md §7.11), lossless: a value starting with = + - @ a tab, a
-- carriage return or ' gets one leading '; removing exactly one leading ' restores it.
-- (61 '=', 43 '+', 45 '-', 64 '@', 9 tab, 13 carriage return, 39 ''''; ascii('') is 0.) A
-- value starting with a letter is settled by the first comparison. Inlined by the planner.
CREATE FUNCTION event.csv_safe(v text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN ascii(v) < 65 AND ascii(v) IN (61, 43, 45, 64, 9, 13, 39) THEN '''' || v
            ELSE v END;

-- An instant as RFC 3339 in UTC ('2027-05-10T09:00:00.25Z'); STABLE: timestamp output
-- follows DateStyle, which the export sets to ISO for its transaction.
CREATE FUNCTION event.rfc3339(at timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
RETURN replace((at AT TIME ZONE 'UTC')::text, ' ', 'T') || 'Z';

-- The masks of verbs/pii.py, character for character. Python's str.split() splits on the
-- characters str.isspace() accepts and str.isdigit() accepts more than 0-9: the classes
-- below are those sets (Unicode 14, Python 3.11), held to Python by tests/probes/test_exports.py.
--
-- email: the first character of the local part, '***@', the domain; without '@', the first
-- character and '***'; '' stays ''.
CREATE FUNCTION event.mask_email(e text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN e = '' THEN ''
    WHEN strpos(e, '@') = 0 THEN left(e, 1) || '***'
    ELSE left(split_part(e, '@', 1), 1) || '***@' || substr(e, strpos(e, '@') + 1)
END;

-- phone: '***' and its last two digits; '' stays ''. An ASCII phone keeps its digits with two
-- translate() calls (remove the non-digits it holds); any other goes through the full class.
CREATE FUNCTION event.mask_phone(p text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE
    WHEN p = '' THEN ''
    WHEN octet_length(p) = char_length(p)
        THEN '***' || right(translate(p, translate(p, '0123456789', ''), ''), 2)
    ELSE '***' || right(regexp_replace(p, '[^\u0030-\u0039\u00b2-\u00b3\u00b9\u0660-\u0669\u06f0-\u06f9\u07c0-\u07c9\u0966-\u096f\u09e6-\u09ef\u0a66-\u0a6f\u0ae6-\u0aef\u0b66-\u0b6f\u0be6-\u0bef\u0c66-\u0c6f\u0ce6-\u0cef\u0d66-\u0d6f\u0de6-\u0def\u0e50-\u0e59\u0ed0-\u0ed9\u0f20-\u0f29\u1040-\u1049\u1090-\u1099\u1369-\u1371\u17e0-\u17e9\u1810-\u1819\u1946-\u194f\u19d0-\u19da\u1a80-\u1a89\u1a90-\u1a99\u1b50-\u1b59\u1bb0-\u1bb9\u1c40-\u1c49\u1c50-\u1c59\u2070\u2074-\u2079\u2080-\u2089\u2460-\u2468\u2474-\u247c\u2488-\u2490\u24ea\u24f5-\u24fd\u24ff\u2776-\u277e\u2780-\u2788\u278a-\u2792\ua620-\ua629\ua8d0-\ua8d9\ua900-\ua909\ua9d0-\ua9d9\ua9f0-\ua9f9\uaa50-\uaa59\uabf0-\uabf9\uff10-\uff19\U000104a0-\U000104a9\U00010a40-\U00010a43\U00010d30-\U00010d39\U00010e60-\U00010e68\U00011052-\U0001105a\U00011066-\U0001106f\U000110f0-\U000110f9\U00011136-\U0001113f\U000111d0-\U000111d9\U000112f0-\U000112f9\U00011450-\U00011459\U000114d0-\U000114d9\U00011650-\U00011659\U000116c0-\U000116c9\U00011730-\U00011739\U000118e0-\U000118e9\U00011950-\U00011959\U00011c50-\U00011c59\U00011d50-\U00011d59\U00011da0-\U00011da9\U00016a60-\U00016a69\U00016ac0-\U00016ac9\U00016b50-\U00016b59\U0001d7ce-\U0001d7ff\U0001e140-\U0001e149\U0001e2f0-\U0001e2f9\U0001e950-\U0001e959\U0001f100-\U0001f10a\U0001fbf0-\U0001fbf9]', '', 'g'), 2)
END;

-- name: each word's first character and '***', the words joined by one space. One pass
-- turns every (whitespace, word, whitespace) run into ' X***'; ltrim() then drops the space
-- in front, or the whole of a name that holds no word (the pass left it untouched).
CREATE FUNCTION event.mask_name(n text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN ltrim(
    regexp_replace(n, '[\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]*([^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000])[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]*[\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]*', ' \1***', 'g'),
    E'\t\n\u000b\f\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000');

-- The masked fields, computed when a registration is written (only when the field itself
-- changes) rather than per row of an export: the name's pattern costs microseconds a row,
-- which a million-row masked export would pay in full.
ALTER TABLE event.registrations
    ADD COLUMN name_masked text GENERATED ALWAYS AS (event.mask_name(name)) STORED,
    ADD COLUMN email_masked text GENERATED ALWAYS AS (event.mask_email(email)) STORED,
    ADD COLUMN phone_masked text GENERATED ALWAYS AS (event.mask_phone(phone)) STORED;
