"""The communication scheduler and its stores.

- `lines`: scheduler lines (event.mails) and their derived state;
- `templates`: the standalone template store, fenced by company; `cascade`: what
  deleting a template takes with it (where the actor sees it); `outbox`: what the
  standalone queue holds;
- `arming`: what a registration change owes the scheduler (the arm rule, retries);
- `schedules`: due times, computed at write and recomputed when dates move;
- `due_lines`: the pass that claims due lines; `engines`: what one batch of a line does;
  `send`: rendering and queueing one batch; `failures`: failure kinds, back-off, logs.
"""

from events_svc.verbs.mail.arming import (
    CHANNEL,
    arm_entering_open,
    retry_failed_mails,
    wake_schedulers,
)
from events_svc.verbs.mail.cascade import on_template_deleted
from events_svc.verbs.mail.due_lines import RunSummary, Senders, next_due, run_mail_pass
from events_svc.verbs.mail.failures import count_failing_lines
from events_svc.verbs.mail.lines import check_template_company, line_channel
from events_svc.verbs.mail.schedules import reschedule_event
from events_svc.verbs.mail.send import LinkBuilder, PassOptions, recipient_context, refusal
from events_svc.verbs.mail.templates import check_lines_fit_company

__all__ = [
    "CHANNEL",
    "LinkBuilder",
    "PassOptions",
    "RunSummary",
    "Senders",
    "arm_entering_open",
    "check_lines_fit_company",
    "check_template_company",
    "count_failing_lines",
    "line_channel",
    "next_due",
    "on_template_deleted",
    "recipient_context",
    "refusal",
    "reschedule_event",
    "retry_failed_mails",
    "run_mail_pass",
    "wake_schedulers",
]
