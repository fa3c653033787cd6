"""Configuration nouns: stages, tag categories, tags, event types (with their template
lines), tickets and slots; their commands and their views."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import Field

from events_svc.models.base import (
    Bool,
    Channel,
    Color,
    Command,
    Instant,
    IntervalKind,
    IntervalNbr,
    IntervalUnit,
    Name,
    PerOrder,
    Seats,
    Sequence,
    Text,
    View,
    ZoneName,
)

# free text naming the host's product (tickets, booth categories): the linked-products read
ProductRef = Annotated[str, Field(min_length=1, max_length=256)]

# --- stages, tags ----------------------------------------------------------------------------


class StageCreate(Command):
    name: Name
    description: Text = ""
    sequence: Sequence = 10
    fold: Bool = False
    pipe_end: Bool = False


class StagePatch(Command):
    name: Name | None = None
    description: Text | None = None
    sequence: Sequence | None = None
    fold: Bool | None = None
    pipe_end: Bool | None = None


class StageView(View):
    id: UUID
    name: str
    description: str
    sequence: int
    fold: bool
    pipe_end: bool
    created_at: datetime
    updated_at: datetime


class TagCategoryCreate(Command):
    name: Name
    sequence: Sequence = 10


class TagCategoryPatch(Command):
    name: Name | None = None
    sequence: Sequence | None = None


class TagCategoryView(View):
    id: UUID
    name: str
    sequence: int
    created_at: datetime
    updated_at: datetime


class TagCreate(Command):
    category_id: UUID
    name: Name
    sequence: Sequence = 10
    color: Color | None = None


class TagPatch(Command):
    category_id: UUID | None = None
    name: Name | None = None
    sequence: Sequence | None = None
    color: Color | None = None


class TagView(View):
    id: UUID
    category_id: UUID
    name: str
    sequence: int
    color: int | None
    created_at: datetime
    updated_at: datetime


# --- event types and their template lines ----------------------------------------------------


class TypeCreate(Command):
    name: Name
    note: Text = ""
    date_tz: ZoneName = "UTC"
    seats_limited: Bool = False
    seats_max: Seats = 0


class TypePatch(Command):
    name: Name | None = None
    note: Text | None = None
    date_tz: ZoneName | None = None
    seats_limited: Bool | None = None
    seats_max: Seats | None = None


class TypeMailLine(Command):
    """`template_ref`: a template of the writer's company or a platform template (types
    are shared by every company)."""

    interval_nbr: IntervalNbr = 1
    interval_unit: IntervalUnit = "hours"
    interval_kind: IntervalKind = "before_event"
    template_ref: UUID
    # both follow the template's kind; named, they must agree with it
    template_kind: Channel | None = None
    notification_channel: Channel | None = None
    sequence: Sequence = 10


class TypeTicketLine(Command):
    name: Name
    description: Text = ""
    seats_max: Seats = 0
    limit_max_per_order: PerOrder = 0


class TypeQuestionLine(Command):
    question_id: UUID
    sequence: Sequence = 10


class TypeBoothLine(Command):
    """A booth the type creates on each new event (name and category only)."""

    name: Name
    booth_category_id: UUID


class TypeMailLineView(View):
    id: UUID
    sequence: int
    interval_nbr: int
    interval_unit: IntervalUnit
    interval_kind: IntervalKind
    template_ref: UUID
    template_kind: Channel
    notification_channel: Channel
    created_at: datetime


class TypeTicketLineView(View):
    id: UUID
    name: str
    description: str
    seats_max: int
    limit_max_per_order: int
    created_at: datetime


class TypeQuestionLineView(View):
    question_id: UUID
    sequence: int


class TypeBoothLineView(View):
    id: UUID
    name: str
    booth_category_id: UUID
    created_at: datetime


class TypeView(View):
    """An event type with the template lines it copies onto new events."""

    id: UUID
    name: str
    note: str
    date_tz: str
    seats_limited: bool
    seats_max: int
    mails: list[TypeMailLineView]
    tickets: list[TypeTicketLineView]
    questions: list[TypeQuestionLineView]
    booths: list[TypeBoothLineView]
    created_at: datetime
    updated_at: datetime


# --- tickets and slots -----------------------------------------------------------------------


class TicketCreate(Command):
    event_id: UUID
    name: Name
    description: Text = ""
    seats_max: Seats = 0
    limit_max_per_order: PerOrder = 0
    start_sale_datetime: Instant | None = None
    end_sale_datetime: Instant | None = None
    product_ref: ProductRef | None = None


class TicketPatch(Command):
    name: Name | None = None
    description: Text | None = None
    seats_max: Seats | None = None
    limit_max_per_order: PerOrder | None = None
    start_sale_datetime: Instant | None = None
    end_sale_datetime: Instant | None = None
    product_ref: ProductRef | None = None


class TicketView(View):
    id: UUID
    event_id: UUID
    name: str
    description: str
    seats_max: int
    limit_max_per_order: int
    start_sale_datetime: datetime | None
    end_sale_datetime: datetime | None
    product_ref: str | None
    created_at: datetime
    updated_at: datetime


class SlotCreate(Command):
    event_id: UUID
    date_begin: Instant
    date_end: Instant


class SlotPatch(Command):
    date_begin: Instant | None = None
    date_end: Instant | None = None


class SlotView(View):
    id: UUID
    event_id: UUID
    date_begin: datetime
    date_end: datetime
    created_at: datetime
    updated_at: datetime
