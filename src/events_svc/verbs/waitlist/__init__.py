"""The waiting list: held seats, not a second counter (design 7.15).

- `settings`: per event, whether it takes entries, how long an offer is held, the
  offer's mail template;
- `entries`: joining (behind the intake's door and refusals), an entry's status by its
  link, the operator's list;
- `offering`: an offer made (held drafts through the one seat verb, its mail, its facts),
  an operator's offer out of turn, and an offer released;
- `serving`: the offer pass (close, expire, then offer in queue order; an event whose
  offers fail backs off on its own);
- `answers`: the person's accept and decline, an operator's removal;
- `records`: reads, positions and views.
"""

from events_svc.verbs.waitlist.answers import accept, decline, remove_entry
from events_svc.verbs.waitlist.entries import (
    WAKE_CHANNEL,
    entry_status,
    join,
    list_entries,
    waitlist_counts,
)
from events_svc.verbs.waitlist.offering import OfferOptions, offer_now
from events_svc.verbs.waitlist.serving import OfferSummary, next_offer_due, run_offer_pass
from events_svc.verbs.waitlist.settings import get_settings, put_settings

__all__ = [
    "WAKE_CHANNEL",
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
