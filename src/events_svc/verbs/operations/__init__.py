"""Event operations: reschedule, cancellation, reminder and follow-up, as resumable
operations that write one immutable trigger per attendee.

- `preview`: an operation is created `previewed` on the event revision it saw, with an
  audience estimate; nothing changes yet.
- `start`: ONE transaction applies the event change (`verbs.events.change`, the same checked
  write as a PATCH), bumps `ics_sequence` once (reschedule, cancellation), snapshots the
  audience into `event.operation_audience` and moves the operation to `running`.
- `batch`: the lifespan loop (and `resume`) turns the snapshot into triggers, one
  transaction per batch, inserting with ON CONFLICT DO NOTHING on the trigger identity.
- `commands`: read, resume, cancel; `view`: an operation as it is answered, and the list.
- `feed`: the triggers in creation order, for any consumer to follow.

The operations lane sends nothing: it writes no outbox row, calls no port and opens no
connection but the database's.
"""

from events_svc.verbs.operations.batch import (
    OperationOptions,
    next_operation_due,
    run_operation_pass,
)
from events_svc.verbs.operations.view import list_operations

__all__ = ["OperationOptions", "list_operations", "next_operation_due", "run_operation_pass"]
