"""What the webhook pages show and read, without routes: an endpoint and an attempt in
words, the endpoint form's values (kept when refused), the bodies it makes (the admin
API's own models: `WebhookEndpointBody` for a new endpoint, `WebhookEndpointPatch` with
only the fields the operator changed), and a refusal as the form's problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import ValidationError

from events_svc import errors
from events_svc.console.web import FieldError, Form, refusal_errors, validation_errors
from events_svc.documents import when
from events_svc.models import WebhookEndpointBody, WebhookEndpointPatch

# the closed list, with what each type means (docs/api.md, "Webhooks")
TYPE_WORDS = {
    "registration.created": "a registration is made",
    "registration.updated": "a registration is corrected",
    "registration.state_changed": "a registration is confirmed, cancelled or attended",
    "registration.checked_in": "an attendee is checked in",
    "order.applied": "an order of the sale is applied",
    "event.published": "an event is published",
    "event.updated": "an event is changed",
    "event.cancelled": "an event is cancelled",
    "event.operation.completed": "an event operation finishes",
    "waitlist.offered": "a waiting-list offer is made",
    "waitlist.accepted": "a waiting-list offer is accepted",
    "ping": "a test message (also sent by “Send a ping” whatever is ticked)",
}
TYPES = [(t, TYPE_WORDS.get(t, "")) for t in errors.EVENT_TYPES]
DELIVERY_STATES = {
    "pending": ("Pending", "info"),
    "succeeded": ("Succeeded", "good"),
    "retrying": ("Retrying", "warn"),
    "failed": ("Failed", "bad"),
}
ATTEMPT_ERRORS = {
    "timeout": "no answer within 10 s",
    "connection": "could not connect",
    "address_not_allowed": "the address is not a public one",
}
DISABLED = {
    "gone": "Disabled: the endpoint answered 410 Gone",
    "failing": "Disabled: every attempt failed for 5 days",
}
# the form's refusals in words (the model's own messages name no bound)
FIELD_WORDS = {
    "url": "Enter the endpoint's address (https://…), 8 to 2 048 characters.",
    "event_types": "Tick at least one event type.",
    "event_id": "Choose an event of the list, or all events.",
    "description": "Keep the description to 500 characters.",
}
# a refusal's words where the API's detail speaks of the API
CODE_WORDS = {
    "webhook_endpoint_disabled": "The endpoint is disabled: enable it before redelivering.",
}
BLANK: dict[str, Any] = {
    "url": "",
    "event_types": [],
    "event_id": "",
    "description": "",
    "include_pii": False,
    "active": True,
}


def endpoint_state(endpoint: Mapping[str, Any]) -> tuple[str, str]:
    """Active, or disabled and why, as (words, badge kind)."""
    if endpoint["active"]:
        return ("Active", "good")
    reason = endpoint["disabled_reason"]
    return (DISABLED.get(reason, "Disabled"), "bad") if reason else ("Disabled", "bad")


def endpoint_row(endpoint: Mapping[str, Any], events: Mapping[str, str]) -> dict[str, Any]:
    """An endpoint as its list row and its facts show it (never its secret)."""
    event_id = endpoint["event_id"]
    return {
        "id": endpoint["id"],
        "url": endpoint["url"],
        "event_types": endpoint["event_types"],
        "event": events.get(str(event_id), str(event_id)) if event_id else "All events",
        "event_id": event_id,
        "description": endpoint["description"],
        "include_pii": endpoint["include_pii"],
        "active": endpoint["active"],
        "state": endpoint_state(endpoint),
        "failing_since": when(endpoint["failing_since"]) if endpoint["failing_since"] else None,
        "rotation_ends_at": (
            when(endpoint["rotation_ends_at"]) if endpoint["rotation_ends_at"] else None
        ),
        "created": when(endpoint["created_at"]),
        "updated": when(endpoint["updated_at"]),
    }


def attempt_row(attempt: Mapping[str, Any]) -> dict[str, Any]:
    """One attempt of the delivery log."""
    state = attempt["state"]
    error = attempt["error"]
    duration = attempt["duration_ms"]
    return {
        "id": attempt["id"],
        "attempt": attempt["attempt"],
        "message_id": attempt["message_id"],
        "event_type": attempt["event_type"],
        "state": DELIVERY_STATES.get(state, (state, "info")),
        "error": ATTEMPT_ERRORS.get(error, error) if error else None,
        "status": attempt["response_status"],
        "duration": f"{duration} ms" if duration is not None else "—",
        "next_attempt": when(attempt["next_attempt_at"]) if attempt["next_attempt_at"] else "—",
        "at": when(attempt["created_at"]),
    }


def typed_values(form: Form) -> dict[str, Any]:
    """The endpoint form as typed (kept when refused; an unknown type is never shown)."""
    return {
        "url": form.text("url"),
        "event_types": [t for t in form.lists.get("event_types", []) if t],
        "event_id": form.text("event_id"),
        "description": form.text("description"),
        "include_pii": form.values.get("include_pii") == "1",
        "active": form.values.get("active") == "1",
    }


def form_values(endpoint: Mapping[str, Any]) -> dict[str, Any]:
    """The edit form of a stored endpoint."""
    return {
        "url": endpoint["url"],
        "event_types": list(endpoint["event_types"]),
        "event_id": str(endpoint["event_id"]) if endpoint["event_id"] else "",
        "description": endpoint["description"],
        "include_pii": endpoint["include_pii"],
        "active": endpoint["active"],
    }


class Refused(Exception):
    """The form's problems, before any verb ran."""

    def __init__(self, problems: list[FieldError]) -> None:
        super().__init__("refused")
        self.problems = problems


def _event_id(raw: str) -> UUID | None:
    if not raw:
        return None
    try:
        return UUID(raw)
    except ValueError:
        raise Refused(
            [FieldError(FIELD_WORDS["event_id"], "validation_failed", "event_id")]
        ) from None


def model_problems(exc: ValidationError) -> list[FieldError]:
    """The body model's refusal in words, each linked to its field (an event type's
    position folded into `event_types`); a typed refusal keeps its own message."""
    lines = []
    for p in validation_errors(exc):
        name = (p.field or "").split(".")[0] or None
        words = FIELD_WORDS.get(name or "", p.message) if p.code == "validation_failed" else None
        lines.append(FieldError(words or p.message, p.code, name))
    return lines


def new_body(typed: Mapping[str, Any]) -> dict[str, Any]:
    """POST /admin/webhooks's body from the form (the model's checks); `Refused`."""
    try:
        body = WebhookEndpointBody.model_validate(
            {
                "url": typed["url"],
                "event_types": typed["event_types"],
                "event_id": _event_id(typed["event_id"]),
                "description": typed["description"],
                "include_pii": typed["include_pii"],
                "active": typed["active"],
            }
        )
    except ValidationError as exc:
        raise Refused(model_problems(exc)) from None
    return body.model_dump()


def changes_of(
    typed: Mapping[str, Any], current: Mapping[str, Any], *, pii_shown: bool
) -> dict[str, Any]:
    """PATCH /admin/webhooks/{id}'s body: the fields the operator changed (an unchanged
    URL is not judged again), through the model's checks; `Refused`."""
    fields: dict[str, Any] = {
        "url": typed["url"],
        "event_types": typed["event_types"],
        "event_id": _event_id(typed["event_id"]),
        "description": typed["description"],
    }
    if pii_shown:  # without registration:pii the box is not on the page: left as it is
        fields["include_pii"] = typed["include_pii"]
    changed = {k: v for k, v in fields.items() if not _same(k, v, current[k])}
    try:
        return WebhookEndpointPatch.model_validate(changed).given()
    except ValidationError as exc:
        raise Refused(model_problems(exc)) from None


def _same(name: str, typed: Any, stored: Any) -> bool:
    if name == "event_types":
        return isinstance(typed, list) and sorted(typed) == sorted(stored)
    return bool(typed == stored)


def verb_problems(exc: errors.DomainError, *, pii_shown: bool) -> list[FieldError]:
    """A verb's refusal beside the form: the URL guard's at `url`, an unknown event at
    `event_id`, the PII scope at its box (when the page shows it)."""
    if isinstance(exc, errors.MissingScope):
        return [FieldError(exc.detail, exc.code, "include_pii" if pii_shown else None)]
    if isinstance(exc, errors.NotFound):
        return [FieldError("No such event: choose one of the list.", exc.code, "event_id")]
    return [
        FieldError(CODE_WORDS.get(p.code, p.message), p.code, p.field) for p in refusal_errors(exc)
    ]


def opened_at(raw: str) -> datetime | None:
    """When the form was rendered (its hidden `opened`), if it says so readably."""
    try:
        value = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return value if value.tzinfo is not None else None
