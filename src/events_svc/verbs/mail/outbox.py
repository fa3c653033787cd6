"""The outbox read: what the standalone mail and sms adapters queued for an event."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.actors import Actor
from events_svc.db import Pool, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.pii import mask_email, mask_phone

_OUTBOX = """
SELECT o.id, o.channel::text AS channel, o.recipient, o.sender, o.subject, o.body,
    o.attachments, o.event_id, o.registration_id, o.scheduler_id, o.trigger_id, o.created_at
FROM event.outbox_messages o
WHERE o.event_id = $1 AND ($2::timestamptz IS NULL OR (o.created_at, o.id) > ($2, $3::uuid))
ORDER BY o.created_at, o.id LIMIT $4
"""


async def list_outbox(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    *,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """What the standalone queue holds for an event. Rendered text carries attendee data:
    without `pii_full` the recipient is masked and subject, body and attachments' contents
    are withheld (null); a full read is audited."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        await get_event_row(conn, actor, event_id)
        rows = [dict(r) for r in await conn.fetch(_OUTBOX, event_id, key, after, size + 1)]
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
        for row in rows:
            mask = mask_email if row["channel"] == "mail" else mask_phone
            row["recipient"] = mask(row["recipient"])
            row["subject"] = row["body"] = None
            row["attachments"] = [
                {k: v for k, v in a.items() if k != "content"} | {"content": None}
                for a in row["attachments"]
            ]
    return page(rows, size, "created_at")
