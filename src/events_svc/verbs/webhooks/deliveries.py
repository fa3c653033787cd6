"""An endpoint's delivery log, a message sent again on demand, and the ping.

The log is one row per attempt, newest first. A redelivery sends the attempt's message
again at once, with the same `webhook-id`: the message's waiting attempt is made due now,
or (none waiting) one more attempt is queued, ahead of the endpoint's other waiting
attempts, and every delivery pass is kicked (whatever back-off it holds); a disabled
endpoint refuses it (409 `webhook_endpoint_disabled`: enable it first). A ping is a
message of type `ping` queued to the one endpoint, whatever its event types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection, must, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.webhooks import attempts
from events_svc.verbs.webhooks.endpoints import find_endpoint

_LOG = """
SELECT v.* FROM event.webhook_delivery_view v
WHERE v.endpoint_id = $1
  AND ($2::timestamptz IS NULL OR (v.created_at, v.id) < ($2, $3))
ORDER BY v.created_at DESC, v.id DESC
LIMIT $4
"""
_FIND = """
SELECT d.id, d.message_id, d.endpoint_id, w.active
FROM event.webhook_deliveries d JOIN event.webhook_endpoints w ON w.id = d.endpoint_id
WHERE d.id = $1 AND (w.company_id = $2 OR $2::uuid IS NULL)
"""
# the waiting attempt made due now (unless a pass holds it: it is being sent), else a
# new attempt after the message's last one; due before any other attempt of its endpoint
# that no pass holds (waiting, or whose lease ran out: due again), so the claims take it
# first (the log shows it due now, or just before)
_REDELIVER = """
WITH front AS (
    SELECT least($2::timestamptz, min(next_attempt_at) - interval '1 millisecond') AS at
    FROM event.webhook_deliveries
    WHERE endpoint_id = $3 AND state = 'pending' AND (lease_until IS NULL OR lease_until <= $2)
), waiting AS (
    UPDATE event.webhook_deliveries SET next_attempt_at = (SELECT at FROM front)
    WHERE message_id = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until <= $2)
    RETURNING id
), held AS (
    SELECT id FROM event.webhook_deliveries
    WHERE message_id = $1 AND state = 'pending' AND lease_until > $2
), queued AS (
    INSERT INTO event.webhook_deliveries
        (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
    SELECT $1, $3, max(attempt) + 1, 'pending', (SELECT at FROM front), $2
    FROM event.webhook_deliveries
    WHERE message_id = $1
      AND NOT EXISTS (SELECT 1 FROM waiting) AND NOT EXISTS (SELECT 1 FROM held)
    HAVING count(*) > 0
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT id FROM waiting UNION ALL SELECT id FROM held UNION ALL SELECT id FROM queued
"""
_ONE = "SELECT v.* FROM event.webhook_delivery_view v WHERE v.id = $1"
_PING = """
WITH msg AS (
    INSERT INTO event.webhook_messages (endpoint_id, event_type, body, created_at)
    VALUES ($1, 'ping', jsonb_build_object('type', 'ping', 'timestamp', $2::timestamptz,
        'data', jsonb_build_object('endpoint_id', $1::uuid))::text, $2)
    RETURNING id
)
INSERT INTO event.webhook_deliveries
    (message_id, endpoint_id, attempt, state, next_attempt_at, created_at)
SELECT id, $1, 1, 'pending', $2, $2 FROM msg
RETURNING id
"""


async def list_deliveries(
    pool: Pool,
    actor: Actor,
    endpoint_id: UUID,
    *,
    cursor: str | None,
    limit: int | None,
) -> dict[str, Any]:
    """The endpoint's attempts, newest first."""
    size = clamp_limit(limit)
    after_at, after_id = decode_cursor(cursor, datetime)
    async with connection(pool) as conn:
        await find_endpoint(conn, actor, endpoint_id)
        rows = await conn.fetch(_LOG, endpoint_id, after_at, after_id, size + 1)
    return page([dict(r) for r in rows], size, "created_at")


async def redeliver(pool: Pool, actor: Actor, delivery_id: UUID, now: datetime) -> dict[str, Any]:
    """Send the attempt's message again now (same `webhook-id`); the waiting attempt."""
    async with transaction(pool) as conn:
        found = await conn.fetchrow(_FIND, delivery_id, actor.company_id)
        if found is None:
            raise errors.NotFound("No such webhook delivery.")
        if not found["active"]:
            raise errors.WebhookEndpointDisabled()
        attempt = await conn.fetchval(_REDELIVER, found["message_id"], now, found["endpoint_id"])
        if attempt is None:  # another redelivery queued one this instant
            raise errors.Busy("The message is being queued again; retry in a moment.")
        await attempts.redelivered(conn)  # a waiting attempt made due now inserts nothing
        await write_audit(
            conn,
            actor,
            "webhook_redelivered",
            "webhook_delivery",
            delivery_id,
            summary={"endpoint_id": str(found["endpoint_id"])},
        )
        return must(await conn.fetchrow(_ONE, attempt))


async def ping(pool: Pool, actor: Actor, endpoint_id: UUID, now: datetime) -> dict[str, Any]:
    """Queue a `ping` message to this endpoint; its first attempt."""
    async with transaction(pool) as conn:
        await find_endpoint(conn, actor, endpoint_id)
        attempt = await conn.fetchval(_PING, endpoint_id, now)
        await write_audit(conn, actor, "webhook_pinged", "webhook_endpoint", endpoint_id)
        return must(await conn.fetchrow(_ONE, attempt))
