"""Events: the create and patch commands (with the fenced fields), publication and
question links, and the event view with its seat read model."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from pydantic import Field

from events_svc.models.base import (
    BadgeFormat,
    Bool,
    Command,
    Instant,
    KanbanState,
    Name,
    Seats,
    Sequence,
    Text,
    View,
    ZoneName,
)

Url = Annotated[str, Field(max_length=2048)]


class EventCreate(Command):
    name: Name
    description: Text = ""
    date_begin: Instant
    date_end: Instant
    date_tz: ZoneName | None = None
    seats_limited: Bool | None = None
    seats_max: Seats | None = None
    is_multi_slots: Bool = False
    event_type_id: UUID | None = None
    stage_id: UUID | None = None
    kanban_state: KanbanState = "normal"
    company_id: UUID | None = None
    organizer_id: UUID | None = None
    address_id: UUID | None = None
    location: Text = ""
    event_url: Url | None = None
    badge_format: BadgeFormat = "A6"
    tag_ids: list[UUID] = Field(default_factory=list, max_length=100)
    active: Bool = True


class EventPatch(Command):
    name: Name | None = None
    description: Text | None = None
    date_begin: Instant | None = None
    date_end: Instant | None = None
    date_tz: ZoneName | None = None
    seats_limited: Bool | None = None
    seats_max: Seats | None = None
    is_multi_slots: Bool | None = None
    event_type_id: UUID | None = None
    stage_id: UUID | None = None
    kanban_state: KanbanState | None = None
    company_id: UUID | None = None
    organizer_id: UUID | None = None
    address_id: UUID | None = None
    location: Text | None = None
    event_url: Url | None = None
    badge_format: BadgeFormat | None = None
    tag_ids: list[UUID] | None = Field(default=None, max_length=100)
    active: Bool | None = None
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


class PublishBody(Command):
    date_publish: Instant | None = None


class QuestionLink(Command):
    question_id: UUID
    sequence: Sequence = 10
    # general (asked once per group registration, its answer copied to every attendee)
    # or specific (asked of each attendee)
    once_per_order: Bool = False


# --- views ---------------------------------------------------------------------------------


class ScopeSeats(View):
    """One seat scope; `available` is null when the scope is unlimited."""

    limited: bool
    cap: int
    reserved: int
    used: int
    held: int  # drafts of unpaid orders
    taken: int  # reserved + used + held
    available: int | None


class TicketSeats(ScopeSeats):
    ticket_id: UUID
    is_sold_out: bool


class SlotSeats(ScopeSeats):
    slot_id: UUID
    is_sold_out: bool


class SeatsView(View):
    """The one seat read model of an event."""

    event: ScopeSeats
    tickets: list[TicketSeats]
    slots: list[SlotSeats]
    available_min: int | None
    is_sold_out: bool


class EventView(View):
    id: UUID
    name: str
    description: str
    date_begin: datetime
    date_end: datetime
    date_tz: str
    seats_limited: bool
    seats_max: int
    is_multi_slots: bool
    event_type_id: UUID | None
    stage_id: UUID | None
    kanban_state: KanbanState
    is_published: bool
    date_publish: datetime | None
    company_id: UUID | None
    organizer_id: UUID | None
    address_id: UUID | None
    location: str
    event_url: str | None
    badge_format: BadgeFormat
    tag_ids: list[UUID]
    active: bool
    revision: int
    ics_sequence: int
    is_ongoing: bool
    is_finished: bool
    seats: SeatsView
    created_at: datetime
    updated_at: datetime
