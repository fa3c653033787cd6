"""The public surface: link minting bodies, the intake body (an allowlist: never an
authority column), and the answers of the capability-carried routes."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field

from events_svc.models.base import (
    MAX_PER_ORDER,
    BadgeFormat,
    Command,
    Email,
    RegistrationState,
    TtlSeconds,
    View,
)
from events_svc.models.registrations import AttendeeInput, PersonName


class IcsMint(Command):
    slot_id: UUID | None = None
    ttl_seconds: TtlSeconds | None = None


class MyTicketsMint(Command):
    registration_ids: Annotated[list[UUID], Field(min_length=1, max_length=100)]


class IntakeMint(Command):
    ttl_seconds: TtlSeconds | None = None


class IntakeAttendee(AttendeeInput):
    name: Annotated[PersonName, Field(min_length=1)]
    email: Annotated[Email, Field(min_length=3)]


class IntakeBody(Command):
    """What the public may send: identity fields, answers, a ticket and a slot. Never an
    authority column (partner_id, state, sale_*, active, company_id, barcode)."""

    event_ticket_id: UUID | None = None
    event_slot_id: UUID | None = None
    attendees: Annotated[list[IntakeAttendee], Field(min_length=1, max_length=MAX_PER_ORDER)]


# --- views ---------------------------------------------------------------------------------


class CapabilityView(View):
    """A minted link; `expires_at` is null for links that never expire (my-tickets)."""

    token: str
    url: str
    expires_at: datetime | None


class IntakeRegistration(View):
    registration_id: UUID
    state: RegistrationState


class IntakeAnswer(View):
    """The first attendee's registration, every attendee's, and their tickets link."""

    registration_id: UUID
    state: RegistrationState
    registrations: list[IntakeRegistration]
    my_tickets_url: str


class TicketRef(View):
    id: UUID
    name: str


class SlotRef(View):
    id: UUID
    date_begin: datetime
    date_end: datetime


class MyTicketsEvent(View):
    """The event as the attendee sees it; dates in the event's zone."""

    id: UUID
    name: str
    date_tz: str
    date_begin: datetime
    date_end: datetime
    location: str
    is_cancelled: bool


class MyTicket(View):
    id: UUID
    name: str
    state: RegistrationState
    barcode: str
    ticket: TicketRef | None
    slot: SlotRef | None
    badge_format: BadgeFormat
    ics_url: str


class MyTicketsView(View):
    """`ics_url`: the event's calendar link (null while the event is not public: a private
    link's unpublished event); `tickets_pdf_url`: the printable tickets."""

    event: MyTicketsEvent
    registrations: list[MyTicket]
    ics_url: str | None
    tickets_pdf_url: str
