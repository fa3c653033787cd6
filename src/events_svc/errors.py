"""The refusal tree: every expected "no" the service can answer.

A `DomainError` carries a stable `code`, an HTTP `status` and a safe default
detail (its docstring). Verbs raise them; one handler in `app.py` renders
`{"error": {"code", "detail", ...fields}}`. Details and fields never carry
secrets, tokens, emails or phone numbers.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DomainError(Exception):
    """The request was refused."""

    code: ClassVar[str] = "refused"
    status: ClassVar[int] = 400
    headers: ClassVar[dict[str, str]] = {}

    def __init__(
        self, detail: str | None = None, *, headers: dict[str, str] | None = None, **fields: Any
    ) -> None:
        self.detail = detail or (self.__doc__ or self.code).strip()
        self.fields = fields
        self.extra_headers = headers or {}
        super().__init__(self.detail)

    def response_headers(self) -> dict[str, str]:
        return {**self.headers, **self.extra_headers}

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "detail": self.detail, **self.fields}}


# --- 401 / 403 / 404 / 412 -------------------------------------------------------------


class Unauthenticated(DomainError):
    """A valid bearer token is required."""

    code = "unauthenticated"
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class MissingScope(DomainError):
    """The token lacks the scope this route needs."""

    code = "missing_scope"
    status = 403


class NotFound(DomainError):
    """No such object."""

    code = "not_found"
    status = 404


class StaleRevision(DomainError):
    """The object changed since the revision named in If-Match."""

    code = "stale_revision"
    status = 412


# --- 422: the request itself is wrong ----------------------------------------------------


class UnknownField(DomainError):
    """The body carries a field this route does not accept."""

    code = "unknown_field"
    status = 422


class ValidationFailed(DomainError):
    """The body or query does not validate."""

    code = "validation_failed"
    status = 422


class FieldNotWritable(DomainError):
    """The field is read-only on this route."""

    code = "field_not_writable"
    status = 422


class PublishFenced(DomainError):
    """is_published and date_publish are written only by publish and unpublish."""

    code = "publish_fenced"
    status = 422


class InvalidTimezone(DomainError):
    """date_tz must be an IANA time zone name."""

    code = "invalid_timezone"
    status = 422


class DateOrder(DomainError):
    """The end must not be before the beginning."""

    code = "date_order"
    status = 422


class EventUrlNotAbsolute(DomainError):
    """event_url must be an absolute URL with scheme and host."""

    code = "event_url_not_absolute"
    status = 422


class PerOrderCapOutOfRange(DomainError):
    """limit_max_per_order must be between 0 and 30 and not above the ticket's seats."""

    code = "per_order_cap_out_of_range"
    status = 422


class SeatsMaxNegative(DomainError):
    """seats_max must be 0 (unlimited) or more."""

    code = "seats_max_negative"
    status = 422


class SlotOutsideEvent(DomainError):
    """A slot must lie inside its event's date range."""

    code = "slot_outside_event"
    status = 422


class DefaultQuestionNotReusable(DomainError):
    """A default question must be reusable."""

    code = "default_question_not_reusable"
    status = 422


class ReferenceNotFound(DomainError):
    """The body refers to an object that does not exist."""

    code = "reference_not_found"
    status = 422


class CompanyNotAllowed(DomainError):
    """An actor of a company may only write rows of its own company or shared rows."""

    code = "company_not_allowed"
    status = 422


class InvalidCursor(DomainError):
    """The list cursor is not one this service issued."""

    code = "invalid_cursor"
    status = 422


class EventNotMultiSlots(DomainError):
    """Slots belong to multi-slot events only."""

    code = "event_not_multi_slots"
    status = 422


class AnswerNotOfQuestion(DomainError):
    """The chosen suggested answer belongs to another question."""

    code = "answer_not_of_question"
    status = 422


# --- 409: the state of the world refuses it ----------------------------------------------


class Conflict(DomainError):
    """The request conflicts with the current state."""

    code = "conflict"
    status = 409


class NoPipeEndStage(Conflict):
    """No stage is marked pipe_end; create one before marking events done."""

    code = "no_pipe_end_stage"


class EventHasRegistrations(Conflict):
    """The event has registrations; archive it instead of deleting it."""

    code = "event_has_registrations"


class TicketHasRegistrations(Conflict):
    """The ticket has registrations and cannot be deleted."""

    code = "ticket_has_registrations"


class SlotHasRegistrations(Conflict):
    """The slot has registrations and cannot be deleted."""

    code = "slot_has_registrations"


class StageInUse(Conflict):
    """Events are in this stage; move them first."""

    code = "stage_in_use"


class QuestionInUse(Conflict):
    """The question has answers; it cannot be deleted."""

    code = "question_in_use"


class QuestionKindLocked(Conflict):
    """The question has answers; its kind can no longer change."""

    code = "question_kind_locked"


class AnswerInUse(Conflict):
    """The suggested answer was chosen by attendees; it cannot be deleted."""

    code = "answer_in_use"


class AlreadyLinked(Conflict):
    """The link already exists."""

    code = "already_linked"


class SlotsOutsideEventRange(Conflict):
    """Slots of this event would fall outside the new date range."""

    code = "slots_outside_event_range"


class RegistrationsWithoutSlot(Conflict):
    """Registrations without a slot exist; the event cannot become multi-slot."""

    code = "registrations_without_slot"


# --- 503 ---------------------------------------------------------------------------------


class Busy(DomainError):
    """The object is busy; retry shortly."""

    code = "busy"
    status = 503
    headers = {"Retry-After": "1"}


class DatabaseUnavailable(DomainError):
    """The database is unavailable; retry shortly."""

    code = "database_unavailable"
    status = 503
    headers = {"Retry-After": "5"}


def all_errors() -> list[type[DomainError]]:
    """Every concrete refusal, for the OpenAPI document and the docs."""
    seen: list[type[DomainError]] = []
    stack: list[type[DomainError]] = [DomainError]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen


class EventArchived(Conflict):
    """The event is archived (active = false); unarchive it first."""

    code = "event_archived"


# --- registrations -----------------------------------------------------------------------


class SeatsExhausted(Conflict):
    """Not enough seats left in this scope."""

    code = "event_seats_exhausted"


class SaleWindowClosed(Conflict):
    """The ticket is not on sale at this time."""

    code = "event_sale_window_closed"


class EventCancelled(Conflict):
    """The event is cancelled."""

    code = "event_cancelled"


class SlotRequired(DomainError):
    """This event runs in slots: choose one (event_slot_id)."""

    code = "slot_required"
    status = 422


class SlotNotInEvent(DomainError):
    """The slot is not a slot of this event."""

    code = "slot_not_in_event"
    status = 422


class TicketNotInEvent(DomainError):
    """The ticket is not a ticket of this event."""

    code = "ticket_not_in_event"
    status = 422


class PerOrderCapExceeded(DomainError):
    """More attendees than the ticket allows in one order."""

    code = "per_order_cap_exceeded"
    status = 422


class QuestionNotOnEvent(DomainError):
    """The answer refers to a question this event does not ask."""

    code = "question_not_on_event"
    status = 422


class AnswerInvalid(DomainError):
    """The answer does not fit its question's kind."""

    code = "answer_invalid"
    status = 422


class AnswerRequired(DomainError):
    """A mandatory question was not answered."""

    code = "answer_required"
    status = 422


class RegistrationHasNoPartner(Conflict):
    """The registration is not linked to a partner."""

    code = "registration_has_no_partner"


class PartnerNotFound(DomainError):
    """The partner directory does not know this partner."""

    code = "partner_not_found"
    status = 422


# --- public surface ----------------------------------------------------------------------


class CapabilitySecretNotConfigured(DomainError):
    """Capability links are not available: no secret is configured."""

    code = "event_capability_secret_not_configured"
    status = 503


class EventNotPublished(DomainError):
    """Not found."""

    code = "event_not_published"
    status = 404


class RegistrationsClosed(Conflict):
    """This event does not take registrations."""

    code = "event_registrations_closed"


class RegistrationNotInEvent(DomainError):
    """A registration named is not a registration of this event."""

    code = "registration_not_in_event"
    status = 422


class RateLimited(DomainError):
    """Too many requests; retry later."""

    code = "rate_limited"
    status = 429


# --- request limits and input shape ------------------------------------------------------


class PayloadTooLarge(DomainError):
    """The request body is larger than this route accepts."""

    code = "payload_too_large"
    status = 413


class InvalidJson(DomainError):
    """The body is not valid JSON."""

    code = "invalid_json"
    status = 422


class DateOutOfRange(DomainError):
    """Instants must lie in the years 1900 to 9999."""

    code = "date_out_of_range"
    status = 422


class PhoneInvalid(DomainError):
    """A phone number is at most 32 characters of digits, spaces and + - ( ) ., with at
    least 6 digits."""

    code = "phone_invalid"
    status = 422


class SeatsBelowTaken(Conflict):
    """seats_max cannot go below the seats already taken."""

    code = "seats_below_taken"


# --- templates ---------------------------------------------------------------------------


class TemplateInvalid(DomainError):
    """The template does not compile."""

    code = "template_invalid"
    status = 422


class TemplateVariableUnknown(DomainError):
    """The template names a variable outside its documented context."""

    code = "template_variable_unknown"
    status = 422


class TemplateNotFound(DomainError):
    """No template has this id."""

    code = "template_not_found"
    status = 422
