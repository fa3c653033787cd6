"""The refusals of the waiting list (joining it, and answering an offer)."""

from __future__ import annotations

from events_svc.errors.base import DomainError
from events_svc.errors.conflict import Conflict


class WaitlistDisabled(Conflict):
    """This event keeps no waiting list."""

    code = "waitlist_disabled"


class WaitlistNotNeeded(Conflict):
    """Seats are available for this request and nobody is waiting for them: register
    instead."""

    code = "waitlist_not_needed"


class WaitlistAlreadyJoined(Conflict):
    """This address already waits for this event, ticket and slot."""

    code = "waitlist_already_joined"


class WaitlistNotOffered(Conflict):
    """This entry holds no offer to answer (still waiting, or already closed)."""

    code = "waitlist_not_offered"


class WaitlistEntryNotWaiting(Conflict):
    """Only a waiting entry can be offered seats."""

    code = "waitlist_entry_not_waiting"


class WaitlistOfferExpired(DomainError):
    """The offer's deadline has passed; its seats went to the next person in the queue."""

    code = "waitlist_offer_expired"
    status = 410
