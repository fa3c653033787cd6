"""The optional trigger dispatcher (`EVENT_TRIGGER_DISPATCH=true`): it follows the
trigger feed with its own cursor (`feed`), turns each trigger into at most one mail
through the composed `TemplateRenderer` and `MailQueue` ports (`mailing`, `message`),
settles one receipt per trigger (`receipts`), and maps each purpose to its template
(`templates`). The event operations write triggers and never send anything; this is
the separate consumer that may.
"""

from events_svc.verbs.dispatch.feed import WAKE_CHANNEL, next_dispatch_due
from events_svc.verbs.dispatch.mailing import DispatchSummary, run_dispatch_pass
from events_svc.verbs.dispatch.templates import list_trigger_templates, set_trigger_template

__all__ = [
    "WAKE_CHANNEL",
    "DispatchSummary",
    "list_trigger_templates",
    "next_dispatch_due",
    "run_dispatch_pass",
    "set_trigger_template",
]
