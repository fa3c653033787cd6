"""Host ports: small Protocols the host may implement, with refusing defaults.

Missing wiring is loud: a `Refusing*` default raises a typed refusal, never a
silent skip. The standalone composition (`events-svc serve`) installs its own
adapters where it has them.

A template renderer may add two optional members, each its own Protocol so that a
host's renderer with only `render` and `template_kind` stays a complete one:
`template_company` (`TemplateCompanies`: whose template it is; lines are then fenced by
it, 422 `template_not_in_company`) and `prepare` (`TemplatePreparer`: compile before
the passes take their row locks). Verbs reach them through `template_company` and
`prepare_template` below, which are no-ops for a renderer without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable
from uuid import UUID

from events_svc import errors


@dataclass(frozen=True)
class PartnerContact:
    """What a partner directory knows of a party: its contact fields."""

    name: str = ""
    email: str = ""
    phone: str = ""
    company_name: str = ""


class PartnerDirectory(Protocol):
    async def contact(self, partner_id: UUID) -> PartnerContact | None:
        """The partner's contact fields, or None when the partner is unknown."""
        ...


class RefusingPartnerDirectory:
    """The default: refuses every lookup with 503 partner_directory_not_composed."""

    async def contact(self, partner_id: UUID) -> PartnerContact | None:
        raise errors.PartnerDirectoryNotComposed()


# --- communication: rendering and queueing --------------------------------------------------


class MailErrorKind(StrEnum):
    """Why a scheduler line (or one recipient) could not be sent."""

    TEMPLATE_UNRESOLVED = "template_unresolved"
    TEMPLATE_RENDERER_NOT_COMPOSED = "template_renderer_not_composed"
    RENDER_FAILED = "render_failed"
    ENQUEUE_REFUSED = "enqueue_refused"
    SMS_ENQUEUE_REFUSED = "sms_enqueue_refused"  # no SMS gateway composed: parked, retried
    RECIPIENT_INVALID = "recipient_invalid"  # one attendee: a failed receipt, not the line
    BATCH_FAILED = "batch_failed"  # the batch raised: rolled back, recorded afresh


class MailRefused(Exception):
    """A typed reason why a batch could not be rendered or queued: a `MailErrorKind`
    (the scheduler records any other kind as the default of the step that raised). The
    message never carries attendee data."""

    def __init__(self, kind: MailErrorKind, message: str = "") -> None:
        super().__init__(message or kind)
        self.kind = kind


@dataclass(frozen=True)
class RenderRequest:
    """What to render: a template (logical id + kind) and the context of each recipient of
    one batch (the same template for all of them)."""

    template_ref: UUID
    template_kind: str
    contexts: list[dict[str, Any]]


@dataclass(frozen=True)
class Rendered:
    """One recipient's text; `attach_tickets` when the template sends the attendee's
    tickets PDF with the mail (`tickets_reference`)."""

    subject: str
    body: str
    attach_tickets: bool = False


@dataclass(frozen=True)
class Attachment:
    """A file a message carries: an `.ics` calendar of the trigger dispatcher, whose
    `content_type` is `text/calendar; method=REQUEST` (or `CANCEL`) and `content` the
    calendar text; or (`kind` `tickets_pdf`) a reference to a registration's tickets,
    rendered when the message is sent, never stored."""

    filename: str
    content_type: str
    content: str | None = None
    kind: str = "file"
    registration_id: UUID | None = None


def attachments_of(text: Rendered, registration_id: UUID) -> tuple[Attachment, ...]:
    """The files a rendered mail carries by its template: the attendee's tickets, as a
    reference the transport renders when it sends (the outbox never holds the PDF)."""
    if not text.attach_tickets:
        return ()
    reference = Attachment(
        "tickets.pdf", "application/pdf", kind="tickets_pdf", registration_id=registration_id
    )
    return (reference,)


@dataclass(frozen=True)
class OutgoingMessage:
    """One queued message ('sent' means queued): of a scheduler line (`scheduler_id`) or
    of a trigger (`trigger_id`, one message per trigger: a queue may use it as the
    message's idempotency key)."""

    channel: str
    recipient: str
    sender: str
    subject: str
    body: str
    event_id: UUID
    registration_id: UUID
    scheduler_id: UUID | None = None
    attachments: tuple[Attachment, ...] = ()
    trigger_id: UUID | None = None


@dataclass(frozen=True)
class OutgoingSms:
    """One queued text message ('sent' means queued): the phone and the body text."""

    phone: str
    body_text: str
    sender: str
    event_id: UUID
    registration_id: UUID
    scheduler_id: UUID


class TemplateRenderer(Protocol):
    async def render(self, conn: Any, request: RenderRequest) -> list[Rendered]:
        """Render subject and body for each context, in order, or raise MailRefused
        (template_unresolved, render_failed) for the whole batch.

        `conn` is the scheduler's open transaction (the standalone store reads through it:
        the pass never needs a second connection). Any other exception is also taken as
        the line's `render_failed`."""
        ...

    async def template_kind(self, conn: Any, template_ref: UUID) -> str | None:
        """The kind (`mail`, `sms`) of the template, or None when there is no such
        template: a scheduler or type line naming it is refused (422 template_not_found).
        `conn` is the writing verb's open transaction."""
        ...


@runtime_checkable
class TemplateCompanies(Protocol):
    """Optional beside `TemplateRenderer`: a renderer whose templates belong to companies
    (the standalone store does). With it, a line may name only a template of the line's
    company or a platform template (422 `template_not_in_company`): an event's line, of
    the event's company; a type's line, of the writing actor's; the dispatcher's shared
    mapping, a platform template only. A host's renderer without it answers for its own
    templates: the service then lets any template it knows serve any company's lines,
    so a host that keeps templates per tenant implements this member."""

    async def template_company(self, conn: Any, template_ref: UUID) -> UUID | None:
        """The company that owns the template, or None for a platform template (usable
        by every company). Asked only of a template `template_kind` found."""
        ...


@runtime_checkable
class TemplatePreparer(Protocol):
    """Optional beside `TemplateRenderer`: compile a template BEFORE the caller takes row
    locks. The scheduler pass calls it for a line's template after picking the line and
    before claiming it; the dispatcher, for its mapped templates before each claim; so
    `render`, called under those locks, finds the template compiled. A renderer without
    it compiles when it renders (and should keep that off the event loop)."""

    async def prepare(self, conn: Any, template_ref: UUID, template_kind: str) -> None:
        """Make `render` of this template cheap (compile and cache it); never raises for
        a missing or broken template (`render` reports those). `conn` holds no lock."""
        ...


async def template_company(
    renderer: TemplateRenderer, conn: Any, template_ref: UUID
) -> tuple[bool, UUID | None]:
    """(whether the renderer fences its templates by company, the template's company)."""
    if isinstance(renderer, TemplateCompanies):
        return True, await renderer.template_company(conn, template_ref)
    return False, None


async def prepare_template(
    renderer: TemplateRenderer, conn: Any, template_ref: UUID, template_kind: str
) -> None:
    """Compile the template now, before row locks are taken (no-op without `prepare`)."""
    if isinstance(renderer, TemplatePreparer):
        await renderer.prepare(conn, template_ref, template_kind)


class MailQueue(Protocol):
    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        """Queue one message; `conn` is the scheduler's open transaction (the standalone
        outbox writes in it, so a receipt and its queued mail commit together)."""
        ...

    async def flush(self, conn: Any) -> None:
        """Called once per batch, before its receipts are written, in the same transaction."""
        ...


class SmsQueue(Protocol):
    async def enqueue(self, conn: Any, message: OutgoingSms) -> None:
        """Queue one text message to `message.phone`; `conn` is the scheduler's open
        transaction. Raise MailRefused(sms_enqueue_refused) to refuse: the receipt stays
        unsent, the line backs off and is retried."""
        ...

    async def flush(self, conn: Any) -> None:
        """Called once per batch, before its receipts are written, in the same transaction."""
        ...


class RefusingTemplateRenderer:
    """The default when no renderer is composed: every send fails visibly, and writing a
    line that names a template answers 503 template_renderer_not_composed."""

    async def render(self, conn: Any, request: RenderRequest) -> list[Rendered]:
        raise MailRefused(
            MailErrorKind.TEMPLATE_RENDERER_NOT_COMPOSED, "no template renderer is composed"
        )

    async def template_kind(self, conn: Any, template_ref: UUID) -> str | None:
        raise errors.TemplateRendererNotComposed()


class RefusingMailQueue:
    """The default when no mail queue is composed: every send fails visibly."""

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        raise MailRefused(MailErrorKind.ENQUEUE_REFUSED, "no mail queue is composed")

    async def flush(self, conn: Any) -> None:
        return None


class RefusingSmsQueue:
    """No SMS gateway is composed: every SMS line parks loudly (`sms_enqueue_refused`)."""

    async def enqueue(self, conn: Any, message: OutgoingSms) -> None:
        raise MailRefused(MailErrorKind.SMS_ENQUEUE_REFUSED, "no sms queue is composed")

    async def flush(self, conn: Any) -> None:
        return None


# --- CRM leads: the sink the lead pass hands its groups to ---------------------------------


@dataclass(frozen=True)
class LeadDelivery:
    """One call of the lead sink: a group of one rule, the whole group's registrations and
    the ones this delivery adds. `idempotency_key` is `<provenance id>:<delivery number>`:
    a retried call repeats it, and an update never reuses its create's."""

    action: str  # create | update
    rule_id: UUID
    event_id: UUID
    grain: str  # per_order | per_event_day
    group_key: str
    lead_id: str | None  # None on create
    registration_ids: list[UUID]
    new_registration_ids: list[UUID]
    idempotency_key: str


class LeadRefused(Exception):
    """The sink refused (or could not take) a delivery; the message is a safe reason (never
    attendee data). The lead pass parks the request and retries it, backing off."""


class LeadSink(Protocol):
    async def create_lead(self, delivery: LeadDelivery) -> str:
        """Create the group's lead; answers its id. Raise LeadRefused to refuse."""
        ...

    async def update_lead(self, delivery: LeadDelivery) -> None:
        """Tell the lead `delivery.lead_id` about the group's new registrations."""
        ...


class RefusingLeadSink:
    """No lead sink is composed: every delivery is refused, and its request parks loudly."""

    async def create_lead(self, delivery: LeadDelivery) -> str:
        raise LeadRefused("lead_sink_not_composed")

    async def update_lead(self, delivery: LeadDelivery) -> None:
        raise LeadRefused("lead_sink_not_composed")


# --- delivery: what the drainer hands the standalone transports -----------------------------


class DeliveryErrorKind(StrEnum):
    """Why one attempt to send an outbox message failed (its `last_error.kind`)."""

    CONNECTION = "connection"  # refused, dropped before the answer, TLS or AUTH refused
    TIMEOUT = "timeout"  # the relay (or gateway) did not answer in time
    TEMPORARY = "temporary"  # a 4xx SMTP reply; HTTP 429 or 5xx
    PERMANENT = "permanent"  # a 5xx SMTP reply; any other HTTP 4xx
    EXPIRED = "expired"  # temporary failures for 48 h after the message was written
    RENDER = "render"  # the message cannot be built (an attachment's source is gone)


@dataclass(frozen=True)
class HttpAnswer:
    """What one outgoing HTTP attempt got (`adapters.http`): the status (None: no answer),
    how long it took, why it failed without a status (`timeout`, `connection`,
    `address_not_allowed`), and the body (bounded) when the caller kept it."""

    status: int | None
    duration_ms: int
    error: str | None = None
    body: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@runtime_checkable
class Closable(Protocol):
    """A port adapter holding connections (the lead sink's client): closed with the
    passes that use it."""

    async def close(self) -> None: ...


@dataclass(frozen=True)
class DeliveryFailure:
    """One failed attempt. `detail` never holds an address or a body. `relay_down` says
    the relay itself failed (the connection, TLS, AUTH, a dropped or stalled session), not
    this message: the drainer then stops sending the rest of its batch, which waits with
    the same failure instead of hammering a broken relay."""

    kind: DeliveryErrorKind
    code: int | None = None
    detail: str = ""
    relay_down: bool = False


@dataclass(frozen=True)
class QueuedMessage:
    """An outbox row claimed for sending. `attachments` are the stored entries: files
    (`{filename, content_type, content}`) or references (`{kind: "tickets_pdf",
    registration_id, filename, content_type}`) rendered when the message is built."""

    id: UUID
    channel: str
    message_id: str
    recipient: str
    sender: str
    reply_to: str
    subject: str
    body: str
    attachments: tuple[dict[str, Any], ...]
    event_id: UUID | None
    registration_id: UUID | None


class Transport(Protocol):
    """Sends the outbox messages of one channel (`mail`, `sms`); the drainer calls `send`
    outside any transaction, concurrently, and records its answer."""

    channel: str
    sessions: int  # how many messages it sends at once
    # where it sends, as its log lines name it: `host:port`, never a path, query or
    # credential (`observability.host_of`); a host's transport without it logs "unknown"
    host: str

    async def send(self, message: QueuedMessage) -> DeliveryFailure | None:
        """None when the relay (or gateway) accepted the message; else why not. Never
        raises for a refusal, a timeout or a lost connection."""
        ...

    async def close(self) -> None:
        """Close the sessions it keeps."""
        ...


class AttachmentUnavailable(Exception):
    """An attachment's source cannot be rendered (a `render` failure of the message); the
    message is a safe reason (never attendee data)."""


class TicketsPdf(Protocol):
    async def tickets_pdf(self, registration_id: UUID) -> bytes:
        """The registration's tickets as a PDF, rendered now; raise AttachmentUnavailable
        when there is none to render."""
        ...


class RefusingTicketsPdf:
    """No tickets renderer is composed: a message that references tickets cannot be built
    (`render`), visibly, instead of leaving without them."""

    async def tickets_pdf(self, registration_id: UUID) -> bytes:
        raise AttachmentUnavailable("no tickets renderer is composed")


@dataclass(frozen=True)
class Ports:
    """The bundle of host ports handed to `create_app`. `transports` are the senders of
    the standalone outbox (none: messages are held in it)."""

    partner_directory: PartnerDirectory = field(default_factory=RefusingPartnerDirectory)
    template_renderer: TemplateRenderer = field(default_factory=RefusingTemplateRenderer)
    mail_queue: MailQueue = field(default_factory=RefusingMailQueue)
    lead_sink: LeadSink = field(default_factory=RefusingLeadSink)
    sms_queue: SmsQueue = field(default_factory=RefusingSmsQueue)
    transports: tuple[Transport, ...] = ()


async def close_ports(ports: Ports) -> None:
    """Close what the ports hold open (the outbox's relay sessions and clients, a lead
    sink's client): called once by whoever made them, after the passes stopped."""
    for transport in ports.transports:
        await transport.close()
    if isinstance(ports.lead_sink, Closable):
        await ports.lead_sink.close()
