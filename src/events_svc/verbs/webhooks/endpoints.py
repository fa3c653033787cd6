"""Webhook endpoints: create (the secret shown once), read, patch, delete, rotate the
secret, and ping.

An endpoint belongs to the actor's company (a platform actor's: every company's facts).
The fence is strict: a company actor sees only its own endpoints; another company's, or a
platform one, answers like a missing one (404). `include_pii` needs `registration:pii`
(403 `missing_scope`), at create and at every patch that sets it; turning it off takes
the PII out of the messages the endpoint keeps (waiting ones are sent without it). The
URL passes the egress guard at every write (422 `webhook_url_not_allowed`).

A secret is `whsec_` and the base64 of 32 random bytes, returned by create and rotate
only; audit rows name the change, never the secret. A rotation keeps the previous secret
signing (a second signature) for 24 hours; a second rotation inside that window drops
the oldest.
"""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, transaction
from events_svc.egress import EgressGuard
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.webhooks import attempts

ROTATION_OVERLAP = timedelta(hours=24)
# the strict fence: a company actor sees its own endpoints only (`$2`: its company)
_INSERT = """
INSERT INTO event.webhook_endpoints (company_id, url, event_types, event_id, description,
    include_pii, active, secret, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
RETURNING id
"""
_GET = """
SELECT w.* FROM event.webhook_endpoint_view w
WHERE w.id = $1 AND (w.company_id = $2 OR $2::uuid IS NULL)
"""
_LOCK = """
SELECT w.id FROM event.webhook_endpoints w
WHERE w.id = $1 AND (w.company_id = $2 OR $2::uuid IS NULL)
FOR NO KEY UPDATE
"""
_LIST = """
SELECT w.* FROM event.webhook_endpoint_view w
WHERE (w.company_id = $1 OR $1::uuid IS NULL)
  AND ($2::timestamptz IS NULL OR (w.created_at, w.id) > ($2, $3))
ORDER BY w.created_at, w.id
LIMIT $4
"""
_UPDATE = """
UPDATE event.webhook_endpoints SET url = $2, event_types = $3, event_id = $4,
    description = $5, include_pii = $6, active = $7,
    disabled_reason = CASE WHEN $7 THEN NULL ELSE disabled_reason END,
    failing_since = CASE WHEN $7 AND NOT active THEN NULL ELSE failing_since END,
    updated_at = $8
WHERE id = $1
"""
_DELETE = "DELETE FROM event.webhook_endpoints WHERE id = $1"
_LOCK_ATTEMPTS = """
SELECT 1 FROM event.webhook_deliveries WHERE endpoint_id = $1 ORDER BY id FOR UPDATE
"""
# `include_pii` turned off: the PII keys leave the bodies the endpoint keeps
_SCRUB = """
UPDATE event.webhook_messages
SET body = event.webhook_body_without_pii(body, pii_keys), pii_keys = NULL
WHERE endpoint_id = $1 AND pii_keys IS NOT NULL
"""
_ROTATE = """
UPDATE event.webhook_endpoints
SET previous_secret = secret, previous_secret_until = $3, secret = $2, updated_at = $4
WHERE id = $1
"""


def new_secret() -> str:
    """`whsec_` + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def _check_pii(actor: Actor, include_pii: bool | None) -> None:
    if include_pii and not actor.has("registration:pii"):
        raise errors.MissingScope(
            "An endpoint that receives attendees' names, emails and phones needs the "
            "registration:pii scope.",
            scope="registration:pii",
        )


def _summary(fields: dict[str, Any]) -> dict[str, Any]:
    """What an audit row says of a write: the fields' names and harmless values."""
    shown = {"event_types", "event_id", "include_pii", "active"}
    return {
        "fields": sorted(fields),
        **{k: str(v) if isinstance(v, UUID) else v for k, v in fields.items() if k in shown},
    }


async def find_endpoint(conn: Connection, actor: Actor, endpoint_id: UUID) -> dict[str, Any]:
    """The endpoint as the actor may see it; 404 otherwise."""
    row = await conn.fetchrow(_GET, endpoint_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such webhook endpoint.")
    return dict(row)


async def lock_endpoint(conn: Connection, actor: Actor, endpoint_id: UUID) -> dict[str, Any]:
    """The endpoint row locked for a write, within the fence; 404 otherwise."""
    row = await conn.fetchrow(_LOCK, endpoint_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such webhook endpoint.")
    return dict(row)


async def create_endpoint(
    pool: Pool, guard: EgressGuard, actor: Actor, body: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """A new endpoint, with its secret (shown this once)."""
    _check_pii(actor, body.get("include_pii"))
    await guard.check_url(body["url"])
    secret = new_secret()
    kinds = list(dict.fromkeys(body["event_types"]))
    async with transaction(pool) as conn:
        if body.get("event_id") is not None:
            await get_event_row(conn, actor, body["event_id"])
        endpoint_id = await conn.fetchval(
            _INSERT,
            actor.company_id,
            body["url"],
            kinds,
            body.get("event_id"),
            body.get("description", ""),
            body.get("include_pii", False),
            body.get("active", True),
            secret,
            now,
        )
        await write_audit(
            conn,
            actor,
            "webhook_endpoint_created",
            "webhook_endpoint",
            endpoint_id,
            summary=_summary({**body, "event_types": kinds}),
        )
        return {**await find_endpoint(conn, actor, endpoint_id), "secret": secret}


async def get_endpoint(pool: Pool, actor: Actor, endpoint_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return await find_endpoint(conn, actor, endpoint_id)


async def list_endpoints(
    pool: Pool, actor: Actor, *, cursor: str | None, limit: int | None
) -> dict[str, Any]:
    """The actor's endpoints, oldest first."""
    size = clamp_limit(limit)
    after_at, after_id = decode_cursor(cursor, datetime)
    async with connection(pool) as conn:
        rows = await conn.fetch(_LIST, actor.company_id, after_at, after_id, size + 1)
    return page([dict(r) for r in rows], size, "created_at")


async def patch_endpoint(
    pool: Pool,
    guard: EgressGuard,
    actor: Actor,
    endpoint_id: UUID,
    changes: dict[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """Change the fields given (a null for a required one: 422). `active: true` enables
    a disabled endpoint again and clears why it was disabled."""
    for name in ("url", "event_types", "description", "include_pii", "active"):
        if name in changes and changes[name] is None:
            raise errors.ValidationFailed(f"{name} cannot be null", field=name)
    _check_pii(actor, changes.get("include_pii"))
    if "url" in changes:
        await guard.check_url(changes["url"])
    async with transaction(pool) as conn:
        await lock_endpoint(conn, actor, endpoint_id)
        current = await find_endpoint(conn, actor, endpoint_id)
        _check_pii(actor, current["include_pii"])  # its url, types or secret lead to PII
        if changes.get("event_id") is not None:
            await get_event_row(conn, actor, changes["event_id"])
        row = {**current, **changes}
        kinds = list(dict.fromkeys(row["event_types"]))
        await conn.execute(
            _UPDATE,
            endpoint_id,
            row["url"],
            kinds,
            row["event_id"],
            row["description"],
            row["include_pii"],
            row["active"],
            now,
        )
        if current["include_pii"] and not row["include_pii"]:
            await conn.execute(_SCRUB, endpoint_id)
        if row["active"] and not current["active"]:
            await attempts.wake(conn)  # its waiting attempts are due again
        await write_audit(
            conn,
            actor,
            "webhook_endpoint_changed",
            "webhook_endpoint",
            endpoint_id,
            summary=_summary(changes),
        )
        return await find_endpoint(conn, actor, endpoint_id)


async def delete_endpoint(pool: Pool, actor: Actor, endpoint_id: UUID) -> None:
    """Delete the endpoint, its messages and its delivery log."""
    async with transaction(pool) as conn:
        await find_endpoint(conn, actor, endpoint_id)  # the fence first: no lock on a 404
        # its attempts before the endpoint, the order a recording pass takes them (it updates
        # attempts, then refers to the endpoint): the two never wait on each other in a cycle
        await conn.execute(_LOCK_ATTEMPTS, endpoint_id)
        await lock_endpoint(conn, actor, endpoint_id)
        await conn.execute(_DELETE, endpoint_id)
        await write_audit(conn, actor, "webhook_endpoint_deleted", "webhook_endpoint", endpoint_id)


async def rotate_secret(
    pool: Pool, actor: Actor, endpoint_id: UUID, now: datetime
) -> dict[str, Any]:
    """A new secret; the current one keeps signing beside it for 24 hours."""
    secret = new_secret()
    until = now + ROTATION_OVERLAP
    async with transaction(pool) as conn:
        await lock_endpoint(conn, actor, endpoint_id)
        _check_pii(actor, (await find_endpoint(conn, actor, endpoint_id))["include_pii"])
        await conn.execute(_ROTATE, endpoint_id, secret, until, now)
        await write_audit(
            conn,
            actor,
            "webhook_secret_rotated",
            "webhook_endpoint",
            endpoint_id,
            summary={"rotation_ends_at": until.isoformat()},
        )
    return {"secret": secret, "rotation_ends_at": until}
