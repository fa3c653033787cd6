"""Events and what hangs off them: the event record, its publication and stage, its
calendar-visible changes, its tickets and slots, its questions, and the company-shared
configuration (stages, tags, types) an event is made from.

- `records`: create (applying its type once), read, list, patch, delete;
- `change`: the ONE checked write of an event change (a patch and an event operation);
- `publication`: publish, unpublish, and `is_visible`; `lifecycle`: mark-done and the
  daily done sweep;
- `tickets`: tickets and slots (the seat scopes of an event); `questions`: the question
  library and its links to events and types;
- `catalog`: stages, tag categories, tags and types; `types`: a type's template lines;
  `type_apply`: those lines copied onto a new event once.

The fenced event row every noun starts from is `verbs.fence`, below this package.
"""

from events_svc.verbs.events.catalog import Noun
from events_svc.verbs.events.change import EventChange, plan_change, write_change
from events_svc.verbs.events.lifecycle import sweep_done_events
from events_svc.verbs.events.publication import get_publication_state, is_visible
from events_svc.verbs.events.records import closed_to_registrations, get_event, list_events

__all__ = [
    "EventChange",
    "Noun",
    "closed_to_registrations",
    "get_event",
    "get_publication_state",
    "is_visible",
    "list_events",
    "plan_change",
    "sweep_done_events",
    "write_change",
]
