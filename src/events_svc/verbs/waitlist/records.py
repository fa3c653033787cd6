"""Waiting-list entries as they are read: one entry, an event's list in queue order, a
place in its queue, and the views (masked like registrations unless the reader may see
PII and asks for it).

An entry's queue is its scope: the same event, ticket and slot. Its `position` is its
rank among that scope's `waiting` entries in queue order (`created_at`, then id), 1 for
the next to be served; entries that are not waiting have none.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection
from events_svc.verbs.pii import mask_email, mask_name, mask_phone

_ONE = """
SELECT w.* FROM event.waitlist_entry w
WHERE w.id = $1 AND ($2::uuid IS NULL OR w.event_id = $2)
"""
_LOCK = _ONE + "FOR NO KEY UPDATE  -- after the event row (and slot, ticket rows)"
_VISIBLE = """
SELECT w.* FROM event.waitlist_entry w JOIN event.events e ON e.id = w.event_id
WHERE w.id = $1 AND event.visible_to(e.company_id, $2)
"""
_POSITION = """
SELECT count(*) FROM event.waitlist_entry o
WHERE o.event_id = $1 AND o.status = 'waiting'
  AND o.event_ticket_id IS NOT DISTINCT FROM $2 AND o.event_slot_id IS NOT DISTINCT FROM $3
  AND (o.created_at, o.id) <= ($4, $5)
"""
# every entry of the event in queue order, with the rank of each waiting one in its scope
_LIST = """
SELECT * FROM (
    SELECT w.*,
        CASE WHEN w.status = 'waiting' THEN row_number() OVER (
            PARTITION BY w.event_ticket_id, w.event_slot_id, w.status = 'waiting'
            ORDER BY w.created_at, w.id) END AS position
    FROM event.waitlist_entry w WHERE w.event_id = $1
) x
WHERE ($2::event.waitlist_status IS NULL OR x.status = $2::event.waitlist_status)
  AND ($3::timestamptz IS NULL OR (x.created_at, x.id) > ($3, $4::uuid))
ORDER BY x.created_at, x.id LIMIT $5
"""


_LIVE_COUNTS = """
SELECT 'waiting' AS status, count(*) AS n FROM event.waitlist_entry WHERE status = 'waiting'
UNION ALL
SELECT 'offered', count(*) FROM event.waitlist_entry WHERE status = 'offered'
"""


async def live_counts(conn: Connection) -> dict[str, int]:
    """The entries waiting and holding an offer, over every event (the two partial indexes)."""
    return {row["status"]: int(row["n"]) for row in await conn.fetch(_LIVE_COUNTS)}


async def read_entry(
    conn: Connection, entry_id: UUID, event_id: UUID | None = None, *, lock: bool = False
) -> dict[str, Any]:
    """One entry (of `event_id` when given), locked with `lock`; 404 otherwise."""
    row = await conn.fetchrow(_LOCK if lock else _ONE, entry_id, event_id)
    if row is None:
        raise errors.NotFound("No such waiting-list entry.")
    return dict(row)


async def find_entry(conn: Connection, actor: Actor, entry_id: UUID) -> dict[str, Any]:
    """An entry of an event the actor sees (unlocked); another company's answers like a
    missing one."""
    row = await conn.fetchrow(_VISIBLE, entry_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such waiting-list entry.")
    return dict(row)


async def position_of(conn: Connection, entry: dict[str, Any]) -> int | None:
    """The entry's rank in its scope's queue (1: next), None unless it is waiting."""
    if entry["status"] != "waiting":
        return None
    return int(
        await conn.fetchval(
            _POSITION,
            entry["event_id"],
            entry["event_ticket_id"],
            entry["event_slot_id"],
            entry["created_at"],
            entry["id"],
        )
    )


async def list_rows(
    conn: Connection,
    event_id: UUID,
    status: str | None,
    after: tuple[datetime, UUID] | tuple[None, None],
    limit: int,
) -> list[dict[str, Any]]:
    """A page of the event's entries in queue order (one more row than `limit`)."""
    rows = await conn.fetch(_LIST, event_id, status, after[0], after[1], limit + 1)
    return [dict(r) for r in rows]


def entry_view(row: dict[str, Any], pii_full: bool) -> dict[str, Any]:
    """The admin view of an entry: name and email masked unless `pii_full`."""
    view = {
        k: row.get(k)
        for k in (
            "id",
            "event_id",
            "status",
            "position",
            "seats",
            "event_ticket_id",
            "event_slot_id",
            "name",
            "email",
            "phone",
            "created_at",
            "offered_at",
            "offer_expires_at",
            "decided_at",
        )
    }
    view["registration_ids"] = list(row.get("registration_ids") or [])
    if not pii_full:
        view["name"] = mask_name(row["name"])
        view["email"] = mask_email(row["email"])
        view["phone"] = mask_phone(row["phone"])
    return view
