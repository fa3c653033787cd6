"""Pydantic commands (request bodies). Views are plain dicts built from rows.

Every command forbids unknown fields, refuses NUL characters in strings
(PostgreSQL cannot store them) and requires datetimes with an offset.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator

KanbanState = Literal["normal", "blocked", "done", "cancel"]
BadgeFormat = Literal["A4_french_fold", "A6", "four_per_sheet"]
IntervalUnit = Literal["now", "hours", "days", "weeks", "months"]
IntervalKind = Literal[
    "after_sub", "before_event", "after_event_start", "after_event", "before_event_end"
]
Channel = Literal["mail", "sms"]
QuestionKind = Literal["simple_choice", "text_box", "name", "email", "phone", "company_name"]

Name = Annotated[str, Field(min_length=1, max_length=256)]
Text = Annotated[str, Field(max_length=20_000)]


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


class Command(BaseModel):
    """Base of every request body."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if _has_nul(value):
            raise ValueError("NUL characters are not allowed in text")
        return value

    def given(self) -> dict[str, Any]:
        """Only the fields the client sent (for patches)."""
        return {k: getattr(self, k) for k in self.model_fields_set}


# --- events -------------------------------------------------------------------------------


class EventCreate(Command):
    name: Name
    description: Text = ""
    date_begin: AwareDatetime
    date_end: AwareDatetime
    date_tz: str | None = None
    seats_limited: bool | None = None
    seats_max: int | None = None
    is_multi_slots: bool = False
    event_type_id: UUID | None = None
    stage_id: UUID | None = None
    kanban_state: KanbanState = "normal"
    company_id: UUID | None = None
    organizer_id: UUID | None = None
    address_id: UUID | None = None
    location: Text = ""
    event_url: Annotated[str, Field(max_length=2048)] | None = None
    badge_format: BadgeFormat = "A6"
    tag_ids: list[UUID] = Field(default_factory=list, max_length=100)
    active: bool = True


class EventPatch(Command):
    name: Name | None = None
    description: Text | None = None
    date_begin: AwareDatetime | None = None
    date_end: AwareDatetime | None = None
    date_tz: str | None = None
    seats_limited: bool | None = None
    seats_max: int | None = None
    is_multi_slots: bool | None = None
    event_type_id: UUID | None = None
    stage_id: UUID | None = None
    kanban_state: KanbanState | None = None
    company_id: UUID | None = None
    organizer_id: UUID | None = None
    address_id: UUID | None = None
    location: Text | None = None
    event_url: Annotated[str, Field(max_length=2048)] | None = None
    badge_format: BadgeFormat | None = None
    tag_ids: list[UUID] | None = Field(default=None, max_length=100)
    active: bool | None = None
    # fenced: named so the refusal can say why, never written
    is_published: Any = None
    date_publish: Any = None
    id: Any = None
    revision: Any = None
    ics_sequence: Any = None
    is_ongoing: Any = None
    is_finished: Any = None
    seats: Any = None
    created_at: Any = None
    updated_at: Any = None


EVENT_PUBLISH_FENCE = ("is_published", "date_publish")
EVENT_READ_ONLY = (
    "id",
    "revision",
    "ics_sequence",
    "is_ongoing",
    "is_finished",
    "seats",
    "created_at",
    "updated_at",
)


class QuestionLink(Command):
    question_id: UUID
    sequence: int = 10


# --- configuration nouns ------------------------------------------------------------------


class StageCreate(Command):
    name: Name
    description: Text = ""
    sequence: int = 10
    fold: bool = False
    pipe_end: bool = False


class StagePatch(Command):
    name: Name | None = None
    description: Text | None = None
    sequence: int | None = None
    fold: bool | None = None
    pipe_end: bool | None = None


class TagCategoryCreate(Command):
    name: Name
    sequence: int = 10


class TagCategoryPatch(Command):
    name: Name | None = None
    sequence: int | None = None


class TagCreate(Command):
    category_id: UUID
    name: Name
    sequence: int = 10
    color: int | None = None


class TagPatch(Command):
    category_id: UUID | None = None
    name: Name | None = None
    sequence: int | None = None
    color: int | None = None


class TypeCreate(Command):
    name: Name
    note: Text = ""
    date_tz: str = "UTC"
    seats_limited: bool = False
    seats_max: int = 0


class TypePatch(Command):
    name: Name | None = None
    note: Text | None = None
    date_tz: str | None = None
    seats_limited: bool | None = None
    seats_max: int | None = None


class TypeMailLine(Command):
    interval_nbr: int = 1
    interval_unit: IntervalUnit = "hours"
    interval_kind: IntervalKind = "before_event"
    template_ref: UUID
    template_kind: Channel = "mail"
    notification_channel: Channel = "mail"
    sequence: int = 10


class TypeTicketLine(Command):
    name: Name
    description: Text = ""
    seats_max: int = 0
    limit_max_per_order: int = 0


class TypeQuestionLine(Command):
    question_id: UUID
    sequence: int = 10


class TicketCreate(Command):
    event_id: UUID
    name: Name
    description: Text = ""
    seats_max: int = 0
    limit_max_per_order: int = 0
    start_sale_datetime: AwareDatetime | None = None
    end_sale_datetime: AwareDatetime | None = None


class TicketPatch(Command):
    name: Name | None = None
    description: Text | None = None
    seats_max: int | None = None
    limit_max_per_order: int | None = None
    start_sale_datetime: AwareDatetime | None = None
    end_sale_datetime: AwareDatetime | None = None


class SlotCreate(Command):
    event_id: UUID
    date_begin: AwareDatetime
    date_end: AwareDatetime


class SlotPatch(Command):
    date_begin: AwareDatetime | None = None
    date_end: AwareDatetime | None = None


class AnswerCreate(Command):
    name: Name
    sequence: int = 10


class AnswerPatch(Command):
    name: Name | None = None
    sequence: int | None = None


class QuestionCreate(Command):
    title: Name
    question_type: QuestionKind = "simple_choice"
    is_mandatory_answer: bool = False
    is_default: bool = False
    is_reusable: bool = False
    sequence: int = 10
    answers: list[AnswerCreate] = Field(default_factory=list, max_length=200)


class QuestionPatch(Command):
    title: Name | None = None
    question_type: QuestionKind | None = None
    is_mandatory_answer: bool | None = None
    is_default: bool | None = None
    is_reusable: bool | None = None
    sequence: int | None = None


# --- registrations ------------------------------------------------------------------------

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


class AnswerInput(Command):
    question_id: UUID
    value_answer_id: UUID | None = None
    value_text: Text | None = None


class AttendeeFields(Command):
    name: Annotated[str, Field(max_length=256)] = ""
    email: Annotated[str, Field(max_length=320)] = ""
    phone: Annotated[str, Field(max_length=64)] = ""
    company_name: Annotated[str, Field(max_length=256)] = ""

    @field_validator("email")
    @classmethod
    def _email_shape(cls, value: str) -> str:
        if value and not _EMAIL.match(value):
            raise ValueError("not an email address")
        return value


class AttendeeInput(AttendeeFields):
    answers: list[AnswerInput] = Field(default_factory=list, max_length=100)


class RegistrationCreate(AttendeeInput):
    event_id: UUID
    event_slot_id: UUID | None = None
    event_ticket_id: UUID | None = None
    partner_id: UUID | None = None


class RegistrationPatch(Command):
    name: Annotated[str, Field(max_length=256)] | None = None
    email: Annotated[str, Field(max_length=320)] | None = None
    phone: Annotated[str, Field(max_length=64)] | None = None
    company_name: Annotated[str, Field(max_length=256)] | None = None
    partner_id: UUID | None = None
    # fenced: named so the refusal can say why, never written
    state: Any = None
    sale_status: Any = None
    sale_order_id: Any = None
    sale_order_state: Any = None
    barcode: Any = None
    active: Any = None
    event_id: Any = None
    event_slot_id: Any = None
    event_ticket_id: Any = None
    company_id: Any = None
    version: Any = None
    date_closed: Any = None
    date_open: Any = None
    created_at: Any = None
    id: Any = None

    @field_validator("email")
    @classmethod
    def _email_shape(cls, value: str | None) -> str | None:
        if value and not _EMAIL.match(value):
            raise ValueError("not an email address")
        return value


REGISTRATION_WRITABLE = ("name", "email", "phone", "company_name", "partner_id")


# --- communication ------------------------------------------------------------------------


class MailCreate(Command):
    event_id: UUID
    interval_nbr: Annotated[int, Field(ge=0, le=10_000)] = 1
    interval_unit: IntervalUnit = "hours"
    interval_kind: IntervalKind = "before_event"
    template_ref: UUID
    notification_channel: Channel = "mail"
    sequence: int = 10


class MailPatch(Command):
    interval_nbr: Annotated[int, Field(ge=0, le=10_000)] | None = None
    interval_unit: IntervalUnit | None = None
    interval_kind: IntervalKind | None = None
    template_ref: UUID | None = None
    notification_channel: Channel | None = None
    sequence: int | None = None


class TemplateCreate(Command):
    kind: Channel = "mail"
    name: Name
    subject: Annotated[str, Field(max_length=1000)] = ""
    body: Annotated[str, Field(min_length=1, max_length=100_000)]


class TemplatePatch(Command):
    name: Name | None = None
    subject: Annotated[str, Field(max_length=1000)] | None = None
    body: Annotated[str, Field(min_length=1, max_length=100_000)] | None = None


# --- public surface -----------------------------------------------------------------------


class IcsMint(Command):
    slot_id: UUID | None = None
    ttl_seconds: Annotated[int, Field(ge=60, le=5 * 365 * 86400)] | None = None


class MyTicketsMint(Command):
    registration_ids: Annotated[list[UUID], Field(min_length=1, max_length=100)]


class IntakeMint(Command):
    ttl_seconds: Annotated[int, Field(ge=60, le=5 * 365 * 86400)] | None = None


class IntakeAttendee(AttendeeInput):
    name: Annotated[str, Field(min_length=1, max_length=256)]
    email: Annotated[str, Field(min_length=3, max_length=320)]


class IntakeBody(Command):
    """What the public may send: identity fields, answers, a ticket and a slot. Never an
    authority column (partner_id, state, sale_*, active, company_id, barcode)."""

    event_ticket_id: UUID | None = None
    event_slot_id: UUID | None = None
    attendees: Annotated[list[IntakeAttendee], Field(min_length=1, max_length=30)]
