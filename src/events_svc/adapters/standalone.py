"""The standalone adapters: templates from event.message_templates, the outbox queue.

The renderer compiles templates with the bounded sandbox of `templating` (checked
when written; bounded in time, size and iterations when rendered) and renders a
batch of recipients in one worker-thread hop, so a hostile template never stalls
the service. Any
failure of a render is `render_failed` with a safe detail (never attendee data).
The mail and sms queues write event.outbox_messages in the scheduler's own
transaction, so a receipt and its queued message commit (or vanish) together.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any
from uuid import UUID

import jinja2

from events_svc import templating
from events_svc.adapters.lead_webhook import lead_sink_from
from events_svc.ports import (
    MailErrorKind,
    MailRefused,
    OutgoingMessage,
    OutgoingSms,
    Ports,
    Rendered,
    RenderRequest,
)
from events_svc.settings import Settings

_TEMPLATE = """
SELECT subject, body FROM event.message_templates WHERE id = $1 AND kind = $2::event.template_kind
"""
_KIND = "SELECT kind::text FROM event.message_templates WHERE id = $1"
_OUTBOX = """
INSERT INTO event.outbox_messages (channel, recipient, sender, subject, body, event_id,
    registration_id, scheduler_id, attachments, trigger_id)
SELECT channel, recipient, sender, subject, body, event_id, registration_id, scheduler_id,
    attachments::jsonb, trigger_id
FROM unnest($1::event.notification_channel[], $2::text[], $3::text[], $4::text[],
    $5::text[], $6::uuid[], $7::uuid[], $8::uuid[], $9::text[], $10::uuid[])
    AS m(channel, recipient, sender, subject, body, event_id, registration_id, scheduler_id,
        attachments, trigger_id)
"""
_CACHE_SECONDS = 5.0  # an edited template is used by passes at most this much later


class StoreRenderer:
    """Renders rows of event.message_templates (kind mail|sms)."""

    def __init__(self) -> None:
        # compiled (subject, body) per template, kept briefly: a pass renders one template
        # for many recipients, and must not query and compile it for each of them
        self._cache: dict[tuple[UUID, str], tuple[float, jinja2.Template, jinja2.Template]] = {}

    async def _load(
        self, conn: Any, ref: UUID, kind: str
    ) -> tuple[jinja2.Template, jinja2.Template]:
        hit = self._cache.get((ref, kind))
        if hit is not None and time.monotonic() - hit[0] < _CACHE_SECONDS:
            return hit[1], hit[2]
        row = await conn.fetchrow(_TEMPLATE, ref, kind)
        if row is None:
            self._cache.pop((ref, kind), None)
            raise MailRefused(MailErrorKind.TEMPLATE_UNRESOLVED, f"no {kind} template {ref}")
        try:
            compiled = (
                templating.compile_template(row["subject"]),
                templating.compile_template(row["body"]),
            )
        except templating.RenderFailed as exc:  # stored before templates were checked
            raise MailRefused(MailErrorKind.RENDER_FAILED, str(exc)) from None
        self._cache[(ref, kind)] = (time.monotonic(), *compiled)
        return compiled

    async def render(self, conn: Any, request: RenderRequest) -> list[Rendered]:
        subject, body = await self._load(conn, request.template_ref, request.template_kind)
        try:
            texts = await templating.render_pairs(subject, body, request.contexts)
        except templating.RenderFailed as exc:
            # the next attempt reads the template again: an operator's fix applies at once
            self._cache.pop((request.template_ref, request.template_kind), None)
            raise MailRefused(MailErrorKind.RENDER_FAILED, str(exc)) from None
        return [Rendered(subject=s, body=b) for s, b in texts]

    async def template_kind(self, conn: Any, template_ref: UUID) -> str | None:
        kind: str | None = await conn.fetchval(_KIND, template_ref)
        return kind


class OutboxQueue:
    """Queues into event.outbox_messages inside the caller's transaction.

    Messages of a batch are held per transaction and written by `flush` in one
    statement, before the batch's receipts, in the same transaction. A message's
    attachments are stored as a jsonb list of {filename, content_type, content}; a
    trigger's message carries its `trigger_id` (unique in the outbox).
    """

    def __init__(self) -> None:
        self._held: dict[int, list[OutgoingMessage]] = {}

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        self._held.setdefault(id(conn), []).append(message)

    async def flush(self, conn: Any) -> None:
        held = self._held.pop(id(conn), [])
        if held:
            rows = [
                (
                    m.channel,
                    m.recipient,
                    m.sender,
                    m.subject,
                    m.body,
                    m.event_id,
                    m.registration_id,
                    m.scheduler_id,
                    # the attachments as a jsonb list of {filename, content_type, content}
                    json.dumps([dataclasses.asdict(a) for a in m.attachments]),
                    m.trigger_id,
                )
                for m in held
            ]
            columns = zip(*rows, strict=True)
            await conn.execute(_OUTBOX, *(list(c) for c in columns))


class OutboxSmsQueue:
    """Queues text messages into event.outbox_messages (channel `sms`, the phone as the
    recipient, the body text as the body) inside the caller's transaction, like
    `OutboxQueue` (one statement per batch, written by `flush`)."""

    def __init__(self) -> None:
        self._outbox = OutboxQueue()

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


def standalone_ports(base: Ports | None = None, settings: Settings | None = None) -> Ports:
    """The standalone composition: store renderer and outbox queue (partner directory kept);
    with `settings`, the lead webhook when `EVENT_LEAD_WEBHOOK_URL` is set (else the base's
    lead sink, by default the refusing one)."""
    keep = base or Ports()
    return Ports(
        partner_directory=keep.partner_directory,
        template_renderer=StoreRenderer(),
        mail_queue=OutboxQueue(),
        sms_queue=OutboxSmsQueue(),
        lead_sink=lead_sink_from(settings) if settings is not None else keep.lead_sink,
    )
