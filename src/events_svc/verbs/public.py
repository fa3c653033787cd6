"""The public surface's verbs: minting capability links (admin), the calendar
document, the attendee's tickets, and resolving what an intake request may
register for.

Public reads answer one uniform 404 (`event_not_published`, the same body) for a
token that is tampered, expired, of another purpose or signed by a removed
secret, and for an event that is missing, unpublished or archived, or a slot of
another event: nothing tells one case from another. Public reads write nothing.
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from icalendar import Calendar, vCalAddress
from icalendar import Event as VEvent

from events_svc import errors
from events_svc.actors import Actor
from events_svc.capabilities import ICS, INTAKE, MY_TICKETS, CapabilityCodec
from events_svc.db import Pool, connection, transaction
from events_svc.documents import TicketPage, render_off_loop, span
from events_svc.models import AttendeeInput
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import in_zone
from events_svc.verbs.events import is_visible
from events_svc.verbs.fence import get_event_row
from events_svc.verbs.registrations import Registered, register

PUBLIC_INTAKE = Actor(id="public-intake", kind="public")

_EVENT = """
SELECT id, name, description, date_begin, date_end, date_tz, location, event_url,
    kanban_state::text AS kanban_state, is_published, date_publish, active, ics_sequence,
    updated_at, badge_format::text AS badge_format
FROM event.events WHERE id = $1
"""
_SLOT = "SELECT id, date_begin, date_end FROM event.slots WHERE id = $1 AND event_id = $2"
_OWN_REGISTRATIONS = """
SELECT count(*) FROM event.registrations WHERE id = ANY($1::uuid[]) AND event_id = $2
"""
_TICKETS_OF = """
SELECT r.id, r.name, r.state::text AS state, r.barcode, r.event_ticket_id, t.name AS ticket_name,
    r.event_slot_id, s.date_begin AS slot_begin, s.date_end AS slot_end
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.id = ANY($1::uuid[]) AND r.event_id = $2 AND r.active
ORDER BY r.created_at, r.id
"""


async def _audit_mint(pool: Pool, actor: Actor, event_id: UUID, summary: dict[str, Any]) -> None:
    async with transaction(pool) as conn:
        await write_audit(
            conn, actor, "capability_minted", "event", event_id, event_id=event_id, summary=summary
        )


async def mint_ics(
    pool: Pool,
    actor: Actor,
    codec: CapabilityCodec,
    event_id: UUID,
    slot_id: UUID | None,
    ttl_s: int,
    now: datetime,
) -> tuple[str, datetime]:
    """A calendar link for an event (or one of its slots); the token is never stored."""
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        if slot_id is not None and await conn.fetchrow(_SLOT, slot_id, event_id) is None:
            raise errors.SlotNotInEvent(field="slot_id")
    expires = now + timedelta(seconds=ttl_s)
    payload = {"e": str(event_id), "s": str(slot_id) if slot_id else None}
    token = codec.mint(ICS, payload, expires)
    await _audit_mint(
        pool,
        actor,
        event_id,
        {"purpose": ICS, "expires_at": expires.isoformat(), "slot": slot_id is not None},
    )
    return token, expires


async def mint_my_tickets(
    pool: Pool, actor: Actor, codec: CapabilityCodec, event_id: UUID, registration_ids: list[UUID]
) -> str:
    """A never-expiring link to the tickets of these registrations (all of this event).
    The link shows their full names, so minting it needs `registration:pii` (403
    missing_scope, before anything is read; the route asks it too) and the audit row
    names the registrations it discloses."""
    if not actor.has("registration:pii"):
        raise errors.MissingScope(
            "A my-tickets link shows full names: it needs the registration:pii scope.",
            scope="registration:pii",
        )
    ids = sorted(set(registration_ids))
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        if await conn.fetchval(_OWN_REGISTRATIONS, ids, event_id) != len(ids):
            raise errors.RegistrationNotInEvent(field="registration_ids")
    token = tickets_token(codec, event_id, ids)
    summary = {"purpose": MY_TICKETS, "registrations": len(ids), "ids": [str(i) for i in ids]}
    await _audit_mint(pool, actor, event_id, summary)
    return token


def tickets_token(codec: CapabilityCodec, event_id: UUID, ids: list[UUID]) -> str:
    """The my-tickets token of these registrations (sorted: one link per set)."""
    return codec.mint(MY_TICKETS, {"e": str(event_id), "r": sorted(str(i) for i in ids)}, None)


async def mint_intake(
    pool: Pool, actor: Actor, codec: CapabilityCodec, event_id: UUID, ttl_s: int, now: datetime
) -> tuple[str, datetime]:
    """A private registration link: it also admits an unpublished event."""
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
    expires = now + timedelta(seconds=ttl_s)
    token = codec.mint(INTAKE, {"e": str(event_id)}, expires)
    await _audit_mint(pool, actor, event_id, {"purpose": INTAKE, "expires_at": expires.isoformat()})
    return token, expires


def _event_id(payload: dict[str, Any] | None) -> UUID:
    try:
        return UUID(str(payload["e"])) if payload else _missing()
    except (KeyError, ValueError):
        return _missing()


def _missing() -> UUID:
    raise errors.EventNotPublished()


async def calendar(pool: Pool, codec: CapabilityCodec, token: str, now: datetime) -> bytes:
    """The iCalendar document a valid ics link opens (the uniform 404 otherwise)."""
    payload = codec.open(ICS, token, now)
    event_id = _event_id(payload)
    assert payload is not None
    async with connection(pool) as conn:
        row = await conn.fetchrow(_EVENT, event_id)
        slot = None
        if row is not None and payload.get("s"):
            try:
                slot = await conn.fetchrow(_SLOT, UUID(str(payload["s"])), event_id)
            except ValueError:
                slot = None
            if slot is None:
                raise errors.EventNotPublished()
    if row is None or not is_visible(dict(row), now):
        raise errors.EventNotPublished()
    return build_calendar(dict(row), dict(slot) if slot else None)


_ZONED_SPAN = timedelta(days=3660)


def build_calendar(
    event: dict[str, Any],
    slot: dict[str, Any] | None,
    *,
    method: str = "PUBLISH",
    sequence: int | None = None,
    parties: tuple[str, str] | None = None,
) -> bytes:
    """VCALENDAR with one VEVENT in the event's zone (with its VTIMEZONE). At the edges
    of the calendar (local times before year 1 or after 9999, or a VTIMEZONE that cannot
    be computed there) the same instants are written in UTC, which always exists.

    The public calendar is `PUBLISH` at the event's `ics_sequence`; the trigger
    dispatcher's `REQUEST` (new times) and `CANCEL` carry the trigger's `sequence` and
    name the (organizer, attendee) addresses in `parties`, as RFC 5546 asks of them. The
    UID is the same in all of them, so a calendar client updates its one entry."""
    begin, end = (
        (slot["date_begin"], slot["date_end"]) if slot else (event["date_begin"], event["date_end"])
    )
    write = functools.partial(
        _calendar, event, slot, method=method, sequence=sequence, parties=parties
    )
    zone = ZoneInfo(event["date_tz"])
    local = (in_zone(begin, zone), in_zone(end, zone))
    # a VTIMEZONE grows with every year of rules it spans: past a decade, UTC is exact
    if any(value.tzinfo is not zone for value in local) or end - begin > _ZONED_SPAN:
        return write(begin.astimezone(UTC), end.astimezone(UTC), None)
    try:
        return write(*local, zone)
    except (OverflowError, ValueError):
        return write(begin.astimezone(UTC), end.astimezone(UTC), None)


def _calendar(
    event: dict[str, Any],
    slot: dict[str, Any] | None,
    begin: datetime,
    end: datetime,
    zone: tzinfo | None,
    *,
    method: str,
    sequence: int | None,
    parties: tuple[str, str] | None,
) -> bytes:
    cal = Calendar()
    cal.add("prodid", "-//events-svc//events-svc//EN")
    cal.add("version", "2.0")
    cal.add("method", method)
    item = VEvent()
    uid = f"{event['id']}@events-svc" if slot is None else f"{slot['id']}.{event['id']}@events-svc"
    item.add("uid", uid)
    item.add("dtstamp", event["updated_at"])  # the last change, stable across reads
    item.add("sequence", event["ics_sequence"] if sequence is None else sequence)
    if parties is not None:
        item.add("organizer", vCalAddress(f"mailto:{parties[0]}"))
        item.add("attendee", vCalAddress(f"mailto:{parties[1]}"))
    item.add("dtstart", begin)
    item.add("dtend", end)
    item.add("summary", event["name"])
    if event["description"]:
        item.add("description", event["description"])
    if event["location"]:
        item.add("location", event["location"])
    if event["event_url"]:
        item.add("url", event["event_url"])
    item.add("status", "CANCELLED" if event["kanban_state"] == "cancel" else "CONFIRMED")
    cal.add_component(item)
    if zone is not None and event["date_tz"] != "UTC":
        # the VTIMEZONE covers the event's own dates (the default window is 1970-2038)
        last = end.date() + timedelta(days=1) if end.date() < date.max else date.max
        cal.add_missing_timezones(first_date=begin.date(), last_date=last)
    body: bytes = cal.to_ical()
    return body


async def _link_rows(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime
) -> tuple[Any, list[Any]]:
    """The event and the live registrations a my-tickets link names; the uniform 404 for
    an unknown, tampered or archived link, or one whose registrations are all gone."""
    payload = codec.open(MY_TICKETS, token, now)
    event_id = _event_id(payload)
    assert payload is not None
    try:
        ids = [UUID(str(i)) for i in payload.get("r", [])]
    except ValueError:
        raise errors.EventNotPublished() from None
    async with connection(pool) as conn:
        event = await conn.fetchrow(_EVENT, event_id)
        rows = await conn.fetch(_TICKETS_OF, ids, event_id) if event else []
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
        "ics_token": codec.mint(ICS, {"e": str(event_id), "s": None}, expires) if public else None,
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
                "ics_token": codec.mint(
                    ICS,
                    {
                        "e": str(event_id),
                        "s": str(r["event_slot_id"]) if r["event_slot_id"] else None,
                    },
                    expires,
                ),
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


async def tickets_pdf(pool: Pool, codec: CapabilityCodec, token: str, now: datetime) -> bytes:
    """The tickets PDF of a my-tickets link: one A6 page per `open` or `done` registration
    (the link's rules as the page's: a uniform 404 for an unknown, tampered or archived
    one); 404 `no_active_tickets` when none is left. Rendered off the event loop."""
    event, rows = await _link_rows(pool, codec, token, now)
    pages = ticket_pages(event, rows)
    if not pages:
        raise errors.NoActiveTickets("None of these registrations holds a ticket now.")
    return await render_off_loop(pages, title=f"Tickets · {event['name']}")


async def registration_tickets_pdf(pool: Pool, registration_id: UUID) -> bytes:
    """The tickets PDF of one registration (a mail's attachment); 404 `no_active_tickets`
    when it is not `open` or `done` (or no longer active)."""
    async with connection(pool) as conn:
        row = await conn.fetchrow(_TICKET_OF, registration_id)
        event = await conn.fetchrow(_EVENT, row["event_id"]) if row else None
    pages = ticket_pages(event, [row]) if row is not None and event is not None else []
    if not pages:
        raise errors.NoActiveTickets("This registration holds no ticket now.")
    assert event is not None
    return await render_off_loop(pages, title=f"Tickets · {event['name']}")


def intake_key(codec: CapabilityCodec, key: str, now: datetime) -> tuple[UUID, bool]:
    """(the event id, whether a private intake link named it) of an intake's path key."""
    try:
        return UUID(key), False
    except ValueError:
        return _event_id(codec.open(INTAKE, key, now)), True


def check_admitted(event: Any, by_capability: bool, now: datetime) -> None:
    """The intake's door: a missing or archived event is the uniform 404; a cancelled or
    finished one, or (by id) one that is not published, 409 `event_registrations_closed`.
    `event` needs `active`, `kanban_state`, `date_end`, `is_published`, `date_publish`."""
    if event is None or not event["active"]:
        raise errors.EventNotPublished()
    closed = event["kanban_state"] == "cancel" or event["date_end"] <= now
    if closed or (not by_capability and not is_visible(dict(event), now)):
        raise errors.RegistrationsClosed()


async def intake_event(pool: Pool, codec: CapabilityCodec, key: str, now: datetime) -> UUID:
    """The event an intake request registers for: by id (published, open) or by capability."""
    event_id, by_capability = intake_key(codec, key, now)
    async with connection(pool) as conn:
        event = await conn.fetchrow(_EVENT, event_id)
    check_admitted(event, by_capability, now)
    return event_id


async def register_intake(
    pool: Pool,
    codec: CapabilityCodec,
    key: str,
    attendees: list[AttendeeInput],
    now: datetime,
    *,
    ticket_id: UUID | None = None,
    slot_id: UUID | None = None,
) -> tuple[Registered, str]:
    """The guarded intake: the event `key` admits (`intake_event`), then the ONE register
    verb, acting as `public-intake`, mandatory answers enforced. Answers the new rows and
    the my-tickets token of all of them."""
    event_id = await intake_event(pool, codec, key, now)
    result = await register(
        pool,
        PUBLIC_INTAKE,
        event_id,
        attendees,
        now,
        slot_id=slot_id,
        ticket_id=ticket_id,
        source="intake",
        require_mandatory=True,
    )
    return result, tickets_token(codec, event_id, [r["id"] for r in result.registrations])
