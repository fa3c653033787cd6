"""The attendee's tickets behind a my-tickets link: the page's view, the tickets PDF of
a link and of one registration (a mail's attachment). A link that is unknown, tampered or
archived, or whose registrations are all gone, answers the uniform 404.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc import capabilities, errors
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connection
from events_svc.documents import TicketPage, render_off_loop, span
from events_svc.verbs.common import in_zone
from events_svc.verbs.events import is_visible
from events_svc.verbs.public.reads import EVENT

_TICKETS_OF = """
SELECT r.id, r.name, r.state::text AS state, r.barcode, r.event_ticket_id, t.name AS ticket_name,
    r.event_slot_id, s.date_begin AS slot_begin, s.date_end AS slot_end
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.id = ANY($1::uuid[]) AND r.event_id = $2 AND r.active
ORDER BY r.created_at, r.id
"""


async def _link_rows(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime
) -> tuple[Any, list[Any]]:
    """The event and the live registrations a my-tickets link names; the uniform 404 for
    an unknown, tampered or archived link, or one whose registrations are all gone."""
    scope = capabilities.open_tickets(codec, token, now)
    if scope is None:
        raise errors.EventNotPublished()
    async with connection(pool) as conn:
        event = await conn.fetchrow(EVENT, scope.event_id)
        rows = await conn.fetch(_TICKETS_OF, list(scope.registration_ids), scope.event_id)
    if event is None or not event["active"] or not rows:
        raise errors.EventNotPublished()
    return event, list(rows)


async def my_tickets(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime, ics_ttl_s: int
) -> dict[str, Any]:
    """The attendee's tickets (archived or moved registrations left out); the answer and
    each registration carry `ics_token`, a fresh calendar link of the event (of its slot
    for a registration with one); the answer's is None while the event is not public
    (its calendar would not open)."""
    event, rows = await _link_rows(pool, codec, token, now)
    event_id = event["id"]
    tz = ZoneInfo(event["date_tz"])
    expires = now + timedelta(seconds=ics_ttl_s)
    # the event's calendar opens only while the event is public: no link that would 404
    public = is_visible(dict(event), now)
    return {
        "ics_token": capabilities.mint_ics(codec, event_id, None, expires) if public else None,
        "event": {
            "id": event["id"],
            "name": event["name"],
            "date_tz": event["date_tz"],
            "date_begin": in_zone(event["date_begin"], tz),
            "date_end": in_zone(event["date_end"], tz),
            "location": event["location"],
            "is_cancelled": event["kanban_state"] == "cancel",
        },
        "registrations": [
            {
                "id": r["id"],
                "name": r["name"],
                "state": r["state"],
                "barcode": r["barcode"],
                "ticket": {"id": r["event_ticket_id"], "name": r["ticket_name"]}
                if r["event_ticket_id"]
                else None,
                "slot": {
                    "id": r["event_slot_id"],
                    "date_begin": in_zone(r["slot_begin"], tz),
                    "date_end": in_zone(r["slot_end"], tz),
                }
                if r["event_slot_id"]
                else None,
                "badge_format": event["badge_format"],
                "ics_token": capabilities.mint_ics(codec, event_id, r["event_slot_id"], expires),
            }
            for r in rows
        ],
    }


PRINTABLE = frozenset({"open", "done"})  # the states a ticket is printed (and scanned) for
_TICKET_OF = """
SELECT r.id, r.event_id, r.name, r.state::text AS state, r.barcode, r.event_ticket_id,
    t.name AS ticket_name, r.event_slot_id, s.date_begin AS slot_begin, s.date_end AS slot_end
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.id = $1 AND r.active
"""


def ticket_pages(event: Any, rows: list[Any]) -> list[TicketPage]:
    """The printable tickets of these registrations (`open` or `done`), in their order."""
    tz = ZoneInfo(event["date_tz"])
    pages = []
    for r in rows:
        if r["state"] not in PRINTABLE:
            continue
        slot = ""
        if r["event_slot_id"]:
            slot = span(in_zone(r["slot_begin"], tz), in_zone(r["slot_end"], tz), event["date_tz"])
        pages.append(
            TicketPage(
                event=event["name"],
                when=span(
                    in_zone(event["date_begin"], tz),
                    in_zone(event["date_end"], tz),
                    event["date_tz"],
                ),
                location=event["location"] or "",
                attendee=r["name"],
                ticket=r["ticket_name"] or "",
                slot=slot,
                barcode=r["barcode"],
            )
        )
    return pages


async def link_tickets(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime
) -> tuple[list[TicketPage], str]:
    """The pages of a my-tickets link's tickets PDF and its title, read and checked before
    anything is rendered: one per `open` or `done` registration (the link's rules as the
    page's: a uniform 404 for an unknown, tampered or archived one); 404
    `no_active_tickets` when none is left."""
    event, rows = await _link_rows(pool, codec, token, now)
    pages = ticket_pages(event, rows)
    if not pages:
        raise errors.NoActiveTickets("None of these registrations holds a ticket now.")
    return pages, f"Tickets · {event['name']}"


async def tickets_pdf(pool: Pool, codec: CapabilityCodec, token: str, now: datetime) -> bytes:
    """The tickets PDF of a my-tickets link (`link_tickets`), rendered off the event loop."""
    pages, title = await link_tickets(pool, codec, token, now)
    return await render_off_loop(pages, title=title)


async def registration_tickets_pdf(pool: Pool, registration_id: UUID) -> bytes:
    """The tickets PDF of one registration (a mail's attachment); 404 `no_active_tickets`
    when it is not `open` or `done` (or no longer active)."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_TICKET_OF, registration_id)
        event = await conn.fetchrow(EVENT, row["event_id"]) if row else None
    pages = ticket_pages(event, [row]) if row is not None and event is not None else []
    if not pages:
        raise errors.NoActiveTickets("This registration holds no ticket now.")
    assert event is not None
    return await render_off_loop(pages, title=f"Tickets · {event['name']}")
