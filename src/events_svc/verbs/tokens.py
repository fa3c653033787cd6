"""API tokens: minted once, stored as a sha256 hash, revocable; the console sessions made
from them; and the database's own secret that signs the console's cookies.

A token is `evt_` + 43 url-safe characters (256 bits); only its hash and a
short prefix (to recognise it in lists) are stored. The token is shown once,
at creation, and never logged.

A console session (migration 0025) is one row per sign-in: the console's cookie carries a
random key (signed), the row keeps only its sha256 and the token it was made from. It is
live while it is not ended, its token is not revoked, and it was seen within
`CONSOLE_IDLE`; sign-out ends it, and revoking the token ends all of its sessions in the
revocation's own transaction. Rows unseen for `SESSION_RETENTION` are deleted by later
sign-ins. The session secret (migration 0022) is used only when EVENTS_CONSOLE_SECRET is
not set.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import SCOPES, Actor
from events_svc.db import Pool, affected, connection, must, transaction

_PREFIX = "evt_"
CONSOLE_IDLE = timedelta(hours=12)  # a console session unseen this long is over
SESSION_RETENTION = timedelta(days=30)  # then its row goes, at a later sign-in
_SWEEP_BATCH = 100
MAX_SESSION_KEY = 64  # a longer key is not one this module made

_INSERT = """
INSERT INTO event.api_tokens (name, token_hash, token_prefix, scopes, company_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, name, token_prefix, scopes, company_id, created_at, last_used_at, revoked_at
"""
_READ_SESSION_KEY = "SELECT secret FROM event.console_secret WHERE id = 1"
_LIST = """
SELECT id, name, token_prefix, scopes, company_id, created_at, last_used_at, revoked_at
FROM event.api_tokens ORDER BY created_at, id
"""
_REVOKE = """
UPDATE event.api_tokens SET revoked_at = coalesce(revoked_at, $2)
WHERE id = $1 RETURNING id, name, token_prefix, scopes, company_id, created_at,
    last_used_at, revoked_at
"""
# after _REVOKE, which holds the token's row: a sign-in racing the revocation either
# committed its session first (ended here) or finds the token revoked (makes none)
_END_REVOKED_SESSIONS = """
UPDATE event.console_sessions SET ended_at = $2
WHERE token_id = $1 AND ended_at IS NULL
"""
# last_used_at is written at most once a minute per token: no write per request
_RESOLVE = """
WITH hit AS (
    SELECT id, name, scopes, company_id, last_used_at FROM event.api_tokens
    WHERE token_hash = $1 AND revoked_at IS NULL
), touch AS (  -- best effort: a token row another transaction holds is left as it is
    UPDATE event.api_tokens t SET last_used_at = $2::timestamptz
    WHERE t.id = (
        SELECT k.id FROM event.api_tokens k JOIN hit ON k.id = hit.id
        WHERE hit.last_used_at IS NULL OR hit.last_used_at < $2::timestamptz - interval '1 minute'
        FOR NO KEY UPDATE OF k SKIP LOCKED
    )
)
SELECT id, name, scopes, company_id FROM hit
"""
# serialises a sign-in with the token's revocation (see _END_REVOKED_SESSIONS) and with
# other sign-ins of the token, which also write its last_used_at
_LOCK_FOR_SIGN_IN = """
SELECT id, name, scopes, company_id FROM event.api_tokens
WHERE token_hash = $1 AND revoked_at IS NULL
FOR NO KEY UPDATE
"""
_INSERT_SESSION = """
INSERT INTO event.console_sessions (key_hash, token_id, created_at, last_seen_at)
VALUES ($1, $2, $3, $3)
"""
_END_SESSION = """
UPDATE event.console_sessions SET ended_at = $2
WHERE key_hash = $1 AND ended_at IS NULL
"""
_MARK_USED = """
UPDATE event.api_tokens SET last_used_at = $2::timestamptz
WHERE id = $1
  AND (last_used_at IS NULL OR last_used_at < $2::timestamptz - interval '1 minute')
"""
# sessions unseen for the retention have long been over (ended or idle); bounded, and
# rows another sign-in is deleting are skipped, never waited for
_SWEEP_SESSIONS = """
DELETE FROM event.console_sessions WHERE id IN (
    SELECT id FROM event.console_sessions WHERE last_seen_at < $1
    ORDER BY last_seen_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
"""
# every console request: the live session of a live token. The session's last_seen_at
# and the token's last_used_at are written at most once a minute and never waited for
# (SKIP LOCKED): a page never queues behind a sign-out or a revocation holding a row,
# and a row ended meanwhile is re-checked under its lock and left alone
_RESOLVE_SESSION = """
WITH hit AS (
    SELECT s.id AS session_id, s.last_seen_at, t.id, t.name, t.scopes, t.company_id,
           t.last_used_at
    FROM event.console_sessions s JOIN event.api_tokens t ON t.id = s.token_id
    WHERE s.key_hash = $1 AND s.ended_at IS NULL AND t.revoked_at IS NULL
      AND s.last_seen_at > $2::timestamptz - $3::interval
), seen AS (
    UPDATE event.console_sessions s SET last_seen_at = $2::timestamptz
    WHERE s.id = (
        SELECT c.id FROM event.console_sessions c JOIN hit ON c.id = hit.session_id
        WHERE c.ended_at IS NULL AND hit.last_seen_at < $2::timestamptz - interval '1 minute'
        FOR NO KEY UPDATE OF c SKIP LOCKED
    )
), touch AS (
    UPDATE event.api_tokens t SET last_used_at = $2::timestamptz
    WHERE t.id = (
        SELECT k.id FROM event.api_tokens k JOIN hit ON k.id = hit.id
        WHERE hit.last_used_at IS NULL OR hit.last_used_at < $2::timestamptz - interval '1 minute'
        FOR NO KEY UPDATE OF k SKIP LOCKED
    )
)
SELECT id, name, scopes, company_id FROM hit
"""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def check_scopes(scopes: list[str]) -> list[str]:
    unknown = sorted(set(scopes) - SCOPES)
    if unknown or not scopes:
        raise errors.ValidationFailed(
            "scopes must be a non-empty list of known scopes", unknown_scopes=unknown
        )
    return sorted(set(scopes))


async def create_token(
    pool: Pool, name: str, scopes: list[str], company_id: UUID | None, now: datetime
) -> tuple[str, dict[str, Any]]:
    """Mint a token; returns (the token, shown once; its stored row)."""
    clean = check_scopes(scopes)
    token = _PREFIX + secrets.token_urlsafe(32)
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_INSERT, name, _digest(token), token[:10], clean, company_id, now)
    return token, must(row)


async def list_tokens(pool: Pool) -> list[dict[str, Any]]:
    async with connection(pool) as conn:
        return [dict(r) for r in await conn.fetch(_LIST)]


async def revoke_token(pool: Pool, token_id: UUID, now: datetime) -> dict[str, Any]:
    """Revoke a token (idempotent: the first revocation time is kept) and end its console
    sessions in the same transaction; locks the token's row, then its sessions. The row
    comes back with `console_sessions_ended`, how many live sessions this ended."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_REVOKE, token_id, now)
        if row is None:
            raise errors.NotFound("No such token.")
        ended = await conn.execute(_END_REVOKED_SESSIONS, token_id, now)
    return {**dict(row), "console_sessions_ended": affected(ended)}


async def resolve_token(pool: Pool, token: str, now: datetime) -> Actor | None:
    """The actor for a live token, or None for unknown or revoked tokens."""
    if not token.startswith(_PREFIX) or len(token) > 200:
        return None
    async with connection(pool) as conn:  # one statement, autocommit: no BEGIN/COMMIT trips
        row = await conn.fetchrow(_RESOLVE, _digest(token), now)
    return _actor(row)


async def start_console_session(
    pool: Pool, token: str, now: datetime, *, replacing: str | None = None
) -> str | None:
    """Sign in to the console with a live token: a new session row, and its key (for the
    cookie; only its hash is stored), or None for an unknown or revoked token. Ends the
    session `replacing` names (the browser's previous one) and deletes a batch of rows
    unseen for SESSION_RETENTION. Locks the token's row, then sessions."""
    if not token.startswith(_PREFIX) or len(token) > 200:
        return None
    key = secrets.token_urlsafe(32)
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_LOCK_FOR_SIGN_IN, _digest(token))
        if row is None:
            return None
        if replacing is not None and len(replacing) <= MAX_SESSION_KEY:
            await conn.execute(_END_SESSION, _digest(replacing), now)
        await conn.execute(_INSERT_SESSION, _digest(key), row["id"], now)
        await conn.execute(_MARK_USED, row["id"], now)
        await conn.execute(_SWEEP_SESSIONS, now - SESSION_RETENTION, _SWEEP_BATCH)
    return key


async def end_console_session(pool: Pool, key: str, now: datetime) -> bool:
    """Sign out: end the session `key` names, so a copy of its cookie opens nothing;
    whether a live row was ended (idempotent). Locks that session's row."""
    if len(key) > MAX_SESSION_KEY:
        return False
    async with transaction(pool) as conn:
        status = await conn.execute(_END_SESSION, _digest(key), now)
    return affected(status) > 0


async def resolve_console_session(pool: Pool, key: str, now: datetime) -> Actor | None:
    """The actor of the live console session `key` names, else None (unknown, ended, idle
    for CONSOLE_IDLE, or its token revoked); a hit renews the session (`last_seen_at`)
    and records the token's use (`last_used_at`), each at most once a minute."""
    if len(key) > MAX_SESSION_KEY:
        return None
    async with connection(pool) as conn:  # one statement, autocommit
        row = await conn.fetchrow(_RESOLVE_SESSION, _digest(key), now, CONSOLE_IDLE)
    return _actor(row)


def _actor(row: Any) -> Actor | None:
    if row is None:
        return None
    return Actor(
        id=f"token:{row['id']}",
        kind="token",
        scopes=frozenset(row["scopes"]),
        company_id=row["company_id"],
        name=row["name"],
    )


async def session_secret(pool: Pool) -> str | None:
    """The database's console session secret (None before migration 0022 ran)."""
    async with connection(pool) as conn:
        value = await conn.fetchval(_READ_SESSION_KEY)
    return str(value) if value is not None else None
