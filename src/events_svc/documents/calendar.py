"""The calendar document: one VEVENT of an event (or one of its slots) in the event's zone,
with its VTIMEZONE. A pure renderer: rows in, bytes out. The public calendar link writes
it as `PUBLISH`; the trigger dispatcher as `REQUEST` or `CANCEL` (RFC 5546).
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from icalendar import Calendar, vCalAddress
from icalendar import Event as VEvent


def _in_zone(instant: datetime, zone: ZoneInfo) -> datetime:
    """The instant in `zone`; at the edge of the calendar (9999-12-31 in a zone ahead of
    UTC) the local time does not exist, so the instant in UTC."""
    try:
        return instant.astimezone(zone)
    except OverflowError:
        return instant.astimezone(UTC)


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
    local = (_in_zone(begin, zone), _in_zone(end, zone))
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
