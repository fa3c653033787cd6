"""The communication scheduler and its stores.

- `lines`: scheduler lines (event.mails) and their derived state;
- `templates`: the standalone template store; `outbox`: what the standalone queue holds;
- `arming`: what a registration change owes the scheduler (the arm rule, retries);
- `schedules`: due times, computed at write and recomputed when dates move;
- `pass_`: the pass that claims due lines; `engines`: what one batch of a line does;
  `send`: rendering and queueing one batch; `failures`: failure kinds, back-off, logs.
"""
