"""Badges of an event, printed as one streamed PDF in the event's `badge_format`.

`start_badges` checks everything before a byte is sent: the event (404 when the actor
cannot see it), the filters (a ticket, slot or registration of another event: 422 with
the API's code), the count (at most `MAX_BADGES`: 422 `too_many_badges` with `count`
and `limit`), and writes the audit row (`badges_printed`: the format, the filters and
the count, never a name), committed before the stream starts, like an export. A caller
that renders under a bound passes `admitted`: awaited between the checks and the audit
row, with no connection held (a print refused there is checked, never audited). The
stream then reads the rows by keyset pages of `PAGE_ROWS` (each a short query, no
connection held between them; never more badges than were counted and audited) and
renders each page of rows in a worker thread, so memory stays flat in the number of
badges and the event loop keeps serving. Filters that keep no registration print one
page that says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Pool, connection, transaction
from events_svc.documents import Badge, BadgeWriter
from events_svc.verbs.audit import write_audit

MAX_BADGES = 5000
PAGE_ROWS = 200
DEFAULT_STATES = ("open", "done")

_EVENT = """
SELECT id, name, badge_format::text AS badge_format FROM event.events e
WHERE e.id = $1 AND event.visible_to(e.company_id, $2)
"""
_TICKET = "SELECT event_id FROM event.tickets WHERE id = $1"
_SLOT = "SELECT event_id FROM event.slots WHERE id = $1"
_FOREIGN_REGISTRATIONS = """
SELECT count(*) FROM unnest($1::uuid[]) AS i(id)
WHERE NOT EXISTS (SELECT 1 FROM event.registrations r WHERE r.id = i.id AND r.event_id = $2)
"""
# the event's active registrations the filters keep (null filter: any)
_COUNT = """
SELECT count(*) FROM event.registrations r
WHERE r.event_id = $1 AND r.active AND r.state::text = ANY($2::text[])
  AND ($3::uuid IS NULL OR r.event_ticket_id = $3)
  AND ($4::uuid IS NULL OR r.event_slot_id = $4)
  AND (cardinality($5::uuid[]) = 0 OR r.id = ANY($5::uuid[]))
"""
_PAGE = """
SELECT r.id, r.name, coalesce(r.company_name, '') AS company, coalesce(t.name, '') AS ticket,
    r.barcode, lower(r.name) AS sort_key
FROM event.registrations r LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
WHERE r.event_id = $1 AND r.active AND r.state::text = ANY($2::text[])
  AND ($3::uuid IS NULL OR r.event_ticket_id = $3)
  AND ($4::uuid IS NULL OR r.event_slot_id = $4)
  AND (cardinality($5::uuid[]) = 0 OR r.id = ANY($5::uuid[]))
  AND ($6::text IS NULL OR (lower(r.name), r.id) > ($6, $7::uuid))
ORDER BY lower(r.name), r.id
LIMIT $8
"""


@dataclass(frozen=True)
class BadgeFilters:
    states: tuple[str, ...] = DEFAULT_STATES
    ticket_id: UUID | None = None
    slot_id: UUID | None = None
    registration_ids: tuple[UUID, ...] = ()

    def args(self) -> tuple[Any, ...]:
        return (list(self.states), self.ticket_id, self.slot_id, list(self.registration_ids))

    def summary(self) -> dict[str, Any]:
        return {
            "states": list(self.states),
            "event_ticket_id": str(self.ticket_id) if self.ticket_id else None,
            "event_slot_id": str(self.slot_id) if self.slot_id else None,
            "registrations": len(self.registration_ids),
        }


@dataclass
class BadgeSheet:
    """A checked, audited badge print: its format, its count, its stream of bytes."""

    event_id: UUID
    event_name: str
    badge_format: str
    count: int
    filters: BadgeFilters
    pool: Pool

    async def chunks(self) -> AsyncIterator[bytes]:
        """The PDF's bytes: each page of rows rendered in a worker thread."""
        title = f"Badges · {self.event_name}"
        writer = await asyncio.to_thread(BadgeWriter, self.badge_format, title)
        yield writer.start()
        left = self.count  # what was counted, checked and audited is what prints
        async for rows in badge_rows(self):
            batch = rows[:left]
            left -= len(batch)
            if batch:
                yield await asyncio.to_thread(writer.add, batch)
            if left <= 0:
                break
        yield await asyncio.to_thread(writer.finish)


async def start_badges(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    filters: BadgeFilters,
    admitted: Callable[[], Awaitable[object]] | None = None,
) -> BadgeSheet:
    """Check, count and audit a badge print (see the module docstring); `admitted` is
    awaited after the checks, before the audit row."""
    event, count = await _checked(pool, actor, event_id, filters)
    if admitted is not None:
        await admitted()
    summary = {"format": event["badge_format"], "count": count, **filters.summary()}
    async with transaction(pool) as conn:
        await write_audit(
            conn, actor, "badges_printed", "event", event_id, event_id=event_id, summary=summary
        )
    return BadgeSheet(event_id, event["name"], event["badge_format"], count, filters, pool)


async def _checked(
    pool: Pool, actor: Actor, event_id: UUID, filters: BadgeFilters
) -> tuple[Any, int]:
    """(the event, the badges' count) once every check passed."""
    async with connection(pool) as conn:
        event = await conn.fetchrow(_EVENT, event_id, actor.company_id)
        if event is None:
            raise errors.NotFound("No such event.")
        ticket_event = filters.ticket_id and await conn.fetchval(_TICKET, filters.ticket_id)
        if filters.ticket_id is not None and ticket_event != event_id:
            raise errors.TicketNotInEvent(
                "The ticket is not a ticket of this event.", field="event_ticket_id"
            )
        slot_event = filters.slot_id and await conn.fetchval(_SLOT, filters.slot_id)
        if filters.slot_id is not None and slot_event != event_id:
            raise errors.SlotNotInEvent(
                "The slot is not a slot of this event.", field="event_slot_id"
            )
        if filters.registration_ids:
            foreign = await conn.fetchval(
                _FOREIGN_REGISTRATIONS, list(filters.registration_ids), event_id
            )
            if foreign:
                raise errors.RegistrationNotInEvent(
                    "A registration named is not a registration of this event.",
                    field="registration_id",
                )
        count = int(await conn.fetchval(_COUNT, event_id, *filters.args()))
        if count > MAX_BADGES:
            raise errors.TooManyBadges(
                f"{count} badges: one sheet holds at most {MAX_BADGES}; filter it.",
                count=count,
                limit=MAX_BADGES,
            )
    return event, count


async def badge_rows(sheet: BadgeSheet) -> AsyncIterator[list[Badge]]:
    """The sheet's badges by pages of `PAGE_ROWS`, in name order."""
    key: str | None = None
    after: UUID | None = None
    while True:
        async with connection(sheet.pool) as conn:
            rows = await conn.fetch(
                _PAGE, sheet.event_id, *sheet.filters.args(), key, after, PAGE_ROWS
            )
        if not rows:
            return
        yield [
            Badge(sheet.event_name, r["name"], r["company"], r["ticket"], r["barcode"])
            for r in rows
        ]
        key, after = rows[-1]["sort_key"], rows[-1]["id"]  # PostgreSQL's lower(), not Python's
        if len(rows) < PAGE_ROWS:
            return
