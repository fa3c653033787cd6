"""The trigger dispatcher's template mapping: the command that sets a purpose's template,
and the view of each purpose (its template, and how many of its triggers wait)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from events_svc.models.base import Command, View


class TriggerTemplateSet(Command):
    """`template_id`: a mail template of the composed renderer (the standalone store's
    `/admin/templates`)."""

    template_id: UUID


class TriggerTemplateView(View):
    """One purpose: its template (null while unmapped: its triggers park), who set it
    when, and its triggers the dispatcher has not settled yet: `pending` (due or soon
    due) and `parked` (backing off; `parked_kinds` says why)."""

    purpose: str
    template_id: UUID | None
    updated_at: datetime | None
    updated_by: str | None
    pending: int
    parked: int
    parked_kinds: list[str]
