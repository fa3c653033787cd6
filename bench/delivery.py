"""Part of `make bench`: the outbox drainer sending N queued mails (`--delivery N`, default
10 000) to a local SMTP sink, against a plain aiosmtplib loop in the same run.

N mails to recipients spread over 50 domains are queued by the standalone outbox queue
(`OutboxQueue`, flushes of 1 000 rows, one transaction each) before any timing. The
sink is aiosmtpd on loopback in its own thread: it accepts every message and counts its
`Message-ID` (a thread of this process, so it takes its share of the CPU and the GIL,
alike for both sides).

(p) the plain loop: `EVENTS_SMTP_CONCURRENCY` (4) aiosmtplib sessions, each opened once
and reused, taking the same N messages in turn, each built by `build_message` and sent;
no database. (d) the drainer (`events_svc.loops.Drainer`, the default batch and lease,
`smtp_rate` 0) drains the outbox by `drain()` until a drain claims nothing: claim, build,
send over its own reused sessions (at most two per recipient domain), record. After each
side the sink must have every Message-ID exactly once, and after the drain every row must
be `sent`. Goals: the drainer at least 300 messages/s and 50 % of the plain loop.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from email.utils import parseaddr
from typing import Any
from uuid import uuid4

import aiosmtplib
import asyncpg
from aiosmtpd.controller import Controller

from bench.common import drop_database, free_port, fresh_database
from events_svc.adapters.mime import build_message
from events_svc.adapters.standalone import OutboxQueue, transports_from
from events_svc.db import create_pool
from events_svc.loops import Drainer, DrainOptions, DrainSummary
from events_svc.ports import OutgoingMessage, QueuedMessage, RefusingTicketsPdf
from events_svc.settings import Settings, SmtpRelay

MAIL_FROM = "Events Desk <desk@events.example.org>"
DOMAINS = 50
FLUSH = 1_000
SUBJECT = "Your ticket for Bench Conference {i}"
BODY = (
    "Hello Guest {i},\n\n"
    "Thank you for registering for Bench Conference. Doors open at 08:30 on the first day;\n"
    "bring this mail or your ticket's barcode to the desk. The programme, the venue and\n"
    "the ways to reach it are on the event page.\n\n"
    "See you there,\nThe Bench Conference team\n"
)
ROWS = """
SELECT id, channel::text AS channel, message_id, recipient, sender, reply_to, subject, body,
    attachments, event_id, registration_id
FROM event.outbox_messages ORDER BY created_at, id
"""
STATES = "SELECT delivery_state::text AS state, count(*) FROM event.outbox_messages GROUP BY 1"
_MESSAGE_ID = re.compile(rb"^Message-ID:[ \t]*(\S+)", re.IGNORECASE | re.MULTILINE)

DELIVERY_HEADER = (
    "| messages | domains | sessions | (p) plain s | (p) msg/s | (d) drainer s | (d) msg/s "
    "| d/p | batches |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


class Sink:
    """Accepts every message and counts the Message-IDs it received."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: Counter[str] = Counter()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content: bytes = envelope.content
        head = content[: content.find(b"\r\n\r\n")]
        found = _MESSAGE_ID.search(head)
        with self.lock:
            self.ids[found.group(1).decode() if found else ""] += 1
        return "250 2.0.0 accepted"

    def take(self) -> Counter[str]:
        with self.lock:
            ids, self.ids = self.ids, Counter()
        return ids


@contextmanager
def smtp_sink() -> Iterator[tuple[Sink, int]]:
    handler = Sink()
    port = free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port, server_hostname="sink")
    controller.start()
    try:
        yield handler, port
    finally:
        controller.stop()


def _recipient(i: int) -> str:
    return f"guest{i}@mail{i % DOMAINS}.example.net"


async def _queue(pool: asyncpg.Pool, n: int) -> None:
    """n mails through the real outbox queue, in transactions of FLUSH rows."""
    queue = OutboxQueue(MAIL_FROM, "events.example.org")
    event_id = uuid4()
    for start in range(0, n, FLUSH):
        async with pool.acquire() as conn, conn.transaction():
            for i in range(start, min(n, start + FLUSH)):
                message = OutgoingMessage(
                    channel="mail",
                    recipient=_recipient(i),
                    sender="organiser@example.org",
                    subject=SUBJECT.format(i=i),
                    body=BODY.format(i=i),
                    event_id=event_id,
                    registration_id=uuid4(),
                )
                await queue.enqueue(conn, message)
            await queue.flush(conn)
    async with pool.acquire() as conn:
        await conn.execute("VACUUM ANALYZE event.outbox_messages")


async def _messages(pool: asyncpg.Pool) -> list[QueuedMessage]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(ROWS)
    return [
        QueuedMessage(
            id=r["id"],
            channel=r["channel"],
            message_id=r["message_id"],
            recipient=r["recipient"],
            sender=r["sender"],
            reply_to=r["reply_to"],
            subject=r["subject"],
            body=r["body"],
            attachments=(),
            event_id=r["event_id"],
            registration_id=r["registration_id"],
        )
        for r in rows
    ]


async def _plain(port: int, messages: list[QueuedMessage], sessions: int) -> float:
    """The plain loop: `sessions` reused aiosmtplib sessions taking the messages in turn."""
    tickets = RefusingTicketsPdf()
    envelope_from = parseaddr(MAIL_FROM)[1]
    work = iter(messages)

    async def session() -> None:
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False, timeout=30)
        await client.connect()
        try:
            for message in work:
                mime = await build_message(message, MAIL_FROM, tickets)
                await client.send_message(
                    mime, sender=envelope_from, recipients=[message.recipient]
                )
        finally:
            await client.quit()

    t0 = time.perf_counter()
    await asyncio.gather(*(session() for _ in range(sessions)))
    return time.perf_counter() - t0


async def _drain(settings: Settings, pool: asyncpg.Pool) -> tuple[float, DrainSummary]:
    transports = transports_from(settings, RefusingTicketsPdf())
    drainer = Drainer(
        lambda: pool, transports, DrainOptions.from_settings(settings), lambda: datetime.now(UTC)
    )
    total = DrainSummary()
    t0 = time.perf_counter()
    try:
        while True:
            summary = await drainer.drain()
            total.add(summary)
            if not summary.claimed:
                break
        took = time.perf_counter() - t0
    finally:
        await drainer.close()
    return took, total


def _check(side: str, got: Counter[str], expected: set[str]) -> list[str]:
    """What the sink received that it should not have, as lines (none: all is well)."""
    lines = []
    twice = sum(1 for mid, count in got.items() if count > 1 and mid in expected)
    missing = len(expected - set(got))
    stray = sum(count for mid, count in got.items() if mid not in expected)
    if twice or missing or stray:
        lines.append(
            f"{side}: {missing:,} Message-IDs missing, {twice:,} received more than once, "
            f"{stray:,} unexpected"
        )
    return lines


async def delivery_run(admin_url: str, n: int) -> list[str]:
    """The table row, then a line per failed check (if any)."""
    url = await fresh_database(admin_url)
    try:
        with smtp_sink() as (sink, port):
            settings = Settings(
                database_url=url,
                pool_min=2,
                pool_max=4,
                smtp=SmtpRelay(host="127.0.0.1", port=port),
                mail_from=MAIL_FROM,
                smtp_rate=0,
            )
            sessions = settings.smtp_concurrency
            pool = await create_pool(url, settings)
            try:
                await _queue(pool, n)
                messages = await _messages(pool)
                expected = {m.message_id for m in messages}
                plain = await _plain(port, messages, sessions)
                problems = _check("plain loop", sink.take(), expected)
                drained, summary = await _drain(settings, pool)
                problems += _check("drainer", sink.take(), expected)
                async with pool.acquire() as conn:
                    states = {r["state"]: r["count"] for r in await conn.fetch(STATES)}
            finally:
                await pool.close()
    finally:
        await drop_database(admin_url)
    if states != {"sent": n}:
        problems.append(f"drainer: rows by state {states}, expected {n:,} sent")
    p_rate, d_rate = n / plain, summary.sent / drained
    row = (
        f"| {n:,} | {DOMAINS} | {sessions} | {plain:.2f} | {p_rate:,.0f} | {drained:.2f} "
        f"| {d_rate:,.0f} | {d_rate / p_rate:.0%} | {summary.batches} |"
    )
    return [row, *problems]
