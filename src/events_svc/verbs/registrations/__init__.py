"""Registrations: how a seat is taken, held and given back, and what an operator does to a
registration afterwards.

- `combiner`: the register verb's entry (`register`), which decides the requests of one
  event that arrive together in one transaction;
- `take_seats`: that ONE seat-taking transaction (`register_batch_in`; `register_in` inside
  the sale seam's own transaction); `answers`: the answers it checks and stores;
- `seats`: the ONE seat counter and the seat read model;
- `states`: the ONE state transition (`write_state`), the officer's state verbs, archiving;
- `records`: reads (masked unless the reader may see PII), counts, the attendee write;
- `corrections`: reasoned corrections, cancel and reactivate; `revisions`: their history
  and the replay store of reasoned commands.
"""

from events_svc.verbs.registrations.combiner import COMBINER, register
from events_svc.verbs.registrations.records import get_registration_state, lock_registration
from events_svc.verbs.registrations.seats import ensure_cap_covers_taken, event_cap, get_seat_view
from events_svc.verbs.registrations.states import (
    lock_event_by_id,
    lock_for_change,
    lock_scope,
    record_transitions,
    write_state,
)
from events_svc.verbs.registrations.take_seats import (
    MintState,
    QueuePlace,
    Registered,
    RegisterRequest,
    SaleMint,
    assess_queue_place,
    register_batch_in,
    register_in,
)

__all__ = [
    "COMBINER",
    "MintState",
    "QueuePlace",
    "RegisterRequest",
    "Registered",
    "SaleMint",
    "assess_queue_place",
    "ensure_cap_covers_taken",
    "event_cap",
    "get_registration_state",
    "get_seat_view",
    "lock_event_by_id",
    "lock_for_change",
    "lock_registration",
    "lock_scope",
    "record_transitions",
    "register",
    "register_batch_in",
    "register_in",
    "write_state",
]
