"""The public HTML pages: the attendee's tickets, a waiting-list entry, and the event's
page with its registration and waiting-list forms. Pure renderers over what a verb read
(no SQL, no HTTP), in one Jinja2 environment (`frame`)."""

from events_svc.pages.event import ICS_HOLE, EventForm, render_event
from events_svc.pages.frame import FORM_POLICY, PAGE_POLICY
from events_svc.pages.tickets import render_tickets
from events_svc.pages.waitlist import render_entry

__all__ = [
    "FORM_POLICY",
    "ICS_HOLE",
    "PAGE_POLICY",
    "EventForm",
    "render_entry",
    "render_event",
    "render_tickets",
]
