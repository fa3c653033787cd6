"""Booths: the booths of an event (create, read, list, patch, delete), the order-line
bookings the sale seam makes inside its own transaction (`book_for_order_line`) and the
paid latch (`latch_paid_booths`). The officer's booking route, the exclusive confirm and
release live in `bookings`, the order-line writes they share in `lines`, categories in
`categories`.

Lock order: the event row first (`FOR NO KEY UPDATE`, by create, patch and delete, which
also fences them by the event's company), then a booth's booking rows, then the booth row.
Confirm updates its booking first, so the partial unique index
`booths_confirmed_exclusivity` decides a race before anyone waits on the booth row; release
deletes the bookings, then updates the booth; the seam's latches lock booth rows in id
order. A booth follows its event's company fence: another company's booth is 404.

Latches: `sale_linked` turns true when an order line first books the booth (it then can
never be deleted: the sale link is history); `is_paid` turns true when the order of one of
its bookings is paid; neither ever turns back, and release keeps both and the contacts.
An order is (company, order id) (`verbs/sale/orders`): a booking records its order's
company, and the paid latch of one company's order never reaches a booking of another
company's order of the same id, nor a booth the paying actor cannot see.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models.booths import BoothCreate
from events_svc.verbs.audit import write_audit
from events_svc.verbs.booths.lines import insert_bookings
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.fence import lock_event
from events_svc.verbs.pii import mask_email, mask_name, mask_phone

_GET = """
SELECT b.* FROM event.booth_view b JOIN event.events e ON e.id = b.event_id
WHERE b.id = $1 AND event.visible_to(e.company_id, $2)
"""
_FIND = """
SELECT b.id, b.event_id, e.company_id AS event_company_id
FROM event.booths b JOIN event.events e ON e.id = b.event_id
WHERE b.id = $1 AND event.visible_to(e.company_id, $2)
"""
_LIST = """
SELECT b.* FROM event.booth_view b JOIN event.events e ON e.id = b.event_id
WHERE ($1::uuid IS NULL OR b.event_id = $1)
  AND event.visible_to(e.company_id, $2)
  AND ($3::text IS NULL OR b.state = $3)
  AND ($4::timestamptz IS NULL OR (b.created_at, b.id) > ($4, $5::uuid))
ORDER BY b.created_at, b.id LIMIT $6
"""
_EVENT_VISIBLE = """
SELECT EXISTS (SELECT 1 FROM event.events WHERE id = $1 AND event.visible_to(company_id, $2))
"""
_CATEGORY_EXISTS = "SELECT EXISTS (SELECT 1 FROM event.booth_categories WHERE id = $1)"
_INSERT = """
INSERT INTO event.booths (event_id, name, booth_category_id, contact_name, contact_email,
    contact_phone, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $7) RETURNING id
"""
# after the event row (lock order); FOR UPDATE on delete keeps new bookings (their FK
# takes KEY SHARE) out until the fences are decided
_LOCK_FOR_PATCH = "SELECT * FROM event.booths WHERE id = $1 FOR NO KEY UPDATE"
_LOCK_FOR_DELETE = "SELECT * FROM event.booths WHERE id = $1 FOR UPDATE"
_UPDATE = """
UPDATE event.booths SET name = $2, booth_category_id = $3, contact_name = $4,
    contact_email = $5, contact_phone = $6, updated_at = $7
WHERE id = $1
"""
_HAS_BOOKINGS = "SELECT EXISTS (SELECT 1 FROM event.booth_bookings WHERE event_booth_id = $1)"
_DELETE = "DELETE FROM event.booths WHERE id = $1"

# --- order lines (the seam's calls and the officer's booking route) ----------------------
# the booths the actor sees (another company's booth answers like a missing one)
_BOOTH_EVENTS = """
SELECT b.id, b.event_id FROM event.booths b JOIN event.events e ON e.id = b.event_id
WHERE b.id = ANY($1::uuid[]) AND event.visible_to(e.company_id, $2)
"""
# the booths booked by this company's order, on events the actor sees; booth rows locked in
# id order (two orders never wait on each other in opposite orders)
_LATCH_PAID = """
WITH target AS (
    SELECT b.id, b.is_paid FROM event.booths b JOIN event.events e ON e.id = b.event_id
    WHERE b.id IN (SELECT k.event_booth_id FROM event.booth_bookings k
                   WHERE k.order_id = $1 AND k.order_company_id IS NOT DISTINCT FROM $3)
      AND event.visible_to(e.company_id, $4)
    ORDER BY b.id FOR NO KEY UPDATE OF b),
latched AS (
    UPDATE event.booths b SET is_paid = true, updated_at = coalesce($2::timestamptz, now())
    FROM target t WHERE b.id = t.id AND NOT t.is_paid)
SELECT id FROM target ORDER BY id
"""

_NOT_NULL = frozenset({"name", "booth_category_id"})
_CONTACTS = ("contact_name", "contact_email", "contact_phone")
_WRITABLE = ("name", "booth_category_id", *_CONTACTS)


# --- views and masking ---------------------------------------------------------------------


def mask_booking(booking: Mapping[str, Any]) -> dict[str, Any]:
    """A booking's contacts masked as attendees' are (name, email, phone)."""
    masked = dict(booking)
    masked["contact_name"] = mask_name(booking.get("contact_name") or "")
    masked["contact_email"] = mask_email(booking.get("contact_email") or "")
    masked["contact_phone"] = mask_phone(booking.get("contact_phone") or "")
    return masked


def shown(view: Mapping[str, Any], full: bool) -> dict[str, Any]:
    """A booth view as answered: its contacts and its bookings' masked unless `full` (the
    confirm copies a booking's contacts onto its booth)."""
    if full:
        return dict(view)
    out = mask_booking(view)
    out["bookings"] = [mask_booking(b) for b in view["bookings"]]
    return out


async def read_booth(conn: Connection, actor: Actor, booth_id: UUID) -> dict[str, Any]:
    """The booth's view (with its bookings) inside the actor's fence; 404 otherwise."""
    row = await conn.fetchrow(_GET, booth_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such booth.")
    return dict(row)


async def find_booth(conn: Connection, actor: Actor, booth_id: UUID) -> dict[str, Any]:
    """The booth's id and event inside the actor's fence (no lock); 404 otherwise."""
    row = await conn.fetchrow(_FIND, booth_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such booth.")
    return dict(row)


async def _audit_pii_read(
    conn: Connection, actor: Actor, booths: list[dict[str, Any]], event_id: UUID | None
) -> None:
    bookings = sum(len(b["bookings"]) for b in booths)
    if booths:
        await write_audit(
            conn,
            actor,
            "booth_pii_read",
            "booth",
            booths[0]["id"] if len(booths) == 1 else None,
            event_id=event_id,
            summary={"booths": len(booths), "bookings": bookings},
        )


# --- booths --------------------------------------------------------------------------------


async def _check_category(conn: Connection, category_id: UUID) -> None:
    if not await conn.fetchval(_CATEGORY_EXISTS, category_id):
        raise errors.ReferenceNotFound("No such booth category.", field="booth_category_id")


async def create_booth(pool: Pool, actor: Actor, cmd: BoothCreate, now: datetime) -> dict[str, Any]:
    """A new booth of an event (event row locked): born available and unpaid."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, cmd.event_id)
        await _check_category(conn, cmd.booth_category_id)
        booth_id = await conn.fetchval(
            _INSERT,
            cmd.event_id,
            cmd.name,
            cmd.booth_category_id,
            cmd.contact_name,
            cmd.contact_email,
            cmd.contact_phone,
            now,
        )
        await write_audit(conn, actor, "booth_created", "booth", booth_id, event_id=cmd.event_id)
        return await read_booth(conn, actor, booth_id)


async def get_booth(
    pool: Pool, actor: Actor, booth_id: UUID, *, pii_full: bool = False
) -> dict[str, Any]:
    """One booth with its bookings; a full read (unmasked contacts) is audited."""
    async with transaction(pool) as conn:
        view = await read_booth(conn, actor, booth_id)
        if pii_full:
            await _audit_pii_read(conn, actor, [view], view["event_id"])
    return shown(view, pii_full)


async def list_booths(
    pool: Pool,
    actor: Actor,
    *,
    event_id: UUID | None = None,
    state: str | None = None,
    pii_full: bool = False,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Booths by creation (keyset), of one event or of every event the actor sees."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        if event_id is not None and not await conn.fetchval(
            _EVENT_VISIBLE, event_id, actor.company_id
        ):
            raise errors.NotFound("No such event.")
        rows = await conn.fetch(_LIST, event_id, actor.company_id, state, key, after, size + 1)
        items = [dict(r) for r in rows]
        if pii_full:
            await _audit_pii_read(conn, actor, items[:size], event_id)
    return page([shown(i, pii_full) for i in items], size, "created_at")


async def _lock_booth(
    conn: Connection, actor: Actor, booth_id: UUID, lock_sql: str
) -> dict[str, Any]:
    """Event row, then the booth row (lock order), inside the actor's fence."""
    found = await find_booth(conn, actor, booth_id)
    await lock_event(conn, actor, found["event_id"])
    row = await conn.fetchrow(lock_sql, booth_id)
    if row is None:
        raise errors.NotFound("No such booth.")
    return dict(row)


async def patch_booth(
    pool: Pool, actor: Actor, booth_id: UUID, changes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Write the fields sent (a null contact clears it); state, is_paid and the event are
    not writable here."""
    changes = {k: ("" if v is None and k in _CONTACTS else v) for k, v in changes.items()}
    async with transaction(pool) as conn:
        current = await _lock_booth(conn, actor, booth_id, _LOCK_FOR_PATCH)
        new = merge_patch(current, changes, _NOT_NULL)
        changed = sorted(f for f in _WRITABLE if new[f] != current[f])
        if "booth_category_id" in changed:
            await _check_category(conn, new["booth_category_id"])
        if changed:
            await conn.execute(_UPDATE, booth_id, *(new[f] for f in _WRITABLE), now)
            await write_audit(
                conn,
                actor,
                "booth_updated",
                "booth",
                booth_id,
                event_id=current["event_id"],
                summary={"fields": changed},
            )
        return await read_booth(conn, actor, booth_id)


async def delete_booth(pool: Pool, actor: Actor, booth_id: UUID) -> None:
    """Delete a booth: never once an order line booked it (409 booth_sale_linked), and not
    while it has bookings (409 booth_has_bookings: release first). The RESTRICT key of
    the bookings is the wall behind the second fence."""
    async with transaction(pool) as conn:
        current = await _lock_booth(conn, actor, booth_id, _LOCK_FOR_DELETE)
        if current["sale_linked"]:
            raise errors.BoothSaleLinked(booth_id=str(booth_id))
        if await conn.fetchval(_HAS_BOOKINGS, booth_id):
            raise errors.BoothHasBookings(booth_id=str(booth_id))
        await conn.execute(_DELETE, booth_id)
        await write_audit(
            conn, actor, "booth_deleted", "booth", booth_id, event_id=current["event_id"]
        )


# --- order lines -----------------------------------------------------------------------------


async def book_for_order_line(
    conn: Connection,
    *,
    booth_ids: list[UUID],
    event_id: UUID,
    order_id: UUID,
    order_line_id: UUID,
    contact: dict[str, str] | None,
    now: datetime,
    company_id: UUID | None = None,
    viewer: UUID | None = None,
) -> list[UUID]:
    """The sale seam's booking, inside the seam's own transaction: one pending booking per
    booth for this order line of the order of `company_id` (None: a platform order;
    idempotent per company, line and booth, EBS-2), the booths latch `sale_linked`;
    answers the booking ids in booth order. Refusals: 422 `booth_not_found` (an unknown
    booth id, or a booth the actor of company `viewer` cannot see), 422
    `booth_event_mismatch` (a booth of another event, or a line of this company that
    already booked booths of another event, EBS-4). `contact` holds `name`, `email`,
    `phone` (or their `contact_` forms). It writes no audit row: the seam audits its fact.
    """
    wanted = list(dict.fromkeys(booth_ids))
    if not wanted:
        return []
    events = {r["id"]: r["event_id"] for r in await conn.fetch(_BOOTH_EVENTS, wanted, viewer)}
    for booth in wanted:
        if booth not in events:
            raise errors.BoothNotFound(field="booth_ids", booth_id=str(booth))
        if events[booth] != event_id:
            raise errors.BoothEventMismatch(
                "A booth of another event was named.", field="booth_ids", booth_id=str(booth)
            )
    ids, _ = await insert_bookings(
        conn,
        wanted,
        event_id,
        order_id=order_id,
        order_line_id=order_line_id,
        contact=contact,
        now=now,
        company_id=company_id,
    )
    return ids


async def latch_paid_booths(
    conn: Connection,
    order_id: UUID,
    *,
    now: datetime | None = None,
    company_id: UUID | None = None,
    viewer: UUID | None = None,
) -> list[UUID]:
    """The paid fact's latch, inside the seam's transaction: `is_paid = true` (one-way; it
    survives release) on every booth with a booking of the order (`company_id`, order id;
    None: a platform order) that the actor of company `viewer` sees; answers those booth
    ids, sorted. Booth rows are locked in id order."""
    rows = await conn.fetch(_LATCH_PAID, order_id, now, company_id, viewer)
    return [r["id"] for r in rows]
