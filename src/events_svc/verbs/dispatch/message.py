"""What one trigger's message is made of: the template context, and the calendar it carries.

The context is the scheduler mails' own (`verbs.mail.send` builds both): the event part
comes from the trigger's context (dates, zone, location: the event as the change left
it) and the event row (name, url); the registration, ticket and slot parts from their
rows now. A calendar purpose (`event_rescheduled`, `event_cancelled`) attaches one `.ics`
built by the public calendar's builder (`documents.build_calendar`): the event's
stable UID (the slot form for a slot registration), the trigger's `SEQUENCE`,
`METHOD:REQUEST` with the new times or `METHOD:CANCEL` with `STATUS:CANCELLED`, the
sender as ORGANIZER and the attendee as ATTENDEE. A retry builds the same calendar: its
DTSTAMP is the trigger's creation time.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, NamedTuple

from icalendar import vCalAddress
from icalendar.parser import Contentline

from events_svc.documents import build_calendar
from events_svc.ports import Attachment, OutgoingMessage, Rendered, attachments_of
from events_svc.verbs.mail import LinkBuilder, send

CALENDAR_PURPOSES = ("event_rescheduled", "event_cancelled")
CALENDAR_FILE = "invite.ics"


def context(row: dict[str, Any], links: LinkBuilder, now: datetime) -> dict[str, Any]:
    """The documented template context of one claimed trigger (`templating.CONTEXT_FIELDS`)."""
    event = {
        "event_id": row["event_id"],
        "event_name": row["event_name"],
        "date_begin": row["ctx_date_begin"],
        "date_end": row["ctx_date_end"],
        "date_tz": row["ctx_date_tz"],
        "location": row["ctx_location"] or "",
        "event_url": row["event_url"],
    }
    return send.recipient_context(event, row, links, now)  # one context shape for every mail


class _Change(NamedTuple):
    """What the calendar of one change shows, for one slot and one sender."""

    event_id: Any
    name: str
    description: str | None
    begin: datetime
    end: datetime
    tz: str
    location: str | None
    url: str | None
    method: str
    sequence: int
    at: datetime  # DTSTAMP: the change's own time
    slot_id: Any
    slot_begin: datetime | None
    slot_end: datetime | None
    sender: str


def calendar(row: dict[str, Any], sender: str, recipient: str) -> Attachment:
    """The `.ics` of a calendar trigger, for `recipient`: the calendar shared by every
    attendee of the change (built once, see `_shared`) with their own ATTENDEE line."""
    method = str(row["ics_method"])
    slot_id = row["event_slot_id"]
    change = _Change(
        row["event_id"],
        row["event_name"],
        row["event_description"],
        row["ctx_date_begin"],
        row["ctx_date_end"],
        row["ctx_date_tz"],
        row["ctx_location"],
        row["event_url"],
        method,
        row["ics_sequence"],
        row["created_at"],
        slot_id,
        row["slot_begin"] if slot_id is not None else None,
        row["slot_end"] if slot_id is not None else None,
        sender,
    )
    text = _shared(change).replace(_PLACEHOLDER_LINE, _attendee_line(recipient), 1)
    return Attachment(
        filename=CALENDAR_FILE,
        content_type=f"text/calendar; method={method}",
        content=text.decode("utf-8"),
    )


# The calendar of one change is the same for all its attendees but the ATTENDEE line:
# building it (a VTIMEZONE each) costs about 1 ms, so it is built once per (change, slot,
# sender) with a placeholder attendee whose line is then swapped for the attendee's own,
# folded by the same content-line writer (byte-identical to a calendar built for them).
_PLACEHOLDER = "attendee@placeholder.invalid"
_PLACEHOLDER_LINE = b"ATTENDEE:mailto:" + _PLACEHOLDER.encode() + b"\r\n"


@functools.lru_cache(maxsize=64)
def _shared(c: _Change) -> bytes:
    event = {
        "id": c.event_id,
        "name": c.name,
        "description": c.description,
        "date_begin": c.begin,
        "date_end": c.end,
        "date_tz": c.tz,
        "location": c.location,
        "event_url": c.url,
        "kanban_state": "cancel" if c.method == "CANCEL" else "normal",
        "updated_at": c.at,
    }
    slot = None
    if c.slot_id is not None:
        slot = {"id": c.slot_id, "date_begin": c.slot_begin, "date_end": c.slot_end}
    text = build_calendar(
        event, slot, method=c.method, sequence=c.sequence, parties=(c.sender, _PLACEHOLDER)
    )
    if _PLACEHOLDER_LINE not in text:  # the writer changed: nothing to swap
        raise RuntimeError("the calendar's attendee line was not found")
    return text


def _attendee_line(recipient: str) -> bytes:
    address = vCalAddress(f"mailto:{recipient}")
    line: bytes = Contentline.from_parts("ATTENDEE", address.params, address).to_ical()
    return line + b"\r\n"


def message(row: dict[str, Any], sender: str, recipient: str, text: Rendered) -> OutgoingMessage:
    """The mail of one trigger: its rendered text and, for a calendar purpose, the `.ics`."""
    attachments = attachments_of(text, row["registration_id"])
    if row["purpose"] in CALENDAR_PURPOSES:
        attachments = (calendar(row, sender, recipient), *attachments)
    return OutgoingMessage(
        channel="mail",
        recipient=recipient,
        sender=sender,
        subject=text.subject,
        body=text.body,
        event_id=row["event_id"],
        registration_id=row["registration_id"],
        attachments=attachments,
        trigger_id=row["trigger_id"],
    )


def messages(
    batch: list[tuple[dict[str, Any], str, Rendered]],
) -> list[OutgoingMessage | Exception]:
    """The mails of a batch of (trigger, sender, text), each to the registration's email;
    a mail whose calendar cannot be built is its exception (run in a worker thread)."""
    out: list[OutgoingMessage | Exception] = []
    for row, sender, text in batch:
        try:
            out.append(message(row, sender, str(row["email"]), text))
        except Exception as exc:
            out.append(exc)
    return out
