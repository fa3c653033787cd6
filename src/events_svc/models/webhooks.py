"""Webhook endpoints and their delivery log.

An event type outside the closed list is refused at parse: 422 `unknown_event_type`,
whose body names the list. A URL is at most 2 048 characters; its shape and addresses are
the egress guard's to judge (422 `webhook_url_not_allowed`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from events_svc.errors.webhooks import EVENT_TYPES
from events_svc.models.base import Bool, Command, View

DeliveryState = Literal["pending", "succeeded", "retrying", "failed"]
WebhookUrl = Annotated[str, Field(min_length=8, max_length=2048)]
Description = Annotated[str, Field(max_length=500)]


def _event_type(value: str) -> str:
    if value not in EVENT_TYPES:
        # the typed refusal of errors.TYPED_VALIDATION; the value itself is never echoed
        raise PydanticCustomError(
            "unknown_event_type", "event type must be one of: " + ", ".join(EVENT_TYPES)
        )
    return value


EventType = Annotated[
    str,
    AfterValidator(_event_type),
    Field(max_length=64, json_schema_extra={"enum": list(EVENT_TYPES)}),
]
EventTypes = Annotated[list[EventType], Field(min_length=1, max_length=len(EVENT_TYPES))]


class WebhookEndpointBody(Command):
    """A new endpoint. `event_id`: only that event's facts; `include_pii` (attendees'
    name, email, phone, company and barcode in `data`) needs `registration:pii`."""

    url: WebhookUrl
    event_types: EventTypes
    event_id: UUID | None = None
    description: Description = ""
    include_pii: Bool = False
    active: Bool = True


class WebhookEndpointPatch(Command):
    """Only the fields sent change; `active: true` clears `disabled_reason`."""

    url: WebhookUrl | None = None
    event_types: EventTypes | None = None
    event_id: UUID | None = None
    description: Description | None = None
    include_pii: Bool | None = None
    active: Bool | None = None


class WebhookEndpointView(View):
    id: UUID
    url: str
    event_types: list[str]
    event_id: UUID | None
    description: str
    include_pii: bool
    active: bool
    disabled_reason: Literal["gone", "failing"] | None
    failing_since: datetime | None
    rotation_ends_at: datetime | None
    created_at: datetime
    updated_at: datetime


class WebhookEndpointCreated(WebhookEndpointView):
    """The create answer: the only one that carries the secret."""

    secret: str


class WebhookSecretView(View):
    """A new secret, shown once; the previous one still signs until `rotation_ends_at`."""

    secret: str
    rotation_ends_at: datetime


class WebhookDeliveryView(View):
    """One attempt: `message_id` is the `webhook-id` header (the same on every attempt of
    a message); `next_attempt_at` is when a pending attempt is due, or when a retrying
    one's next attempt is."""

    id: UUID
    message_id: str
    event_type: str
    attempt: int
    state: DeliveryState
    response_status: int | None
    duration_ms: int | None
    error: str | None
    next_attempt_at: datetime | None
    created_at: datetime
    attempted_at: datetime | None
