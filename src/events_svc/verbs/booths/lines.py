"""Order-line bookings: the writes the seam's `book_for_order_line` (in `records`) and the
officer's booking route (in `bookings`) share. The callers have checked that every
booth is of `event_id`, inside their own transaction.

An order line is its order's: (company, order line id), like the order (`verbs/sale/
orders`; None: a platform order). Two companies using one line id have two lines, and
one company's claim never refuses or answers the other's. EBS-4: the first booking of a
(company, order line) claims it for its event in `event.booth_order_lines` (`INSERT ..
ON CONFLICT DO NOTHING`, then compare: a concurrent claim waits for the first and then
reads it); the bookings' composite key onto that claim is the wall. EBS-2: one booking
per (company, order line, booth), answered again on a repeat. Each booking records its
order's company (`order_company_id`), which the paid latch matches. The booths latch
`sale_linked`, locked in id order. Lock order (see `records`): the new booking rows, then
the booth rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from uuid import UUID

from events_svc import errors
from events_svc.db import Connection, affected

# EBS-4: the line's first booking claims it for its event; a later one compares. Every
# unique key of the table arbitrates (no conflict target): two bookings of the same line
# and event racing collide on the pkey and on (line, event) at once, and a single arbiter
# would let the second key's violation through
_CLAIM_LINE = """
INSERT INTO event.booth_order_lines (company_id, order_line_id, event_id, order_id, created_at)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING
"""
_LINE_EVENT = """
SELECT event_id FROM event.booth_order_lines
WHERE order_line_id = $2 AND company_id IS NOT DISTINCT FROM $1
"""
# EBS-2: one booking per (company, order line, booth); a repeat is a no-op
_INSERT_LINE_BOOKINGS = """
INSERT INTO event.booth_bookings (event_booth_id, event_id, order_id, order_line_id,
    contact_name, contact_email, contact_phone, created_at, order_company_id)
SELECT t.booth_id, $2, $3, $4, $5, $6, $7, $8, $9
FROM unnest($1::uuid[]) WITH ORDINALITY AS t(booth_id, n) ORDER BY t.n
ON CONFLICT ON CONSTRAINT booth_bookings_order_line_booth_key DO NOTHING
"""
_LINE_BOOKINGS = """
SELECT id, event_booth_id FROM event.booth_bookings
WHERE order_line_id = $1 AND event_booth_id = ANY($2::uuid[])
  AND order_company_id IS NOT DISTINCT FROM $3
"""
_INSERT_BOOKING = """
INSERT INTO event.booth_bookings (event_booth_id, event_id, order_id, contact_name,
    contact_email, contact_phone, created_at, order_company_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id
"""
# the latches lock their booth rows in id order (two orders never wait on each other in
# opposite orders)
_LATCH_LINKED = """
WITH locked AS (
    SELECT id FROM event.booths WHERE id = ANY($1::uuid[]) AND NOT sale_linked
    ORDER BY id FOR NO KEY UPDATE)
UPDATE event.booths b SET sale_linked = true, updated_at = $2 FROM locked WHERE b.id = locked.id
"""


def contact_fields(contact: Mapping[str, str] | None) -> tuple[str, str, str]:
    """(name, email, phone) of a booking contact given as `name`/`email`/`phone` or as
    `contact_name`/`contact_email`/`contact_phone`; missing parts are empty."""
    c = contact or {}
    return (
        c.get("contact_name", c.get("name", "")) or "",
        c.get("contact_email", c.get("email", "")) or "",
        c.get("contact_phone", c.get("phone", "")) or "",
    )


async def claim_order_line(
    conn: Connection,
    order_line_id: UUID,
    event_id: UUID,
    order_id: UUID | None,
    now: datetime,
    *,
    company_id: UUID | None,
) -> None:
    """EBS-4: pin the company's order line to `event_id` (first booking wins,
    concurrency-safe through the claim row's key); a line of this company already pinned
    to another event is refused (another company's line of the same id is another line)."""
    await conn.execute(_CLAIM_LINE, company_id, order_line_id, event_id, order_id, now)
    if await conn.fetchval(_LINE_EVENT, company_id, order_line_id) != event_id:
        raise errors.BoothEventMismatch(
            "This order line already booked booths of another event.", field="order_line_id"
        )


async def insert_bookings(
    conn: Connection,
    booth_ids: list[UUID],
    event_id: UUID,
    *,
    order_id: UUID | None,
    order_line_id: UUID | None,
    contact: Mapping[str, str] | None,
    now: datetime,
    company_id: UUID | None,
) -> tuple[list[UUID], bool]:
    """Pending bookings of booths of `event_id` (checked by the caller): (their ids in
    booth order, whether any is new). `company_id` is the company of the booking's order
    (None: a platform order). With an order line: the company's line is claimed for the
    event, a booking already made for (company, line, booth) is answered again, and the
    booths latch `sale_linked`."""
    name, email, phone = contact_fields(contact)
    if order_line_id is None:
        ids = [
            await conn.fetchval(
                _INSERT_BOOKING, booth, event_id, order_id, name, email, phone, now, company_id
            )
            for booth in booth_ids
        ]
        return ids, bool(ids)
    await claim_order_line(conn, order_line_id, event_id, order_id, now, company_id=company_id)
    status = await conn.execute(
        _INSERT_LINE_BOOKINGS,
        booth_ids,
        event_id,
        order_id,
        order_line_id,
        name,
        email,
        phone,
        now,
        company_id,
    )
    by_booth = {
        r["event_booth_id"]: r["id"]
        for r in await conn.fetch(_LINE_BOOKINGS, order_line_id, booth_ids, company_id)
    }
    await conn.execute(_LATCH_LINKED, booth_ids, now)
    return [by_booth[b] for b in booth_ids], affected(status) > 0
