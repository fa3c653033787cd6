"""The refusals of the trigger dispatcher's template mapping."""

from __future__ import annotations

from typing import Any

from events_svc.errors.base import DomainError

TRIGGER_PURPOSES = ("event_rescheduled", "event_cancelled", "event_reminder", "event_follow_up")


class TriggerPurposeUnknown(DomainError):
    """No such trigger purpose: it is one of event_rescheduled, event_cancelled,
    event_reminder, event_follow_up."""

    code = "trigger_purpose_unknown"
    status = 404

    def __init__(self, detail: str | None = None, **fields: Any) -> None:
        super().__init__(detail, purposes=list(TRIGGER_PURPOSES), **fields)
