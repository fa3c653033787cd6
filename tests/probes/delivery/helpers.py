"""Shared steps of the delivery probes: queue rows through the real outbox adapter, build
a drainer on settings pointed at a sink, read rows back."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from events_svc.adapters.standalone import OutboxQueue, OutboxSmsQueue, transports_from
from events_svc.loops import Drainer, DrainOptions
from events_svc.ports import Attachment, OutgoingMessage, OutgoingSms, TicketsPdf
from events_svc.settings import Settings, SmtpRelay

MAIL_FROM = "Events Desk <desk@events.example.org>"


def now() -> datetime:
    return datetime.now(UTC)


def relay_settings(settings: Settings, port: int, **over: Any) -> Settings:
    """`settings` pointed at a sink on 127.0.0.1:port (plain unless `smtp` says)."""
    return dataclasses.replace(
        settings,
        smtp=over.pop("smtp", SmtpRelay(host="127.0.0.1", port=port)),
        mail_from=MAIL_FROM,
        smtp_rate=over.pop("smtp_rate", 0),
        smtp_timeout_s=over.pop("smtp_timeout_s", 5),
        **over,
    )


def drainer(
    pool: asyncpg.Pool, settings: Settings, tickets: TicketsPdf | None = None, **options: Any
) -> Drainer:
    from events_svc.ports import RefusingTicketsPdf

    transports = transports_from(settings, tickets or RefusingTicketsPdf())
    opts = DrainOptions(
        batch=options.pop("batch", settings.delivery_batch),
        lease=options.pop("lease", timedelta(seconds=settings.delivery_lease_s)),
        rate=float(settings.smtp_rate),
    )
    return Drainer(lambda: pool, transports, opts, now, options.pop("metrics", None))


async def queue_mail(
    pool: asyncpg.Pool,
    n: int = 1,
    *,
    recipient: str = "ada@example.org",
    subject: str = "Your ticket",
    body: str = "Hello",
    attachments: tuple[Attachment, ...] = (),
    event_id: uuid.UUID | None = None,
    sender: str = "organiser@example.org",
    mail_from: str = MAIL_FROM,
) -> list[uuid.UUID]:
    """n mails written by the real outbox queue in one transaction; their row ids."""
    queue = OutboxQueue(mail_from, "events.example.org")
    event = event_id or uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        for i in range(n):
            to = recipient.format(i=i)
            await queue.enqueue(
                conn,
                OutgoingMessage(
                    channel="mail",
                    recipient=to,
                    sender=sender,
                    subject=subject,
                    body=body,
                    event_id=event,
                    registration_id=uuid.uuid4(),
                    attachments=attachments,
                ),
            )
        await queue.flush(conn)
        rows = await conn.fetch(
            "SELECT id FROM event.outbox_messages WHERE event_id = $1 ORDER BY created_at, id",
            event,
        )
    return [r["id"] for r in rows][-n:]


async def queue_sms(
    pool: asyncpg.Pool,
    phone: str = "+32470000001",
    body: str = "See you",
    event_id: uuid.UUID | None = None,
) -> uuid.UUID:
    queue = OutboxSmsQueue("events.example.org")
    event = event_id or uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await queue.enqueue(
            conn,
            OutgoingSms(
                phone=phone,
                body_text=body,
                sender="events",
                event_id=event,
                registration_id=uuid.uuid4(),
                scheduler_id=uuid.uuid4(),
            ),
        )
        await queue.flush(conn)
        row_id: uuid.UUID = await conn.fetchval(
            "SELECT id FROM event.outbox_messages WHERE event_id = $1 AND channel = 'sms'"
            " ORDER BY created_at DESC, id LIMIT 1",
            event,
        )
    return row_id


async def row(pool: asyncpg.Pool, row_id: uuid.UUID) -> dict[str, Any]:
    async with pool.acquire() as conn:
        found = await conn.fetchrow(
            "SELECT *, delivery_state::text AS state FROM event.outbox_messages WHERE id = $1",
            row_id,
        )
    assert found is not None
    return dict(found)


async def due_now(pool: asyncpg.Pool, *row_ids: uuid.UUID) -> None:
    """Make retrying rows due now (the back-off has been checked; time moves on)."""
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE event.outbox_messages SET next_attempt_at = now()"
            " WHERE id = ANY($1) AND next_attempt_at IS NOT NULL",  # sent and failed stay
            list(row_ids),
        )
