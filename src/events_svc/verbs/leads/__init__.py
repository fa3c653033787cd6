"""CRM leads: typed rules that turn registrations into leads, through a leased pass.

- `rules`: the rules (create, read, list, patch, delete);
- `arming`: the ONE place that queues lead requests (a rule's events, a new or confirmed
  registration's event);
- `queue`: the queued requests as operators read them, and the relink of a merged lead;
- `worker`: the pass that claims requests from the leased queue and works each one;
  `walk`: what it does for one event's registrations, grouped and sent to the lead sink.
"""

from events_svc.verbs.leads.arming import WAKE_CHANNEL, queue_for_registrations, queue_for_rule
from events_svc.verbs.leads.worker import LeadOptions, LeadSummary, next_lead_due, run_lead_pass

__all__ = [
    "WAKE_CHANNEL",
    "LeadOptions",
    "LeadSummary",
    "next_lead_due",
    "queue_for_registrations",
    "queue_for_rule",
    "run_lead_pass",
]
