"""Event operations (reschedule, cancellation, reminder, follow-up) and their triggers."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from events_svc.models.base import Command, Instant, Text, View, ZoneName
from events_svc.models.registrations import Reason

OperationKind = Literal["reschedule", "cancellation", "reminder", "follow_up"]
OperationState = Literal["previewed", "running", "paused", "completed", "cancelled", "failed"]
TriggerPurpose = Literal[
    "event_rescheduled", "event_cancelled", "event_reminder", "event_follow_up"
]


class RescheduleParams(Command):
    """The event's new dates, and optionally its zone and location."""

    date_begin: Instant
    date_end: Instant
    date_tz: ZoneName | None = None
    location: Text | None = None


class CancellationParams(Command):
    """Why the event is cancelled (kept on the operation)."""

    reason: Reason


class CutoffParams(Command):
    """A reminder's or follow-up's audience: registrations created at or before the cutoff
    (not in the future)."""

    audience_cutoff: Instant


# the parameters' model of each kind (the one mapping: requests and stored operations)
PARAMS_OF_KIND: dict[str, type[Command]] = {
    "reschedule": RescheduleParams,
    "cancellation": CancellationParams,
    "reminder": CutoffParams,
    "follow_up": CutoffParams,
}


class OperationCreate(Command):
    """An operation to preview: its kind and the parameters of that kind."""

    kind: OperationKind
    params: RescheduleParams | CancellationParams | CutoffParams

    @model_validator(mode="before")
    @classmethod
    def _params_of_kind(cls, data: Any) -> Any:
        """Read `params` as the kind's model, so a mismatch names the kind's fields."""
        if isinstance(data, dict) and isinstance(data.get("params"), dict):
            model = PARAMS_OF_KIND.get(str(data.get("kind")))
            if model is not None:
                try:
                    return {**data, "params": model.model_validate(data["params"])}
                except ValidationError as exc:  # the same errors, located under `params`
                    details = [
                        InitErrorDetails(
                            # our own types (date_out_of_range, ...) are custom errors
                            type=PydanticCustomError(e["type"], e["msg"]),
                            loc=("params", *e["loc"]),
                            input=e["input"],
                        )
                        for e in exc.errors()
                    ]
                    raise ValidationError.from_exception_data(cls.__name__, details) from None
        return data


class OperationError(View):
    code: str
    at: datetime


class OperationView(View):
    """An operation and its progress. `revision` is the event revision it was previewed
    on (send it as If-Match to start); `event_revision` and `ics_sequence` are the event's
    after the start."""

    id: UUID
    event_id: UUID
    kind: OperationKind
    state: OperationState
    params: dict[str, Any]
    revision: int
    audience_estimate: int
    audience: int
    processed: int
    triggers_created: int
    skipped_inactive: int
    error_count: int
    errors: list[OperationError]
    event_revision: int | None
    ics_sequence: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    next_attempt_at: datetime | None


class TriggerContext(View):
    """The event after the change; for a registration of a slot, the slot's times too
    (its calendar entry is the slot's)."""

    date_begin: datetime
    date_end: datetime
    date_tz: str
    location: str | None
    slot_begin: datetime | None = None
    slot_end: datetime | None = None


class TriggerView(View):
    """A fact for a downstream consumer: never a template, a text, a sender or an
    address."""

    id: UUID
    operation_id: UUID
    event_id: UUID
    registration_id: UUID
    purpose: TriggerPurpose
    event_revision: int
    registration_version: int
    ics_sequence: int
    ics_method: Literal["REQUEST", "CANCEL"] | None
    event_slot_id: UUID | None = None
    context: TriggerContext
    created_at: datetime


class TriggerPage(View):
    """A page of the feed; `next_cursor` is never null: the position after the last item
    (the same position when the page is empty)."""

    items: list[TriggerView]
    next_cursor: str
