"""The waiting list: held seats, not a second counter (design 7.15).

- `settings`: per event, whether it takes entries, how long an offer is held, the
  offer's mail template;
- `entries`: joining (behind the intake's door and refusals), an entry's status by its
  link, the operator's list;
- `offers`: the offer pass (expire, then offer in queue order), an operator's offer out
  of turn and removal, the person's accept and decline;
- `records`: reads, positions and views.
"""

from events_svc.verbs.waitlist.entries import entry_status, join, list_entries, waitlist_counts
from events_svc.verbs.waitlist.offers import (
    OfferOptions,
    OfferSummary,
    accept,
    decline,
    next_offer_due,
    offer_now,
    remove_entry,
    run_offer_pass,
)
from events_svc.verbs.waitlist.settings import get_settings, put_settings

__all__ = [
    "OfferOptions",
    "OfferSummary",
    "accept",
    "decline",
    "entry_status",
    "get_settings",
    "join",
    "list_entries",
    "next_offer_due",
    "offer_now",
    "put_settings",
    "remove_entry",
    "run_offer_pass",
    "waitlist_counts",
]
