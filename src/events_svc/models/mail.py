"""Communication: scheduler lines (mails), runs, the template store and the outbox."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from events_svc.models.base import (
    Bool,
    Channel,
    Command,
    IntervalKind,
    IntervalNbr,
    IntervalUnit,
    Name,
    Sequence,
    View,
)

MailState = Literal["running", "scheduled", "sent", "error", "cancelled"]
Subject = Annotated[str, Field(max_length=1000)]
Body = Annotated[str, Field(min_length=1, max_length=100_000)]


class MailCreate(Command):
    event_id: UUID
    interval_nbr: IntervalNbr = 1
    interval_unit: IntervalUnit = "hours"
    interval_kind: IntervalKind = "before_event"
    template_ref: UUID
    # follows the template's kind; named, it must agree with it
    notification_channel: Channel | None = None
    sequence: Sequence = 10


class MailPatch(Command):
    interval_nbr: IntervalNbr | None = None
    interval_unit: IntervalUnit | None = None
    interval_kind: IntervalKind | None = None
    template_ref: UUID | None = None
    notification_channel: Channel | None = None
    sequence: Sequence | None = None


class MailView(View):
    """A scheduler line; `mail_state` is derived, the counts are receipts."""

    id: UUID
    event_id: UUID
    sequence: int
    interval_nbr: int
    interval_unit: IntervalUnit
    interval_kind: IntervalKind
    template_ref: UUID
    notification_channel: Channel
    scheduled_date: datetime | None
    mail_done: bool
    mail_state: MailState
    error_kind: str | None
    error_datetime: datetime | None
    error_detail: str | None = None
    attempts: int = 0
    next_attempt_at: datetime | None = None
    count_sent: int
    count_dropped: int
    count_pending: int
    count_failed: int = 0
    created_at: datetime
    updated_at: datetime


class RunSummary(View):
    """What one scheduler pass did; `failures` counts the failure kinds met."""

    schedulers: int
    sent: int
    dropped: int
    failed: int
    pruned: int
    more: bool
    failures: dict[str, int]
    recipients_failed: int = 0
    offers_made: int = 0  # waiting-list offers made by the pass
    offers_expired: int = 0  # waiting-list offers that ran out and were released
    offers_closed: int = 0  # waiting-list entries of cancelled or finished events closed


class PassView(View):
    """One pass of a run: `ran` (its own integer counters), `skipped` with why (`disabled`,
    `not_due`), or `failed` with the error's class."""

    name: str
    status: Literal["ran", "skipped", "failed"]
    counts: dict[str, int]
    detail: str | None


class PassesRunView(RunSummary):
    """`POST /admin/schedulers/run`: the run summary of before (the mail lines' counts and
    the offers'), and every pass of the one composition in the order it ran."""

    passes: list[PassView]


class MailRunView(View):
    summary: RunSummary
    mail: MailView


class TemplateCreate(Command):
    kind: Channel = "mail"
    name: Name
    subject: Subject = ""
    body: Body
    attach_tickets: Bool = False  # mail only: the attendee's tickets PDF goes with the mail


class TemplatePatch(Command):
    name: Name | None = None
    subject: Subject | None = None
    body: Body | None = None
    attach_tickets: Bool | None = None


class TemplateView(View):
    """A stored template; `links_unavailable` names the links that render empty here.
    `company_id` (read-only) is the company it belongs to: the creating actor's, or null
    for a platform template (usable by every company, written by platform operators)."""

    id: UUID
    kind: Channel
    name: str
    subject: str
    body: str
    attach_tickets: bool = False
    company_id: UUID | None = None
    links_unavailable: list[str] = Field(default_factory=list)
    created_at: datetime
    updated_at: datetime


class TemplateDeleted(View):
    """What deleting a template took with it."""

    mails_deleted: int
    type_lines_deleted: int
    trigger_purposes_unmapped: list[str]  # the dispatcher's purposes that mapped to it
    waitlist_offer_templates_unset: int = 0  # events whose offers now use the built-in text


DeliveryState = Literal["queued", "sending", "sent", "retrying", "failed"]
DeliveryErrorKind = Literal["connection", "timeout", "temporary", "permanent", "expired", "render"]


class Attachment(View):
    """A file the message carries, or a reference rendered when it is sent (`kind`
    `tickets_pdf` with its `registration_id`; `content` is then always null)."""

    filename: str
    content_type: str
    content: str | None
    kind: Literal["file", "tickets_pdf"] = "file"
    registration_id: UUID | None = None

    @model_serializer(mode="wrap")
    def _shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A file answers `{filename, content_type, content}` as it always did; only a
        reference names its kind and registration."""
        out: dict[str, Any] = handler(self)
        if self.kind == "file":
            out.pop("kind", None)
            out.pop("registration_id", None)
        return out


class DeliveryError(View):
    """Why the last attempt failed: `code` is the SMTP or HTTP status (or null); `detail`
    never holds an address or a body."""

    kind: DeliveryErrorKind
    code: int | None = None
    detail: str = ""


class OutboxMessage(View):
    """A queued message; subject, body and attachment contents are null unless read with
    pii=full."""

    id: UUID
    channel: Channel
    recipient: str
    sender: str
    subject: str | None
    body: str | None
    attachments: list[Attachment] = Field(default_factory=list)
    event_id: UUID | None
    registration_id: UUID | None
    scheduler_id: UUID | None
    trigger_id: UUID | None = None
    created_at: datetime
    delivery_state: DeliveryState
    attempts: int
    next_attempt_at: datetime | None = None  # when it is tried next; null once sent or failed
    sent_at: datetime | None = None
    message_id: str
    last_error: DeliveryError | None = None


class OutboxSummary(View):
    """Messages in each delivery state."""

    queued: int
    sending: int
    sent: int
    retrying: int
    failed: int
