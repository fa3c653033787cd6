"""Tickets and slots: the seat scopes that hang off one event.

Writers lock the event row first, then the ticket or slot row (the service's
lock order). A ticket's per-order cap is 0..`MAX_PER_ORDER` and never above its own seats
(service pre-check for the typed error, column CHECK as the wall). A slot
lies inside its event's dates and exists only on multi-slot events. Both are
fenced by their event's company. A ticket may name the host's product it sells
(`product_ref`), which the linked-products read lists.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import MAX_PER_ORDER, SlotCreate, TicketCreate
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.fence import lock_event
from events_svc.verbs.mail import reschedule_event
from events_svc.verbs.registrations import ensure_cap_covers_taken

_TICKET_GET = """
SELECT k.* FROM event.tickets k JOIN event.events e ON e.id = k.event_id
WHERE k.id = $1 AND event.visible_to(e.company_id, $2)
"""
_TICKET_LOCK = "SELECT * FROM event.tickets WHERE id = $1 FOR NO KEY UPDATE"
_TICKET_LIST = """
SELECT k.* FROM event.tickets k JOIN event.events e ON e.id = k.event_id
WHERE ($1::uuid IS NULL OR k.event_id = $1)
  AND event.visible_to(e.company_id, $2)
  AND ($3::timestamptz IS NULL OR (k.created_at, k.id) > ($3, $4::uuid))
ORDER BY k.created_at, k.id LIMIT $5
"""
_TICKET_INSERT = """
INSERT INTO event.tickets (event_id, name, description, seats_max, limit_max_per_order,
    start_sale_datetime, end_sale_datetime, product_ref, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $9, $8, $8) RETURNING *
"""
_TICKET_UPDATE = """
UPDATE event.tickets SET name = $2, description = $3, seats_max = $4,
    limit_max_per_order = $5, start_sale_datetime = $6, end_sale_datetime = $7, updated_at = $8,
    product_ref = $9
WHERE id = $1 RETURNING *
"""
_TICKET_DELETE = "DELETE FROM event.tickets WHERE id = $1"

_SLOT_GET = """
SELECT s.* FROM event.slots s JOIN event.events e ON e.id = s.event_id
WHERE s.id = $1 AND event.visible_to(e.company_id, $2)
"""
_SLOT_LOCK = "SELECT * FROM event.slots WHERE id = $1 FOR NO KEY UPDATE"
_SLOT_LIST = """
SELECT s.* FROM event.slots s JOIN event.events e ON e.id = s.event_id
WHERE ($1::uuid IS NULL OR s.event_id = $1)
  AND event.visible_to(e.company_id, $2)
  AND ($3::timestamptz IS NULL OR (s.date_begin, s.id) > ($3, $4::uuid))
ORDER BY s.date_begin, s.id LIMIT $5
"""
_SLOT_INSERT = """
INSERT INTO event.slots (event_id, date_begin, date_end, created_at, updated_at)
VALUES ($1, $2, $3, $4, $4) RETURNING *
"""
_SLOT_UPDATE = """
UPDATE event.slots SET date_begin = $2, date_end = $3, updated_at = $4 WHERE id = $1 RETURNING *
"""
_SLOT_DELETE = "DELETE FROM event.slots WHERE id = $1"

_TICKET_NOT_NULL = frozenset({"name", "description", "seats_max", "limit_max_per_order"})
_SLOT_NOT_NULL = frozenset({"date_begin", "date_end"})


def check_per_order_cap(seats_max: int, limit_max_per_order: int) -> None:
    """0..`MAX_PER_ORDER`, and not above the ticket's own seats when those are limited."""
    ceiling = MAX_PER_ORDER if seats_max <= 0 else min(seats_max, MAX_PER_ORDER)
    if not 0 <= limit_max_per_order <= ceiling:
        raise errors.PerOrderCapOutOfRange(field="limit_max_per_order", maximum=ceiling)


def _check_slot(event: dict[str, Any], begin: datetime, end: datetime) -> None:
    if end <= begin:
        raise errors.DateOrder(field="date_end")
    if begin < event["date_begin"] or end > event["date_end"]:
        raise errors.SlotOutsideEvent(field="date_begin")


async def _lock_child(
    conn: Connection, actor: Actor, get_sql: str, lock_sql: str, obj_id: UUID, what: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Find the child's event, lock the event, then the child: (event, child)."""
    found = await conn.fetchrow(get_sql, obj_id, actor.company_id)
    if found is None:
        raise errors.NotFound(f"No such {what}.")
    event = await lock_event(conn, actor, found["event_id"])
    child = await conn.fetchrow(lock_sql, obj_id)
    if child is None:
        raise errors.NotFound(f"No such {what}.")
    return event, dict(child)


# --- tickets -------------------------------------------------------------------------------


async def create_ticket(
    pool: Pool, actor: Actor, cmd: TicketCreate, now: datetime
) -> dict[str, Any]:
    """Add a ticket to an event (event row locked)."""
    check_per_order_cap(cmd.seats_max, cmd.limit_max_per_order)
    async with transaction(pool) as conn:
        await lock_event(conn, actor, cmd.event_id)
        row = must(
            await conn.fetchrow(
                _TICKET_INSERT,
                cmd.event_id,
                cmd.name,
                cmd.description,
                cmd.seats_max,
                cmd.limit_max_per_order,
                cmd.start_sale_datetime,
                cmd.end_sale_datetime,
                now,
                cmd.product_ref,
            )
        )
        await write_audit(conn, actor, "ticket_created", "ticket", row["id"], event_id=cmd.event_id)
        return row


async def get_ticket(pool: Pool, actor: Actor, ticket_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        row = await conn.fetchrow(_TICKET_GET, ticket_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such ticket.")
    return dict(row)


async def list_tickets(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with connection(pool) as conn:
        rows = await conn.fetch(_TICKET_LIST, event_id, actor.company_id, key, after, size + 1)
    return page([dict(r) for r in rows], size, "created_at")


async def patch_ticket(
    pool: Pool, actor: Actor, ticket_id: UUID, changes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Write the fields sent (event row, then ticket row locked); seats_max never below
    the seats the ticket already holds."""
    async with transaction(pool) as conn:
        event, current = await _lock_child(
            conn, actor, _TICKET_GET, _TICKET_LOCK, ticket_id, "ticket"
        )
        new = merge_patch(current, changes, _TICKET_NOT_NULL)
        check_per_order_cap(new["seats_max"], new["limit_max_per_order"])
        if "seats_max" in changes:
            await ensure_cap_covers_taken(conn, event, ticket_id, int(new["seats_max"]))
        row = must(
            await conn.fetchrow(
                _TICKET_UPDATE,
                ticket_id,
                new["name"],
                new["description"],
                new["seats_max"],
                new["limit_max_per_order"],
                new["start_sale_datetime"],
                new["end_sale_datetime"],
                now,
                new["product_ref"],
            )
        )
        await write_audit(
            conn,
            actor,
            "ticket_updated",
            "ticket",
            ticket_id,
            event_id=current["event_id"],
            summary={"fields": sorted(changes)},
        )
        return row


async def delete_ticket(pool: Pool, actor: Actor, ticket_id: UUID) -> None:
    """Delete a ticket nobody registered with (else 409 ticket_has_registrations)."""
    async with transaction(pool) as conn:
        _, current = await _lock_child(conn, actor, _TICKET_GET, _TICKET_LOCK, ticket_id, "ticket")
        await conn.execute(_TICKET_DELETE, ticket_id)
        await write_audit(
            conn, actor, "ticket_deleted", "ticket", ticket_id, event_id=current["event_id"]
        )


# --- slots ---------------------------------------------------------------------------------


async def create_slot(pool: Pool, actor: Actor, cmd: SlotCreate, now: datetime) -> dict[str, Any]:
    """Add a slot to a multi-slot event, inside its dates (event row locked)."""
    async with transaction(pool) as conn:
        event = await lock_event(conn, actor, cmd.event_id)
        if not event["is_multi_slots"]:
            raise errors.EventNotMultiSlots(field="event_id")
        _check_slot(event, cmd.date_begin, cmd.date_end)
        row = must(
            await conn.fetchrow(_SLOT_INSERT, cmd.event_id, cmd.date_begin, cmd.date_end, now)
        )
        await write_audit(conn, actor, "slot_created", "slot", row["id"], event_id=cmd.event_id)
        await reschedule_event(conn, cmd.event_id, now)
        return row


async def get_slot(pool: Pool, actor: Actor, slot_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        row = await conn.fetchrow(_SLOT_GET, slot_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such slot.")
    return dict(row)


async def list_slots(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with connection(pool) as conn:
        rows = await conn.fetch(_SLOT_LIST, event_id, actor.company_id, key, after, size + 1)
    return page([dict(r) for r in rows], size, "date_begin")


async def patch_slot(
    pool: Pool, actor: Actor, slot_id: UUID, changes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Move a slot inside its event's dates (event row, then slot row locked)."""
    async with transaction(pool) as conn:
        event, current = await _lock_child(conn, actor, _SLOT_GET, _SLOT_LOCK, slot_id, "slot")
        new = merge_patch(current, changes, _SLOT_NOT_NULL)
        _check_slot(event, new["date_begin"], new["date_end"])
        row = must(
            await conn.fetchrow(_SLOT_UPDATE, slot_id, new["date_begin"], new["date_end"], now)
        )
        await write_audit(
            conn,
            actor,
            "slot_updated",
            "slot",
            slot_id,
            event_id=current["event_id"],
            summary={"fields": sorted(changes)},
        )
        await reschedule_event(conn, current["event_id"], now)
        return row


async def delete_slot(pool: Pool, actor: Actor, slot_id: UUID) -> None:
    """Delete a slot nobody registered for (else 409 slot_has_registrations)."""
    async with transaction(pool) as conn:
        _, current = await _lock_child(conn, actor, _SLOT_GET, _SLOT_LOCK, slot_id, "slot")
        await conn.execute(_SLOT_DELETE, slot_id)
        await write_audit(
            conn, actor, "slot_deleted", "slot", slot_id, event_id=current["event_id"]
        )
