"""409: the request is valid, but the current state of the world refuses it."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class Conflict(DomainError):
    """The request conflicts with the current state."""

    code = "conflict"
    status = 409


class AlreadyLinked(Conflict):
    """The link already exists."""

    code = "already_linked"


class AnswerInUse(Conflict):
    """The suggested answer was chosen by attendees; it cannot be deleted."""

    code = "answer_in_use"


class BoothAlreadyConfirmed(Conflict):
    """Another booking of this booth is confirmed; this booking stays pending."""

    code = "booth_already_confirmed"


class BoothCategoryInUse(Conflict):
    """Booths or type booth lines use this category; it cannot be deleted."""

    code = "booth_category_in_use"


class BoothHasBookings(Conflict):
    """The booth has bookings; release it first."""

    code = "booth_has_bookings"


class BoothSaleLinked(Conflict):
    """The booth was booked by an order line; it can never be deleted."""

    code = "booth_sale_linked"


class EventArchived(Conflict):
    """The event is archived (active = false); unarchive it first."""

    code = "event_archived"


class EventCancelled(Conflict):
    """The event is cancelled."""

    code = "event_cancelled"


class EventHasBooths(Conflict):
    """The event has booths; delete them first."""

    code = "event_has_booths"


class EventHasRegistrations(Conflict):
    """The event has registrations; archive it instead of deleting it."""

    code = "event_has_registrations"


class NoPipeEndStage(Conflict):
    """No stage is marked pipe_end; create one before marking events done."""

    code = "no_pipe_end_stage"


class QuestionInUse(Conflict):
    """The question has answers; it cannot be deleted."""

    code = "question_in_use"


class QuestionKindLocked(Conflict):
    """The question has answers; its kind can no longer change."""

    code = "question_kind_locked"


class RegistrationHasNoPartner(Conflict):
    """The registration is not linked to a partner."""

    code = "registration_has_no_partner"


class RegistrationsClosed(Conflict):
    """This event does not take registrations."""

    code = "event_registrations_closed"


class RegistrationsWithoutSlot(Conflict):
    """Registrations without a slot exist; the event cannot become multi-slot."""

    code = "registrations_without_slot"


class SaleWindowClosed(Conflict):
    """The ticket is not on sale at this time."""

    code = "event_sale_window_closed"


class SeatsBelowTaken(Conflict):
    """seats_max cannot go below the seats already taken."""

    code = "seats_below_taken"


class SeatsExhausted(Conflict):
    """Not enough seats left in this scope."""

    code = "event_seats_exhausted"


class SlotHasRegistrations(Conflict):
    """The slot has registrations and cannot be deleted."""

    code = "slot_has_registrations"


class SlotsOutsideEventRange(Conflict):
    """Slots of this event would fall outside the new date range."""

    code = "slots_outside_event_range"


class StageInUse(Conflict):
    """Events are in this stage; move them first."""

    code = "stage_in_use"


class TicketHasRegistrations(Conflict):
    """The ticket has registrations and cannot be deleted."""

    code = "ticket_has_registrations"


class UseReactivate(Conflict):
    """A cancelled registration comes back only through reactivate."""

    code = "use_reactivate"


class DeliveryKeyConflict(Conflict):
    """This delivery key was already used for another fact (another verb or order)."""

    code = "delivery_key_conflict"


class OutboxMessageNotRetryable(Conflict):
    """Only a failed or retrying message can be retried (a queued, sending or sent one is
    already on its way, or gone)."""

    code = "outbox_message_not_retryable"


class IdempotencyKeyConflict(Conflict):
    """This Idempotency-Key was already used for another command (another verb, object or
    body)."""

    code = "idempotency_key_conflict"


class RegistrationNotCancelled(Conflict):
    """Only a cancelled registration can be reactivated."""

    code = "registration_not_cancelled"
