"""The standalone adapters: templates from event.message_templates, the outbox queue.

The renderer uses a sandboxed Jinja2 environment with StrictUndefined: a
template that names a variable the context lacks is `render_failed`, never an
empty string. The queue writes event.outbox_messages in the scheduler's own
transaction, so a receipt and its queued message commit (or vanish) together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from events_svc.db import Pool, connection
from events_svc.ports import MailRefused, OutgoingMessage, Ports, Rendered, RenderRequest

_TEMPLATE = """
SELECT subject, body FROM event.message_templates WHERE id = $1 AND kind = $2::event.template_kind
"""
_OUTBOX = """
INSERT INTO event.outbox_messages (channel, recipient, sender, subject, body, event_id,
    registration_id, scheduler_id)
VALUES ($1::event.notification_channel, $2, $3, $4, $5, $6, $7, $8)
"""


class StoreRenderer:
    """Renders rows of event.message_templates (kind mail|sms)."""

    def __init__(self, pool: Callable[[], Pool]) -> None:
        self.pool = pool  # the pool exists only once the app has started
        self.env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)

    async def _load(self, ref: UUID, kind: str) -> tuple[str, str]:
        async with connection(self.pool()) as conn:
            row = await conn.fetchrow(_TEMPLATE, ref, kind)
        if row is None:
            raise MailRefused("template_unresolved", f"no {kind} template {ref}")
        return str(row["subject"]), str(row["body"])

    async def render(self, request: RenderRequest) -> Rendered:
        subject, body = await self._load(request.template_ref, request.template_kind)
        try:
            return Rendered(
                subject=self.env.from_string(subject).render(request.context),
                body=self.env.from_string(body).render(request.context),
            )
        except jinja2.TemplateError as exc:
            # the template's own text and the error type are safe; the context is not shown
            raise MailRefused("render_failed", f"{type(exc).__name__}: {exc}") from None


class OutboxQueue:
    """Queues into event.outbox_messages inside the caller's transaction."""

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        await conn.execute(
            _OUTBOX, message.channel, message.recipient, message.sender, message.subject,
            message.body, message.event_id, message.registration_id, message.scheduler_id,
        )  # fmt: skip


def standalone_ports(pool: Callable[[], Pool], base: Ports | None = None) -> Ports:
    """The standalone composition: store renderer and outbox queue (partner directory kept)."""
    keep = base or Ports()
    return Ports(
        partner_directory=keep.partner_directory,
        template_renderer=StoreRenderer(pool),
        mail_queue=OutboxQueue(),
    )
