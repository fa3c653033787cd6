"""422: the request is well formed but what it asks for cannot be valid."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class AnswerInvalid(DomainError):
    """The answer does not fit its question's kind."""

    code = "answer_invalid"
    status = 422


class AnswerNotOfQuestion(DomainError):
    """The chosen suggested answer belongs to another question."""

    code = "answer_not_of_question"
    status = 422


class AnswerRequired(DomainError):
    """A mandatory question was not answered."""

    code = "answer_required"
    status = 422


class BoothEventMismatch(DomainError):
    """One order line books booths of one event only, and a booth of this event only."""

    code = "booth_event_mismatch"
    status = 422


class CompanyNotAllowed(DomainError):
    """An actor of a company may only write rows of its own company or shared rows."""

    code = "company_not_allowed"
    status = 422


class DateOrder(DomainError):
    """The end must not be before the beginning."""

    code = "date_order"
    status = 422


class DateOutOfRange(DomainError):
    """Instants must lie in the years 1900 to 9999."""

    code = "date_out_of_range"
    status = 422


class DefaultQuestionNotReusable(DomainError):
    """A default question must be reusable."""

    code = "default_question_not_reusable"
    status = 422


class EventNotMultiSlots(DomainError):
    """Slots belong to multi-slot events only."""

    code = "event_not_multi_slots"
    status = 422


class EventUrlNotAbsolute(DomainError):
    """event_url must be an absolute URL with scheme and host."""

    code = "event_url_not_absolute"
    status = 422


class FieldNotWritable(DomainError):
    """The field is read-only on this route."""

    code = "field_not_writable"
    status = 422


class InvalidCursor(DomainError):
    """The list cursor is not one this service issued."""

    code = "invalid_cursor"
    status = 422


class InvalidJson(DomainError):
    """The body is not valid JSON."""

    code = "invalid_json"
    status = 422


class InvalidTimezone(DomainError):
    """date_tz must be an IANA time zone name."""

    code = "invalid_timezone"
    status = 422


class PartnerNotFound(DomainError):
    """The partner directory does not know this partner."""

    code = "partner_not_found"
    status = 422


class PerOrderCapExceeded(DomainError):
    """More attendees than the ticket allows in one order."""

    code = "per_order_cap_exceeded"
    status = 422


class PerOrderCapOutOfRange(DomainError):
    """limit_max_per_order must be between 0 and 30 and not above the ticket's seats."""

    code = "per_order_cap_out_of_range"
    status = 422


class InvalidCharacters(DomainError):
    """Person-facing text (a name, a company name, an answer) holds a control character:
    C0, DEL, C1 or an unpaired surrogate (a multi-line answer may hold tab and line
    breaks)."""

    code = "invalid_characters"
    status = 422


class PhoneInvalid(DomainError):
    """A phone number is at most 32 characters of digits, spaces and + - ( ) ., with at
    least 6 digits."""

    code = "phone_invalid"
    status = 422


class PublishFenced(DomainError):
    """is_published and date_publish are written only by publish and unpublish."""

    code = "publish_fenced"
    status = 422


class QuestionNotOnEvent(DomainError):
    """The answer refers to a question this event does not ask."""

    code = "question_not_on_event"
    status = 422


class ReferenceNotFound(DomainError):
    """The body refers to an object that does not exist."""

    code = "reference_not_found"
    status = 422


class BoothNotFound(ReferenceNotFound):
    """A booth named in the body does not exist."""

    code = "booth_not_found"


class RegistrationNotInEvent(DomainError):
    """A registration named is not a registration of this event."""

    code = "registration_not_in_event"
    status = 422


class SeatsMaxNegative(DomainError):
    """seats_max must be 0 (unlimited) or more."""

    code = "seats_max_negative"
    status = 422


class SlotNotInEvent(DomainError):
    """The slot is not a slot of this event."""

    code = "slot_not_in_event"
    status = 422


class SlotOutsideEvent(DomainError):
    """A slot must lie inside its event's date range."""

    code = "slot_outside_event"
    status = 422


class SlotRequired(DomainError):
    """This event runs in slots: choose one (event_slot_id)."""

    code = "slot_required"
    status = 422


class TemplateInvalid(DomainError):
    """The template does not compile."""

    code = "template_invalid"
    status = 422


class TemplateNotFound(DomainError):
    """No template has this id."""

    code = "template_not_found"
    status = 422


class TemplateNotInCompany(DomainError):
    """A line may use only a template of its event's (or the actor's) company, or a platform
    template."""

    code = "template_not_in_company"
    status = 422


class TemplateTooComplex(DomainError):
    """The template parses into a larger tree than a template may have (`limit` names the
    bound it passed)."""

    code = "template_too_complex"
    status = 422


class TemplateVariableUnknown(DomainError):
    """The template names a variable outside its documented context."""

    code = "template_variable_unknown"
    status = 422


class TicketNotInEvent(DomainError):
    """The ticket is not a ticket of this event."""

    code = "ticket_not_in_event"
    status = 422


class UnknownField(DomainError):
    """The body carries a field this route does not accept."""

    code = "unknown_field"
    status = 422


class UseMarkDone(DomainError):
    """A terminal (pipe_end) stage is reached only through mark-done."""

    code = "use_mark_done"
    status = 422


class ValidationFailed(DomainError):
    """The body or query does not validate."""

    code = "validation_failed"
    status = 422


class ChannelKindMismatch(ValidationFailed):
    """A line's notification channel follows its template's kind: they must agree."""

    code = "channel_kind_mismatch"
