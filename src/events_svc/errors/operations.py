"""The refusals of event operations (409s and 422s). None of them carries attendee data."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class UseEventOperation(DomainError):
    """The event has attendees: its dates, zone, location and cancellation change only
    through an event operation (POST /admin/events/{id}/operations)."""

    code = "use_event_operation"
    status = 409


class OperationAlreadyStarted(DomainError):
    """The operation is no longer previewed: it was started or cancelled."""

    code = "operation_already_started"
    status = 409


class OperationInProgress(DomainError):
    """An operation of this kind is already in progress on the event (running, paused or
    failed): resume it or cancel it first."""

    code = "operation_in_progress"
    status = 409


class OperationNotStarted(DomainError):
    """The operation is previewed: start it (with If-Match) rather than resume it."""

    code = "operation_not_started"
    status = 409


class OperationFinished(DomainError):
    """The operation is finished (completed or cancelled): it cannot change any more."""

    code = "operation_finished"
    status = 409


class OperationChangesNothing(DomainError):
    """The reschedule names the dates, zone and location the event already has."""

    code = "operation_changes_nothing"
    status = 422


class AudienceCutoffInFuture(DomainError):
    """The audience cutoff may not be in the future."""

    code = "audience_cutoff_in_future"
    status = 422
