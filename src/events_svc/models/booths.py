"""Booths: categories (naming the host's product), the booths of an event with their
bookings, the booking command, and the linked-products read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field

from events_svc.models.base import Command, Email, Name, Phone, Text, View
from events_svc.models.catalog import ProductRef

ContactName = Annotated[str, Field(max_length=256)]

BoothState = Literal["available", "unavailable"]
BookingStatus = Literal["pending", "confirmed"]
LinkSource = Literal["ticket", "booth_category"]

# --- categories --------------------------------------------------------------------------


class BoothCategoryCreate(Command):
    name: Name
    description: Text = ""
    product_ref: ProductRef | None = None


class BoothCategoryPatch(Command):
    name: Name | None = None
    description: Text | None = None
    product_ref: ProductRef | None = None


class BoothCategoryView(View):
    id: UUID
    name: str
    description: str
    product_ref: str | None
    created_at: datetime
    updated_at: datetime


# --- booths ------------------------------------------------------------------------------


class BoothContact(Command):
    contact_name: ContactName = ""
    contact_email: Email = ""
    contact_phone: Phone = ""


class BoothCreate(BoothContact):
    event_id: UUID
    name: Name
    booth_category_id: UUID


class BoothPatch(Command):
    """The writable fields; `state`, `is_paid` and bookings change only through their
    verbs, and a booth never moves to another event."""

    name: Name | None = None
    booth_category_id: UUID | None = None
    contact_name: ContactName | None = None
    contact_email: Email | None = None
    contact_phone: Phone | None = None


class BookingCreate(BoothContact):
    """A pending booking: an order line's (one per line and booth) or an officer's."""

    order_id: UUID | None = None
    order_line_id: UUID | None = None


class BookingLine(View):
    """One booking of a booth; its contacts are masked unless read with pii=full."""

    id: UUID
    status: BookingStatus
    order_id: UUID | None
    order_line_id: UUID | None
    contact_name: str
    contact_email: str
    contact_phone: str
    created_at: datetime
    confirmed_at: datetime | None


class BoothView(View):
    """A booth: `state` and `is_paid` are read-only, `sale_linked` says an order line
    booked it once (it can then never be deleted)."""

    id: UUID
    event_id: UUID
    name: str
    booth_category_id: UUID
    state: BoothState
    is_paid: bool
    sale_linked: bool
    contact_name: str
    contact_email: str
    contact_phone: str
    bookings: list[BookingLine]
    created_at: datetime
    updated_at: datetime


class BookingView(BookingLine):
    """A booking with its booth, as the booking and confirm routes answer it."""

    booth_id: UUID
    event_id: UUID
    booth: BoothView


# --- the linked-products read -------------------------------------------------------------


class LinkedProductView(View):
    """A product the events link to, and where the link comes from."""

    product_ref: str
    sources: list[LinkSource]
