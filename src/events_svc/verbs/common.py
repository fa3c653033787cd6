"""Small helpers every verb module shares: list cursors, patch merging, time zones."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from events_svc import errors

MAX_LIMIT = 200


def clamp_limit(limit: int | None) -> int:
    if limit is None:
        return 50
    if limit < 1 or limit > MAX_LIMIT:
        raise errors.ValidationFailed(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def encode_cursor(key: Any, row_id: UUID) -> str:
    """An opaque cursor: the sort key and id of the last row of a page."""
    value = key.isoformat() if isinstance(key, datetime) else key
    value = str(value) if isinstance(value, UUID) else value
    raw = json.dumps([value, str(row_id)]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(
    cursor: str | None, key_kind: type, *, int_bits: int = 32
) -> tuple[Any, UUID] | tuple[None, None]:
    """Undo `encode_cursor`; a cursor this service did not issue is `invalid_cursor`. An
    integer key must be a JSON integer that fits a signed `int_bits` column."""
    if not cursor:
        return None, None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value, row_id = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if key_kind is int and not _fits(value, int_bits):
            raise ValueError("not an integer key")
        key: Any = datetime.fromisoformat(value) if key_kind is datetime else key_kind(value)
        return key, UUID(row_id)
    except (ValueError, TypeError, json.JSONDecodeError):
        raise errors.InvalidCursor() from None


def _fits(value: Any, bits: int) -> bool:
    limit = 1 << (bits - 1)
    return isinstance(value, int) and not isinstance(value, bool) and -limit <= value < limit


def page(rows: list[dict[str, Any]], limit: int, key: str) -> dict[str, Any]:
    """Trim a `limit + 1` fetch into {items, next_cursor}."""
    more = len(rows) > limit
    items = rows[:limit]
    nxt = encode_cursor(items[-1][key], items[-1]["id"]) if more and items else None
    return {"items": items, "next_cursor": nxt}


def merge_patch(
    current: dict[str, Any], changes: dict[str, Any], not_null: frozenset[str]
) -> dict[str, Any]:
    """The row after a patch; a null for a required field is refused."""
    for name, value in changes.items():
        if value is None and name in not_null:
            raise errors.ValidationFailed(f"{name} cannot be null", field=name)
    merged = dict(current)
    merged.update(changes)
    return merged


_ZONES: set[str] | None = None


def check_timezone(name: str) -> str:
    """An IANA time zone name, or `invalid_timezone`."""
    global _ZONES
    if _ZONES is None:
        _ZONES = available_timezones() | {"UTC"}
    if name not in _ZONES:
        raise errors.InvalidTimezone(field="date_tz")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise errors.InvalidTimezone(field="date_tz") from None
    return name


def in_zone(instant: datetime, zone: ZoneInfo) -> datetime:
    """The instant in the event's zone for presentation; at the edge of the calendar
    (9999-12-31 in a zone ahead of UTC) the local time does not exist, so UTC is shown."""
    try:
        return instant.astimezone(zone)
    except OverflowError:
        return instant.astimezone(UTC)


def check_if_match(current: int, if_match: int | None, *, name: str) -> None:
    """Refuse 412 `stale_revision` when If-Match names another `revision`/`version` than
    the row's; no If-Match means any."""
    if if_match is not None and if_match != current:
        fields: dict[str, Any] = {name: current}
        raise errors.StaleRevision(**fields)
