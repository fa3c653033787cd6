"""API tokens: minted once, stored as a sha256 hash, revocable; and the database's own
secret that signs the console's session cookies, which name a token.

A token is `evt_` + 43 url-safe characters (256 bits); only its hash and a
short prefix (to recognise it in lists) are stored. The token is shown once,
at creation, and never logged. The session secret (migration 0022) is used only when
EVENTS_CONSOLE_SECRET is not set.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import SCOPES, Actor
from events_svc.db import Pool, connection, must, transaction

_PREFIX = "evt_"

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
# last_used_at is written at most once a minute per token: no write per request
_RESOLVE = """
WITH hit AS (
    SELECT id, name, scopes, company_id, last_used_at FROM event.api_tokens
    WHERE token_hash = $1 AND revoked_at IS NULL
), touch AS (
    UPDATE event.api_tokens t SET last_used_at = $2::timestamptz FROM hit
    WHERE t.id = hit.id
      AND (hit.last_used_at IS NULL OR hit.last_used_at < $2::timestamptz - interval '1 minute')
)
SELECT id, name, scopes, company_id FROM hit
"""
# the console's session names the token by id (the token itself is never kept)
_RESOLVE_ID = """
WITH hit AS (
    SELECT id, name, scopes, company_id, last_used_at FROM event.api_tokens
    WHERE id = $1 AND revoked_at IS NULL
), touch AS (
    UPDATE event.api_tokens t SET last_used_at = $2::timestamptz FROM hit
    WHERE t.id = hit.id
      AND (hit.last_used_at IS NULL OR hit.last_used_at < $2::timestamptz - interval '1 minute')
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
    """Revoke a token (idempotent: the first revocation time is kept)."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_REVOKE, token_id, now)
    if row is None:
        raise errors.NotFound("No such token.")
    return dict(row)


async def resolve_token(pool: Pool, token: str, now: datetime) -> Actor | None:
    """The actor for a live token, or None for unknown or revoked tokens."""
    if not token.startswith(_PREFIX) or len(token) > 200:
        return None
    async with connection(pool) as conn:  # one statement, autocommit: no BEGIN/COMMIT trips
        row = await conn.fetchrow(_RESOLVE, _digest(token), now)
    return _actor(row)


async def resolve_token_id(pool: Pool, token_id: UUID, now: datetime) -> Actor | None:
    """The actor of a live token named by its id (a console session), else None; its use
    is recorded as a bearer use is (`last_used_at`, at most once a minute)."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_RESOLVE_ID, token_id, now)
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
