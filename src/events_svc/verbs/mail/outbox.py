"""The outbox as operators see it: what the standalone mail and sms adapters queued, its
delivery state, the counts by state, and the retry of a message that failed.

Every read and the retry are fenced by the event's company (a message of a foreign
event answers like a missing one). Without `event_id` a read covers every event the
actor sees (a platform operator: the whole outbox).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, transaction
from events_svc.verbs import delivery
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.pii import mask_email, mask_phone

DELIVERY_STATES = ("queued", "sending", "sent", "retrying", "failed")
# every statement is fenced alike: a message is the actor's ($2: its company) when its
# event is (`event.visible_to`); a message without an event only a platform operator's
_OUTBOX = """
SELECT o.id, o.channel::text AS channel, o.recipient, o.sender, o.subject, o.body,
    o.attachments, o.event_id, o.registration_id, o.scheduler_id, o.trigger_id, o.created_at,
    o.delivery_state::text AS delivery_state, o.attempts, o.next_attempt_at, o.sent_at,
    o.message_id, o.last_error
FROM event.outbox_messages o
WHERE ($1::uuid IS NULL OR o.event_id = $1)
  AND ($2::uuid IS NULL OR EXISTS (
      SELECT 1 FROM event.events e
      WHERE e.id = o.event_id AND event.visible_to(e.company_id, $2)))
  AND ($3::event.delivery_state IS NULL OR o.delivery_state = $3)
  AND ($4::event.notification_channel IS NULL OR o.channel = $4)
  AND ($5::timestamptz IS NULL OR (o.created_at, o.id) > ($5, $6::uuid))
ORDER BY o.created_at, o.id LIMIT $7
"""
_SUMMARY = """
SELECT o.delivery_state::text AS state, count(*) AS n
FROM event.outbox_messages o
WHERE ($1::uuid IS NULL OR o.event_id = $1)
  AND ($2::uuid IS NULL OR EXISTS (
      SELECT 1 FROM event.events e
      WHERE e.id = o.event_id AND event.visible_to(e.company_id, $2)))
GROUP BY o.delivery_state
"""
_ONE = """
SELECT o.id, o.delivery_state::text AS delivery_state, o.event_id, o.channel::text AS channel
FROM event.outbox_messages o
WHERE o.id = $3 AND ($1::uuid IS NULL OR o.event_id = $1)
  AND ($2::uuid IS NULL OR EXISTS (
      SELECT 1 FROM event.events e
      WHERE e.id = o.event_id AND event.visible_to(e.company_id, $2)))
FOR NO KEY UPDATE
"""
_REQUEUE = """
UPDATE event.outbox_messages o
SET delivery_state = 'queued', next_attempt_at = $2, lease_until = NULL, lease_token = NULL
WHERE o.id = $1
RETURNING o.id, o.channel::text AS channel, o.recipient, o.sender, o.subject, o.body,
    o.attachments, o.event_id, o.registration_id, o.scheduler_id, o.trigger_id, o.created_at,
    o.delivery_state::text AS delivery_state, o.attempts, o.next_attempt_at, o.sent_at,
    o.message_id, o.last_error
"""
_COUNTS = """
SELECT channel::text AS channel, delivery_state::text AS state, count(*) AS n
FROM event.outbox_messages GROUP BY channel, delivery_state
"""


def _masked(row: dict[str, Any]) -> dict[str, Any]:
    """The row without attendee data: the recipient masked, texts and contents withheld."""
    mask = mask_email if row["channel"] == "mail" else mask_phone
    row["recipient"] = mask(row["recipient"])
    row["subject"] = row["body"] = None
    row["attachments"] = [a | {"content": None} for a in row["attachments"]]
    return row


def _view(row: Any) -> dict[str, Any]:
    out = dict(row)
    for name in ("attachments", "last_error"):
        if isinstance(out[name], str):
            out[name] = json.loads(out[name])
    out["attachments"] = [
        {"filename": "", "content_type": "", "content": None} | a for a in out["attachments"]
    ]
    return out


async def _scope(conn: Connection, actor: Actor, event_id: UUID | None) -> None:
    if event_id is not None:
        await get_event_row(conn, actor, event_id)  # 404 for a foreign or missing event


async def list_outbox(
    pool: Pool,
    actor: Actor,
    event_id: UUID | None,
    *,
    delivery_state: str | None = None,
    channel: str | None = None,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """What the standalone queue holds (for an event, or every event the actor sees), with
    its delivery state. Rendered text carries attendee data: without `pii_full` the
    recipient is masked and subject, body and attachments' contents are withheld (null); a
    full read is audited."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        await _scope(conn, actor, event_id)
        fetched = await conn.fetch(
            _OUTBOX,
            event_id,
            actor.company_id,
            delivery_state,
            channel,
            key,
            after,
            size + 1,
        )
        rows = [_view(r) for r in fetched]
        if pii_full and rows:
            await write_audit(
                conn,
                actor,
                "outbox_pii_read",
                "outbox",
                None,
                event_id=event_id,
                summary={"rows": min(len(rows), size)},
            )
    if not pii_full:
        rows = [_masked(row) for row in rows]
    return page(rows, size, "created_at")


async def outbox_summary(pool: Pool, actor: Actor, event_id: UUID | None) -> dict[str, int]:
    """How many messages are in each delivery state (an event's, or every event's the actor
    sees)."""
    async with transaction(pool) as conn:
        await _scope(conn, actor, event_id)
        rows = await conn.fetch(_SUMMARY, event_id, actor.company_id)
    counts = dict.fromkeys(DELIVERY_STATES, 0)
    counts.update({r["state"]: r["n"] for r in rows})
    return counts


async def retry_message(
    pool: Pool, actor: Actor, message_id: UUID, now: datetime
) -> dict[str, Any]:
    """Put a `failed` or `retrying` message back in the queue, due now, its attempts kept;
    when this commits every process ends its pause of the message's channel and tries
    this message first (`delivery.retried`). 404 for a missing or foreign message, 409
    `outbox_message_not_retryable` for one that is queued, sending or sent. Audited; the
    answer is the message as the masked list shows it."""
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_ONE, None, actor.company_id, message_id)
        if row is None:
            raise errors.NotFound("No such outbox message.")
        if row["delivery_state"] not in {"failed", "retrying"}:
            raise errors.OutboxMessageNotRetryable(
                f"A {row['delivery_state']} message is not retried.",
                delivery_state=row["delivery_state"],
            )
        updated = await conn.fetchrow(_REQUEUE, message_id, now)
        await write_audit(
            conn,
            actor,
            "outbox_message_retried",
            "outbox_message",
            message_id,
            event_id=row["event_id"],
            summary={"from_state": row["delivery_state"]},
        )
        await delivery.retried(conn, row["channel"], message_id)
    return _masked(_view(updated))


async def outbox_counts(pool: Pool) -> list[tuple[str, str, int]]:
    """(channel, delivery state, messages) of the whole outbox: the metrics' gauge."""
    async with connection(pool) as conn:
        rows = await conn.fetch(_COUNTS)
    return [(r["channel"], r["state"], r["n"]) for r in rows]
