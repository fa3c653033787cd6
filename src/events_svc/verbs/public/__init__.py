"""The public surface's verbs.

- `capabilities`: the links operators mint (calendar, my-tickets, private registration),
  each audited;
- `calendar`: the calendar document a calendar link opens;
- `tickets`: the attendee's tickets behind a my-tickets link (the page's view, the tickets
  PDF of a link and of one registration);
- `intake`: what a public intake request may register for, and the guarded intake;
- `reads`: the event row as the public reads read it.

Public reads answer one uniform 404 (`event_not_published`, the same body) for a token
that is tampered, expired, of another purpose or signed by a removed secret, and for an
event that is missing, unpublished or archived, or a slot of another event: nothing tells
one case from another. Public reads write nothing.
"""

from events_svc.verbs.public.calendar import calendar
from events_svc.verbs.public.capabilities import mint_ics, mint_intake, mint_my_tickets
from events_svc.verbs.public.intake import (
    PUBLIC_INTAKE,
    check_admitted,
    intake_event,
    intake_key,
    register_intake,
)
from events_svc.verbs.public.tickets import (
    link_tickets,
    my_tickets,
    registration_tickets_pdf,
    ticket_pages,
    tickets_pdf,
)

__all__ = [
    "PUBLIC_INTAKE",
    "calendar",
    "check_admitted",
    "intake_event",
    "intake_key",
    "link_tickets",
    "mint_ics",
    "mint_intake",
    "mint_my_tickets",
    "my_tickets",
    "register_intake",
    "registration_tickets_pdf",
    "ticket_pages",
    "tickets_pdf",
]
