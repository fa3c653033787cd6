"""The standalone adapters: templates from event.message_templates, the outbox queue.

The renderer compiles templates with the bounded sandbox of `templating` (checked
when written; bounded in time, size and iterations when rendered), in a template
worker thread before the passes take their row locks (`prepare`), keeps them by
revision, and renders a batch of recipients in one worker-thread hop, so a hostile
template never stalls the service. It says whose each template is
(`template_company`: the company fence of the lines that use it). Any failure of a
render is `render_failed` with a safe detail (never attendee data).
The mail and sms queues write event.outbox_messages in the scheduler's own
transaction, so a receipt and its queued message commit (or vanish) together.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any
from uuid import UUID, uuid4

import jinja2

from events_svc import errors, templating
from events_svc.adapters.lead_webhook import lead_sink_from
from events_svc.adapters.sms_gateway import SmsGatewayTransport
from events_svc.adapters.smtp import SmtpTransport
from events_svc.db import Pool
from events_svc.documents import DocumentBound
from events_svc.ports import (
    Attachment,
    AttachmentUnavailable,
    MailErrorKind,
    MailRefused,
    OutgoingMessage,
    OutgoingSms,
    Ports,
    RefusingTicketsPdf,
    Rendered,
    RenderRequest,
    TicketsPdf,
    Transport,
)
from events_svc.settings import Settings
from events_svc.verbs.public import registration_tickets_pdf

_TEMPLATE = """
SELECT subject, body, revision, attach_tickets FROM event.message_templates
WHERE id = $1 AND kind = $2::event.template_kind
"""
_REVISION = """
SELECT revision FROM event.message_templates WHERE id = $1 AND kind = $2::event.template_kind
"""
_KIND = "SELECT kind::text FROM event.message_templates WHERE id = $1"
_COMPANY = "SELECT company_id FROM event.message_templates WHERE id = $1"
_OUTBOX = """
INSERT INTO event.outbox_messages (channel, recipient, sender, subject, body, event_id,
    registration_id, scheduler_id, attachments, trigger_id, message_id, reply_to)
SELECT channel, recipient, sender, subject, body, event_id, registration_id, scheduler_id,
    attachments::jsonb, trigger_id, message_id, reply_to
FROM unnest($1::event.notification_channel[], $2::text[], $3::text[], $4::text[],
    $5::text[], $6::uuid[], $7::uuid[], $8::uuid[], $9::text[], $10::uuid[], $11::text[],
    $12::text[])
    AS m(channel, recipient, sender, subject, body, event_id, registration_id, scheduler_id,
        attachments, trigger_id, message_id, reply_to)
"""
_CACHE_SIZE = 64  # compiled templates kept (the least recently used goes first)

Key = tuple[UUID, str]


@dataclass(frozen=True)
class _Compiled:
    """One revision of a template, compiled (or why it could not be)."""

    revision: int
    subject: jinja2.Template | None = None
    body: jinja2.Template | None = None
    failure: str | None = None
    attach_tickets: bool = False


def _compile(revision: int, subject: str, body: str, attach_tickets: bool) -> _Compiled:
    """Both texts compiled (in a template worker thread: `templating.off_loop`)."""
    try:
        compiled = (templating.compile_template(subject), templating.compile_template(body))
    except templating.RenderFailed as exc:  # stored before the checks (or limits) were
        return _Compiled(revision, failure=str(exc))
    return _Compiled(revision, *compiled, attach_tickets=attach_tickets)


class StoreRenderer:
    """Renders rows of event.message_templates (kind mail|sms), whose `company_id` fences
    the lines that may use them (`template_company`).

    Compiled templates are cached by (id, kind) with the row's `revision`, which every
    edit bumps: `prepare` (called by the passes before they take row locks) compiles a
    template once per revision, in a template worker thread; `render`, under the locks,
    only reads the row's revision and uses the compiled template. It compiles (still off
    the loop) only for a caller that did not prepare, or for an edit that landed between
    the prepare and the locks.
    """

    def __init__(self) -> None:
        self._cache: OrderedDict[Key, _Compiled] = OrderedDict()

    def _keep(self, key: Key, entry: _Compiled) -> _Compiled:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return entry

    async def _compile(self, conn: Any, key: Key) -> _Compiled | None:
        row = await conn.fetchrow(_TEMPLATE, *key)
        if row is None:
            self._cache.pop(key, None)
            return None
        entry = await templating.off_loop(
            _compile, row["revision"], row["subject"], row["body"], row["attach_tickets"]
        )
        return self._keep(key, entry)

    async def _current(self, conn: Any, key: Key) -> _Compiled | None:
        """The template's current revision, compiled (from the cache, or now); None when
        there is no such template."""
        revision = await conn.fetchval(_REVISION, *key)
        hit = self._cache.get(key)
        if revision is None:
            self._cache.pop(key, None)
            return None
        if hit is None or hit.revision != revision:
            return await self._compile(conn, key)
        return self._keep(key, hit)

    async def prepare(self, conn: Any, template_ref: UUID, template_kind: str) -> None:
        await self._current(conn, (template_ref, template_kind))

    async def _load(self, conn: Any, key: Key) -> _Compiled:
        hit = await self._current(conn, key)
        if hit is None:
            ref, kind = key
            raise MailRefused(MailErrorKind.TEMPLATE_UNRESOLVED, f"no {kind} template {ref}")
        return hit

    async def render(self, conn: Any, request: RenderRequest) -> list[Rendered]:
        entry = await self._load(conn, (request.template_ref, request.template_kind))
        if entry.subject is None or entry.body is None:
            raise MailRefused(MailErrorKind.RENDER_FAILED, entry.failure or "render_failed")
        try:
            texts = await templating.render_pairs(entry.subject, entry.body, request.contexts)
        except templating.RenderFailed as exc:
            raise MailRefused(MailErrorKind.RENDER_FAILED, str(exc)) from None
        attach = entry.attach_tickets
        return [Rendered(subject=s, body=b, attach_tickets=attach) for s, b in texts]

    async def template_kind(self, conn: Any, template_ref: UUID) -> str | None:
        kind: str | None = await conn.fetchval(_KIND, template_ref)
        return kind

    async def template_company(self, conn: Any, template_ref: UUID) -> UUID | None:
        """The template's company; None for a platform template (or no such template)."""
        company: UUID | None = await conn.fetchval(_COMPANY, template_ref)
        return company


def message_id_domain(mail_from: str) -> str:
    """The right-hand side of the Message-IDs we mint: the sender's domain."""
    domain = parseaddr(mail_from)[1].rpartition("@")[2].strip().lower()
    return domain or "events-svc"


class OutboxQueue:
    """Queues into event.outbox_messages inside the caller's transaction.

    Messages of a batch are held per transaction and written by `flush` in one
    statement, before the batch's receipts, in the same transaction. A message's
    attachments are stored as a jsonb list of {filename, content_type, content} (files)
    or {kind: "tickets_pdf", registration_id, ...} (references, rendered when sent); a
    trigger's message carries its `trigger_id` (unique in the outbox). Each row gets its
    RFC 5322 `Message-ID` here, once. With `mail_from` (`EVENTS_MAIL_FROM`) a mail's
    `sender` is that address, and the organiser it was written for becomes `reply_to`.
    """

    def __init__(self, mail_from: str = "", domain: str = "events-svc") -> None:
        self._held: dict[int, list[OutgoingMessage]] = {}
        self.mail_from = mail_from
        self.domain = domain

    def _row(self, m: OutgoingMessage) -> tuple[Any, ...]:
        sender, reply_to = m.sender, ""
        if m.channel == "mail" and self.mail_from and m.sender != self.mail_from:
            sender, reply_to = self.mail_from, m.sender
        return (
            m.channel,
            m.recipient,
            sender,
            m.subject,
            m.body,
            m.event_id,
            m.registration_id,
            m.scheduler_id,
            json.dumps([_stored(a) for a in m.attachments]),
            m.trigger_id,
            f"<{uuid4()}@{self.domain}>",
            reply_to,
        )

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        self._held.setdefault(id(conn), []).append(message)

    async def flush(self, conn: Any) -> None:
        held = self._held.pop(id(conn), [])
        if held:
            rows = [self._row(m) for m in held]
            columns = zip(*rows, strict=True)
            await conn.execute(_OUTBOX, *(list(c) for c in columns))


def _stored(attachment: Attachment) -> dict[str, Any]:
    """An attachment as the outbox keeps it: a file with its content, or a reference."""
    if attachment.kind == "file":
        return {
            "filename": attachment.filename,
            "content_type": attachment.content_type,
            "content": attachment.content,
        }
    return {
        "kind": attachment.kind,
        "registration_id": str(attachment.registration_id),
        "filename": attachment.filename,
        "content_type": attachment.content_type,
    }


class OutboxSmsQueue:
    """Queues text messages into event.outbox_messages (channel `sms`, the phone as the
    recipient, the body text as the body) inside the caller's transaction, like
    `OutboxQueue` (one statement per batch, written by `flush`)."""

    def __init__(self, domain: str = "events-svc") -> None:
        self._outbox = OutboxQueue(domain=domain)

    async def enqueue(self, conn: Any, message: OutgoingSms) -> None:
        as_row = OutgoingMessage(
            channel="sms",
            recipient=message.phone,
            sender=message.sender,
            subject="",
            body=message.body_text,
            event_id=message.event_id,
            registration_id=message.registration_id,
            scheduler_id=message.scheduler_id,
        )
        await self._outbox.enqueue(conn, as_row)

    async def flush(self, conn: Any) -> None:
        await self._outbox.flush(conn)


def transports_from(settings: Settings, tickets: TicketsPdf) -> tuple[Transport, ...]:
    """The outbox's senders this deployment has: SMTP when `EVENTS_SMTP_URL` is set, the
    sms gateway when `EVENTS_SMS_GATEWAY_URL` is; none of them: messages are held."""
    found: list[Transport] = []
    if settings.smtp is not None:
        found.append(
            SmtpTransport(
                settings.smtp,
                settings.mail_from,
                tickets,
                ca_file=settings.smtp_ca_file,
                timeout_s=settings.smtp_timeout_s,
                sessions=settings.smtp_concurrency,
            )
        )
    if settings.sms_gateway_url:
        found.append(
            SmsGatewayTransport(
                settings.sms_gateway_url,
                settings.sms_gateway_secret,
                timeout_s=settings.sms_gateway_timeout_s,
                sessions=settings.sms_gateway_concurrency,
                proxy=settings.outbound_proxy or None,
            )
        )
    return tuple(found)


class StoreTicketsPdf:
    """The attendee's tickets PDF for a mail that references it, rendered from the rows
    when the message is sent (`verbs.public.registration_tickets_pdf`); a registration
    that holds no ticket any more makes the message fail as `render`. It takes a place in
    the process's document bound (`documents`; by default one of its own), waiting its
    turn however long: a mail is never refused for a busy process."""

    def __init__(
        self, database: Callable[[], Pool], documents: DocumentBound | None = None
    ) -> None:
        self.database = database
        self.documents = documents if documents is not None else DocumentBound()

    async def tickets_pdf(self, registration_id: UUID) -> bytes:
        try:
            async with self.documents.queued():
                return await registration_tickets_pdf(self.database(), registration_id)
        except errors.NoActiveTickets:
            raise AttachmentUnavailable("the registration holds no ticket now") from None


def standalone_ports(
    base: Ports | None = None,
    settings: Settings | None = None,
    tickets: TicketsPdf | None = None,
    database: Callable[[], Pool] | None = None,
    documents: DocumentBound | None = None,
) -> Ports:
    """The standalone composition: store renderer and outbox queue (partner directory kept);
    with `settings`, the lead webhook when `EVENT_LEAD_WEBHOOK_URL` is set (else the base's
    lead sink, by default the refusing one) and the outbox's transports (`tickets` renders
    the tickets PDFs that mails reference: by default the store's, from `database`, or
    none without one; it renders within `documents`, the process's document bound: by
    default one of `settings.document_concurrency`)."""
    keep = base or Ports()
    if tickets is None and database is not None:
        if documents is None and settings is not None:
            documents = DocumentBound(settings.document_concurrency)
        tickets = StoreTicketsPdf(database, documents)
    mail_from = settings.mail_from if settings is not None else ""
    domain = message_id_domain(mail_from or (settings.mail_sender if settings else ""))
    return Ports(
        partner_directory=keep.partner_directory,
        template_renderer=StoreRenderer(),
        mail_queue=OutboxQueue(mail_from, domain),
        sms_queue=OutboxSmsQueue(domain),
        lead_sink=lead_sink_from(settings) if settings is not None else keep.lead_sink,
        transports=(
            transports_from(settings, tickets or RefusingTicketsPdf())
            if settings is not None
            else keep.transports
        ),
    )
