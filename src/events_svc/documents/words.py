"""How a document writes a time span: in the event's own zone, named, one day or two."""

from __future__ import annotations

from datetime import datetime


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
