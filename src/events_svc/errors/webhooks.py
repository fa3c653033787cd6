"""The refusals of webhook endpoints, and the closed list of event types they name."""

from __future__ import annotations

from typing import Any

from events_svc.errors.base import DomainError
from events_svc.errors.conflict import Conflict

EVENT_TYPES = (
    "registration.created",
    "registration.updated",
    "registration.state_changed",
    "registration.checked_in",
    "order.applied",
    "event.published",
    "event.updated",
    "event.cancelled",
    "event.operation.completed",
    "waitlist.offered",
    "waitlist.accepted",
    "ping",
)


class WebhookUrlNotAllowed(DomainError):
    """The URL is not one a webhook may be sent to: it must be http(s), carry no
    credentials, and its host must be a public address."""

    code = "webhook_url_not_allowed"
    status = 422


class UnknownEventType(DomainError):
    """An event type must be one of the closed list: registration.created,
    registration.updated, registration.state_changed, registration.checked_in,
    order.applied, event.published, event.updated, event.cancelled,
    event.operation.completed, waitlist.offered, waitlist.accepted, ping."""

    code = "unknown_event_type"
    status = 422

    def __init__(self, detail: str | None = None, **fields: Any) -> None:
        super().__init__(detail, event_types=list(EVENT_TYPES), **fields)


class WebhookEndpointDisabled(Conflict):
    """The endpoint is disabled: enable it (PATCH `active: true`) before redelivering."""

    code = "webhook_endpoint_disabled"
