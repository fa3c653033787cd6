"""How a person reads a time: `when` (an instant in the event's zone, the ONE presenter of
instants for pages, mails and the console), `moment` and `span` (already in the zone), one
day or two."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def local(instant: datetime, zone: str) -> tuple[datetime, str]:
    """The instant in the zone named `zone`, and that zone's name. A zone this machine
    does not know, or a local time past the calendar's end (9999-12-31 in a zone ahead of
    UTC), gives the instant in UTC, named `UTC`: the reader is never told a wrong zone."""
    try:
        return instant.astimezone(ZoneInfo(zone)), zone
    except (ZoneInfoNotFoundError, ValueError, OverflowError):
        return instant.astimezone(UTC), "UTC"


def when(instant: datetime | None, zone: str = "UTC") -> str:
    """`Mon 10 May 2027, 09:00 (Europe/Lisbon)`: an instant as a person reads it, in the
    event's zone, the zone named (see `local` for the edges); `—` for no instant."""
    if instant is None:
        return "\u2014"
    value, name = local(instant, zone)
    return moment(value, name)


def moment(value: datetime, zone: str) -> str:
    """`Mon 10 May 2027, 09:00 (Europe/Lisbon)` (`value` already in the event's zone)."""
    return f"{value:%a} {value.day} {value:%b %Y}, {value:%H:%M} ({zone})"


def span(begin: datetime, end: datetime, zone: str) -> str:
    """`Mon 10 May 2027, 09:00-17:00 (Europe/Lisbon)` (with an en dash), or both dates
    when it spans days (`begin` and `end` already in the event's zone)."""
    day = f"{begin:%a} {begin.day} {begin:%b %Y}"
    if begin.date() == end.date():
        return f"{day}, {begin:%H:%M}\u2013{end:%H:%M} ({zone})"
    last = f"{end:%a} {end.day} {end:%b %Y}"
    return f"{day} {begin:%H:%M} \u2013 {last} {end:%H:%M} ({zone})"
