"""Two real `events-svc serve` processes drain one outbox of 2 000 mails into one real SMTP
sink (aiosmtpd on loopback, `sink.py`), which counts every DATA by its `Message-ID`.

Without a crash each message arrives exactly once and each process sent a share. With one
process SIGKILLed mid-drain nothing is lost: every row ends `sent` and every Message-ID
arrived. A message may arrive twice only if the killed process had claimed it: its lease
runs out (EVENTS_DELIVERY_LEASE_S), the survivor claims it again and sends the same
Message-ID (the killed process recorded nothing: every row counts the one attempt that
was recorded). The drainer claims, sends and records one batch before it claims the
next (`Drainer.drain_batch`), so a process holds at most EVENTS_DELIVERY_BATCH unrecorded
rows at any instant: that is the bound on the messages delivered twice.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest

from events_svc.adapters.standalone import OutboxQueue
from events_svc.ports import OutgoingMessage
from tests.probes.delivery.helpers import MAIL_FROM
from tests.probes.delivery.sink import Sink, smtp_sink
from tests.probes.helpers import serve_processes, tails

MESSAGES = 2000
DOMAINS = 4  # recipient domains, interleaved: the drainer sends two at once per domain
BATCH = 50  # EVENTS_DELIVERY_BATCH: the most rows one process holds claimed at once
SINK_DELAY_S = 0.005  # per DATA: a drain lasts seconds, long enough to kill a process in it
DRAIN_DEADLINE_S = 60.0
SENT = re.compile(r'^events_delivery_attempts_total\{channel="mail",result="sent"\} (\S+)$', re.M)


async def queue_spread(pool: asyncpg.Pool, n: int) -> None:
    """n mails (p{i}@d{i % DOMAINS}.example) written by the real outbox queue in one
    transaction, the domains interleaved so that every batch spans all of them."""
    queue = OutboxQueue(MAIL_FROM, "events.example.org")
    event = uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        for i in range(n):
            await queue.enqueue(
                conn,
                OutgoingMessage(
                    channel="mail",
                    recipient=f"p{i}@d{i % DOMAINS}.example",
                    sender="organiser@example.org",
                    subject="Your ticket",
                    body="Hello",
                    event_id=event,
                    registration_id=uuid.uuid4(),
                ),
            )
        await queue.flush(conn)


@contextmanager
def drainers(
    db_url: str, smtp_port: int, logs: Path, lease_s: int
) -> Iterator[list[tuple[str, subprocess.Popen[str]]]]:
    """Two `serve` processes with the scheduler (and so the drainer) on, sending to the
    sink on `smtp_port`; ready, and listening for the outbox's NOTIFY, before yielding.
    Their output goes to `logs`/serve-{n}.log."""
    env = {
        "EVENTS_SMTP_URL": f"smtp://127.0.0.1:{smtp_port}",
        "EVENTS_MAIL_FROM": MAIL_FROM,
        "EVENTS_SMTP_RATE": "0",
        "EVENTS_SMTP_TIMEOUT_S": "10",
        "EVENTS_DELIVERY_BATCH": str(BATCH),
        "EVENTS_DELIVERY_LEASE_S": str(lease_s),
        "EVENT_SCHEDULER_ENABLED": "true",
        "EVENTS_POOL_MAX": "4",
        "EVENTS_LOG_LEVEL": "WARNING",
    }
    with serve_processes(db_url, logs, **env) as procs:
        time.sleep(0.5)  # the loops have listened (and found nothing due) before a write
        yield procs


async def sent_attempts(http: httpx.AsyncClient, base: str) -> int:
    """The process's `events_delivery_attempts_total{channel="mail",result="sent"}`."""
    r = await http.get(f"{base}/metrics")
    assert r.status_code == 200, r.text
    found = SENT.search(r.text)
    return int(float(found.group(1))) if found else 0


async def states(pool: asyncpg.Pool) -> dict[str, int]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT delivery_state::text AS state, count(*) AS n"
            " FROM event.outbox_messages GROUP BY 1"
        )
    return {r["state"]: r["n"] for r in rows}


async def drained(pool: asyncpg.Pool, logs: Path) -> None:
    """Until every row is `sent`; fails with the states (and the processes' output) after
    DRAIN_DEADLINE_S."""
    deadline = time.monotonic() + DRAIN_DEADLINE_S
    while (found := await states(pool)) != {"sent": MESSAGES}:
        if time.monotonic() > deadline:
            raise AssertionError(f"not drained in {DRAIN_DEADLINE_S} s: {found}; {tails(logs)}")
        await asyncio.sleep(0.1)


async def outbox_rows(pool: asyncpg.Pool) -> dict[str, asyncpg.Record]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT message_id, delivery_state::text AS state, attempts, sent_at"
            " FROM event.outbox_messages"
        )
    return {r["message_id"]: r for r in rows}


def seen(sink: Sink) -> Counter[str]:
    with sink.lock:
        return Counter(sink.seen_ids)


async def test_two_processes_drain_2000_mails_each_delivered_once(
    pool: asyncpg.Pool, db_url: str, tmp_path: Path
):
    # a lease far longer than any batch: no row is ever claimed twice without a crash
    with smtp_sink(delay=SINK_DELAY_S) as (sink, port), drainers(db_url, port, tmp_path, 60) as ps:
        await queue_spread(pool, MESSAGES)  # its NOTIFY wakes both drainers
        await drained(pool, tmp_path)
        async with httpx.AsyncClient(timeout=10) as http:
            shares = [await sent_attempts(http, base) for base, _ in ps]
        arrived = seen(sink)
    rows = await outbox_rows(pool)
    assert len(rows) == MESSAGES
    assert set(arrived) == set(rows)  # every message arrived, and nothing else did
    assert [m for m, n in arrived.items() if n > 1] == []  # exactly once
    assert len(sink.accepted) == MESSAGES
    assert {r["attempts"] for r in rows.values()} == {1}
    assert all(r["sent_at"] is not None for r in rows.values())
    # both processes drained: each sent a share, and the shares add up to the outbox
    assert sum(shares) == MESSAGES and min(shares) > 0, shares
    # one batch at a time per process, two sends per domain in it: four at the sink
    assert max(sink.most_in_flight.values()) <= 2 * 2


@pytest.mark.long
async def test_a_process_killed_mid_drain_loses_nothing_and_resends_only_what_it_held(
    pool: asyncpg.Pool, db_url: str, tmp_path: Path
):
    lease_s = 5  # how long the killed process's rows wait before the survivor takes them
    with (
        smtp_sink(delay=SINK_DELAY_S) as (sink, port),
        drainers(db_url, port, tmp_path, lease_s) as ps,
    ):
        (victim_base, victim), (survivor_base, survivor) = ps
        await queue_spread(pool, MESSAGES)
        deadline = time.monotonic() + 30
        while len(sink.seen_ids) < MESSAGES // 4:  # a quarter arrived: both are draining
            assert time.monotonic() < deadline, f"the drain did not start: {await states(pool)}"
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(timeout=10) as http:
            victim_sent = await sent_attempts(http, victim_base)
            victim.send_signal(signal.SIGKILL)
            assert await asyncio.to_thread(victim.wait, 10) == -signal.SIGKILL
            async with pool.acquire() as conn:
                held = {
                    r["message_id"]
                    for r in await conn.fetch(
                        "SELECT message_id FROM event.outbox_messages"
                        " WHERE delivery_state = 'sending'"
                    )
                }
            await drained(pool, tmp_path)
            survivor_sent = await sent_attempts(http, survivor_base)
        assert survivor.poll() is None  # the survivor is still serving
        arrived = seen(sink)
    assert victim_sent > 0, "the killed process had not sent anything: not mid-drain"
    assert survivor_sent > 0
    rows = await outbox_rows(pool)
    assert len(rows) == MESSAGES
    # nothing lost: every row sent, every Message-ID arrived; nothing the outbox does not hold
    assert {r["state"] for r in rows.values()} == {"sent"}
    assert set(arrived) == set(rows)
    # one recorded attempt each: what the killed process sent was never recorded
    assert {r["attempts"] for r in rows.values()} == {1}
    # a message delivered twice is one the killed process held claimed (`sending`) when it
    # died, taken again after its lease: at most one batch, each at most twice
    twice = {m for m, n in arrived.items() if n > 1}
    assert twice <= held, twice - held
    assert max(arrived.values()) <= 2
    assert len(twice) <= BATCH
