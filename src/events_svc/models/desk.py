"""The check-in desk: a scan, and its outcome with the attendee the desk checks."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from events_svc.models.base import Command, RegistrationState, View
from events_svc.models.public import SlotRef, TicketRef

Outcome = Literal[
    "invalid_ticket",
    "canceled_registration",
    "unconfirmed_registration",
    "not_ongoing_event",
    "need_manual_confirmation",
    "already_registered",
    "confirmed_registration",
]


class DeskScan(Command):
    event_id: UUID
    # a barcode is up to 20 digits; room for what a scanner may add around it
    barcode: Annotated[str, Field(min_length=1, max_length=64)]


class ScannedRegistration(View):
    """The attendee as the desk sees them: never an email or a phone."""

    id: UUID
    event_id: UUID
    name: str
    ticket: TicketRef | None
    slot: SlotRef | None
    state: RegistrationState


class DeskOutcome(View):
    outcome: Outcome
    registration: ScannedRegistration | None
