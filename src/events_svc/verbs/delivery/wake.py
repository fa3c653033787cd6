"""How the outbox wakes its drainers, and how an operator's retry reaches every process.

A written (or requeued) message NOTIFYs `event_outbox_due` when its transaction commits
(the table's trigger). An operator's retry NOTIFYs the same channel with the message's
channel and id (`retry:<channel>:<id>`): every process ends that channel's pause (a relay
it found down) and claims that message first, so it is tried within seconds; if the relay
is still down it fails again and the pause resumes.
"""

from __future__ import annotations

from uuid import UUID

from events_svc.db import Connection

WAKE_CHANNEL = "event_outbox_due"
_RETRY = "retry"


async def retried(conn: Connection, channel: str, message_id: UUID) -> None:
    """Tell every drainer, when this transaction commits, that `message_id` of `channel`
    is to be tried now."""
    await conn.execute("SELECT pg_notify($1, $2)", WAKE_CHANNEL, f"{_RETRY}:{channel}:{message_id}")


def retry_of(payload: str) -> tuple[str, UUID] | None:
    """The (channel, message id) an operator's retry names, or None for a plain wake."""
    kind, _, rest = payload.partition(":")
    channel, _, raw = rest.partition(":")
    if kind != _RETRY or not channel:
        return None
    try:
        return channel, UUID(raw)
    except ValueError:
        return None
