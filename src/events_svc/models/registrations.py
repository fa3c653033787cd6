"""Registrations: the attendee fields (phone and email shapes), the register and
patch commands, and the registration view (masked or full, same shape)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field

from events_svc.models.base import (
    Command,
    Email,
    Instant,
    MultiLineText,
    PersonText,
    Phone,
    RegistrationState,
    Text,
    View,
)

SaleStatus = Literal["free", "sold", "to_pay"]
PersonName = Annotated[str, Field(max_length=256), PersonText]
CompanyName = Annotated[str, Field(max_length=256), PersonText]
# an answer's text: tab and line breaks only for a text_box (the register verb checks)
AnswerText = Annotated[Text, MultiLineText]


class AnswerInput(Command):
    question_id: UUID
    value_answer_id: UUID | None = None
    value_text: AnswerText | None = None


class AttendeeFields(Command):
    name: PersonName = ""
    email: Email = ""
    phone: Phone = ""
    company_name: CompanyName = ""


class AttendeeInput(AttendeeFields):
    answers: list[AnswerInput] = Field(default_factory=list, max_length=100)


class RegistrationCreate(AttendeeInput):
    event_id: UUID
    event_slot_id: UUID | None = None
    event_ticket_id: UUID | None = None
    partner_id: UUID | None = None


Reason = Annotated[str, Field(min_length=1, max_length=500)]


class RegistrationPatch(Command):
    """A correction: attendee fields only, with the reason it is made."""

    reason: Reason
    name: PersonName | None = None
    email: Email | None = None
    phone: Phone | None = None
    company_name: CompanyName | None = None
    # set by hand, or cleared with null; `done` stamps it only when it is empty
    date_closed: Instant | None = None
    # fenced: named so the refusal can say why, never written
    partner_id: Any = None
    state: Any = None
    sale_status: Any = None
    sale_order_id: Any = None
    sale_order_state: Any = None
    state_origin: Any = None
    barcode: Any = None
    active: Any = None
    event_id: Any = None
    event_slot_id: Any = None
    event_ticket_id: Any = None
    company_id: Any = None
    version: Any = None
    date_open: Any = None
    created_at: Any = None
    id: Any = None


REGISTRATION_WRITABLE = ("name", "email", "phone", "company_name", "date_closed")


class ReasonBody(Command):
    """Why a registration is cancelled or reactivated (kept in its revision history)."""

    reason: Reason


class RevisionChange(View):
    before: Any
    after: Any


class RevisionView(View):
    """One reasoned write of a registration; values masked unless read with pii=full."""

    id: UUID
    version: int
    verb: Literal["correct", "cancel", "reactivate", "sync_from_partner"]
    actor: str
    actor_kind: str
    reason: str
    fields: list[str]
    changes: dict[str, RevisionChange]
    at: datetime


class RegistrationCountsByState(View):
    draft: int
    open: int
    done: int
    cancel: int


class RegistrationCounts(View):
    """An event's registrations counted, without attendee data."""

    event_id: UUID
    total: int
    by_state: RegistrationCountsByState
    archived: int


class AnswerValue(View):
    question_id: UUID
    value_answer_id: UUID | None
    value_text: str | None


class RegistrationView(View):
    """One attendee; name, email and phone are masked unless read with pii=full."""

    id: UUID
    event_id: UUID
    event_slot_id: UUID | None
    event_ticket_id: UUID | None
    state: RegistrationState
    sale_status: SaleStatus | None
    sale_order_id: UUID | None
    name: str
    email: str
    phone: str
    company_name: str
    partner_id: UUID | None
    barcode: str
    active: bool
    date_open: datetime | None
    date_closed: datetime | None
    version: int
    company_id: UUID | None
    answers: list[AnswerValue]
    # who set the state last on a sale-linked row (`sale` or `officer`); `waitlist` on a
    # row born of a waiting-list offer; else null
    state_origin: Literal["sale", "officer", "waitlist"] | None = None
    hold_expires_at: datetime | None = None  # a held offer's draft: when its hold ends
    created_at: datetime
    updated_at: datetime
