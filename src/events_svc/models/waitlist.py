"""The waiting list: its settings, the join body (the intake's allowlist: identity fields,
a ticket, a slot and a number of seats, never an authority column), and the answers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from events_svc.models.base import Command, Email, PersonText, Phone, View, WholeNumber

WaitlistStatus = Literal["waiting", "offered", "accepted", "declined", "expired", "removed"]
# typed in the console's form (text): ASCII digits only; a JSON number as it comes
OfferHours = Annotated[int, WholeNumber, Field(ge=1, le=336)]
Seats = Annotated[int, WholeNumber, Field(ge=1, le=30)]


class WaitlistSettingsBody(Command):
    """PUT replaces the settings; an omitted field takes its default."""

    enabled: bool = False
    offer_hours: OfferHours = 48
    offer_template_id: UUID | None = None


class WaitlistSettingsView(View):
    event_id: UUID
    enabled: bool
    offer_hours: int
    offer_template_id: UUID | None


class WaitlistJoin(Command):
    """`seats`: 1 to the ticket's per-order cap, or 1 to 10 without a ticket."""

    name: Annotated[str, Field(min_length=1, max_length=256), PersonText]
    email: Annotated[Email, Field(min_length=3)]
    phone: Phone = ""
    event_ticket_id: UUID | None = None
    event_slot_id: UUID | None = None
    seats: Seats = 1


class WaitlistJoined(View):
    waitlist_entry_id: UUID
    status: WaitlistStatus
    position: int | None
    status_url: str


class WaitlistEvent(View):
    """The event an entry waits for; dates in the event's zone."""

    id: UUID
    name: str
    date_begin: datetime
    date_end: datetime
    date_tz: str
    location: str | None


class WaitlistStatusView(View):
    """An entry as its link shows it: `position` while waiting, the deadline of an offer,
    the tickets link once accepted."""

    event: WaitlistEvent | None = None
    status: WaitlistStatus
    position: int | None
    seats: int
    offer_expires_at: datetime | None
    my_tickets_url: str | None = None


class WaitlistEntryView(View):
    """An entry as operators see it (masked like registrations unless `pii=full`)."""

    id: UUID
    event_id: UUID
    status: WaitlistStatus
    position: int | None
    seats: int
    event_ticket_id: UUID | None
    event_slot_id: UUID | None
    name: str
    email: str
    phone: str
    created_at: datetime
    offered_at: datetime | None
    offer_expires_at: datetime | None
    decided_at: datetime | None
    registration_ids: list[UUID]
