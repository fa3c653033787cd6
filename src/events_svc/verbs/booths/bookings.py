"""Booth bookings: the officer's booking of a booth, the exclusive confirm, and release.

A booking is an intent, born `pending` (on any booth, available or not); confirming one
is the only way a booth becomes `unavailable`. Lock order (see `records`): a booking row
before its booth row. Confirm is ONE transaction that updates the booking first, so
the partial unique index `booths_confirmed_exclusivity` (EBS-1) decides a race: the first
confirm holds the index entry, every concurrent one waits on it and, once the first
commits, fails on it. The loser answers 409 `booth_already_confirmed` with `booth_id`,
and its booking stays `pending` (the transaction rolls back; a human decides). The
availability pre-check only gives the same answer sooner. The winner then marks the booth
`unavailable` and fills its empty contact fields from the booking. Release, the only
way back to `available`, keeps the same order: it deletes the booth's bookings, then
frees the booth row.

An officer's booking that names an order or an order line books for the order of the
officer's company; a platform officer's, for the order of the booth's event's company
(none for a shared event: a platform order), as the sale seam decides (`verbs/sale/
orders`). So only that company's paid fact latches the booth, and its line ids are its own.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, affected, transaction
from events_svc.models.booths import BookingCreate
from events_svc.verbs.audit import write_audit
from events_svc.verbs.booths.lines import insert_bookings
from events_svc.verbs.booths.records import find_booth, read_booth

_FIND = """
SELECT k.id, k.event_booth_id, k.event_id, k.status::text AS status
FROM event.booth_bookings k JOIN event.events e ON e.id = k.event_id
WHERE k.id = $1 AND event.visible_to(e.company_id, $2)
"""
# the nicer error only: the unique index below is the wall
_CONFIRMED_ELSEWHERE = """
SELECT EXISTS (SELECT 1 FROM event.booth_bookings
               WHERE event_booth_id = $1 AND status = 'confirmed' AND id <> $2)
"""
# the booking row first: its index entry decides the race before the booth row is touched
_CONFIRM = """
UPDATE event.booth_bookings SET status = 'confirmed', confirmed_at = $2
WHERE id = $1 AND status = 'pending'
RETURNING contact_name, contact_email, contact_phone
"""
# then the booth row: unavailable, and each empty contact field filled from the booking
_OCCUPY = """
UPDATE event.booths SET state = 'unavailable', updated_at = $5,
    contact_name = CASE WHEN contact_name = '' THEN $2 ELSE contact_name END,
    contact_email = CASE WHEN contact_email = '' THEN $3 ELSE contact_email END,
    contact_phone = CASE WHEN contact_phone = '' THEN $4 ELSE contact_phone END
WHERE id = $1
"""
EXCLUSIVITY = "booths_confirmed_exclusivity"
# release: the booking rows first (deleted), then the booth row (lock order)
_RELEASE_BOOKINGS = "DELETE FROM event.booth_bookings WHERE event_booth_id = $1"
_RELEASE_BOOTH = """
UPDATE event.booths SET state = 'available', updated_at = $2
WHERE id = $1 AND state <> 'available'
"""


async def booking_view(conn: Connection, actor: Actor, booking_id: UUID) -> dict[str, Any]:
    """The booking (unmasked) with its booth's view under `booth`."""
    found = await conn.fetchrow(_FIND, booking_id, actor.company_id)
    if found is None:
        raise errors.NotFound("No such booking.")
    booth = await read_booth(conn, actor, found["event_booth_id"])
    for booking in booth["bookings"]:
        if str(booking["id"]) == str(booking_id):
            return {**booking, "booth": booth}
    raise errors.NotFound("No such booking.")  # released between the two reads


async def book_booth(
    pool: Pool, actor: Actor, booth_id: UUID, cmd: BookingCreate, now: datetime
) -> tuple[dict[str, Any], bool]:
    """A pending booking of the booth: (its view, whether it is new). With an order line:
    one booking per (line, booth) (a repeat answers the first), the line books booths of
    one event only (422 booth_event_mismatch), and the booth latches `sale_linked`."""
    async with transaction(pool) as conn:
        booth = await find_booth(conn, actor, booth_id)
        linked = cmd.order_id is not None or cmd.order_line_id is not None
        company = (actor.company_id or booth["event_company_id"]) if linked else None
        contact = {
            "contact_name": cmd.contact_name,
            "contact_email": cmd.contact_email,
            "contact_phone": cmd.contact_phone,
        }
        (booking_id,), created = await insert_bookings(
            conn,
            [booth_id],
            booth["event_id"],
            order_id=cmd.order_id,
            order_line_id=cmd.order_line_id,
            contact=contact,
            now=now,
            company_id=company,
        )
        if created:
            summary = {"booth_id": str(booth_id), "order_line": cmd.order_line_id is not None}
            await write_audit(
                conn,
                actor,
                "booth_booking_created",
                "booth_booking",
                booking_id,
                event_id=booth["event_id"],
                summary=summary,
            )
        return await booking_view(conn, actor, booking_id), created


async def confirm_booking(
    pool: Pool, actor: Actor, booking_id: UUID, now: datetime
) -> dict[str, Any]:
    """The exclusive confirm (module docstring): booking confirmed, booth unavailable,
    empty contacts filled, in one transaction. Confirming a confirmed booking answers it
    again; the loser of a race gets 409 booth_already_confirmed and stays pending."""
    async with transaction(pool) as conn:
        found = await conn.fetchrow(_FIND, booking_id, actor.company_id)
        if found is None:
            raise errors.NotFound("No such booking.")
        booth_id = found["event_booth_id"]
        if found["status"] == "confirmed":
            return await booking_view(conn, actor, booking_id)
        if await conn.fetchval(_CONFIRMED_ELSEWHERE, booth_id, booking_id):
            raise errors.BoothAlreadyConfirmed(booth_id=str(booth_id))
        try:
            row = await conn.fetchrow(_CONFIRM, booking_id, now)
        except asyncpg.UniqueViolationError as exc:
            if exc.constraint_name != EXCLUSIVITY:
                raise
            raise errors.BoothAlreadyConfirmed(booth_id=str(booth_id)) from None
        if row is None:  # a concurrent twin confirmed it, or a release deleted it
            return await booking_view(conn, actor, booking_id)
        await conn.execute(
            _OCCUPY, booth_id, row["contact_name"], row["contact_email"], row["contact_phone"], now
        )
        await write_audit(
            conn,
            actor,
            "booth_booking_confirmed",
            "booth_booking",
            booking_id,
            event_id=found["event_id"],
            summary={"booth_id": str(booth_id)},
        )
        return await booking_view(conn, actor, booking_id)


async def release_booth(pool: Pool, actor: Actor, booth_id: UUID, now: datetime) -> dict[str, Any]:
    """The only way back to available: deletes the booth's bookings (rows first), then
    frees the booth; `is_paid`, `sale_linked` and the contacts survive."""
    async with transaction(pool) as conn:
        found = await find_booth(conn, actor, booth_id)
        deleted = affected(await conn.execute(_RELEASE_BOOKINGS, booth_id))
        freed = affected(await conn.execute(_RELEASE_BOOTH, booth_id, now))
        if deleted or freed:
            await write_audit(
                conn,
                actor,
                "booth_released",
                "booth",
                booth_id,
                event_id=found["event_id"],
                summary={"bookings_deleted": deleted, "was_unavailable": bool(freed)},
            )
        return await read_booth(conn, actor, booth_id)
