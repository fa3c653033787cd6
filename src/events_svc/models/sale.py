"""The sale seam's facts (what the billing side tells us about an order) and its answer."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from pydantic import Field, model_validator

from events_svc.models.base import Command, View
from events_svc.models.registrations import AttendeeFields, PersonName

MAX_LINES = 100
MAX_LINE_ATTENDEES = 30
MAX_LINE_BOOTHS = 50

DeliveryId = Annotated[str, Field(min_length=1, max_length=200)]
AmountText = Annotated[str, Field(max_length=64)]
Currency = Annotated[str, Field(max_length=16)]


class SeamAttendee(AttendeeFields):
    name: Annotated[PersonName, Field(min_length=1)]


class SeamLine(Command):
    """One order line: its attendees are registered, its booths booked (pending)."""

    line_id: UUID
    event_id: UUID
    event_ticket_id: UUID | None = None
    event_slot_id: UUID | None = None
    attendees: list[SeamAttendee] = Field(default_factory=list, max_length=MAX_LINE_ATTENDEES)
    booth_ids: list[UUID] = Field(default_factory=list, max_length=MAX_LINE_BOOTHS)

    @model_validator(mode="after")
    def _carries_something(self) -> SeamLine:
        if not self.attendees and not self.booth_ids:
            raise ValueError("an order line carries attendees, booths, or both")
        if len(set(self.booth_ids)) != len(self.booth_ids):
            raise ValueError("a booth appears twice in booth_ids")
        return self


class OrderFact(Command):
    """`paid` or `cancelled`: the order, and the billing side's delivery id if it has one."""

    delivery_id: DeliveryId | None = None
    order_id: UUID


class OrderConfirmed(OrderFact):
    """The order is confirmed, with its lines; `amount_total` is a decimal string."""

    amount_total: AmountText
    currency: Currency
    lines: list[SeamLine] = Field(min_length=1, max_length=MAX_LINES)

    @model_validator(mode="after")
    def _distinct_lines(self) -> OrderConfirmed:
        if len({line.line_id for line in self.lines}) != len(self.lines):
            raise ValueError("a line_id appears twice in lines")
        return self


class SeamAnswer(View):
    """What a fact did: `applied`, `already_applied` (the recorded answer again) or the
    refusal code recorded for the delivery."""

    outcome: str
    delivery_key: str
    registration_ids: list[UUID]
    skipped_ids: list[UUID]
    overbooked: bool
    detail: dict[str, Any]
