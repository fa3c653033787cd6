"""Two real `events-svc serve` processes (scheduler on, so each runs the webhook loop)
deliver the `registration.created` messages of a registration storm to one real
receiver, and one of them is SIGKILLed mid-delivery.

Committed facts are all delivered, at least once: the killed process's claimed attempts
are due again when their lease (EVENTS_WEBHOOK_LEASE_S) runs out, and the survivor (or a
process started after) sends them with the same `webhook-id`. Refused registrations
(the event full) leave no message at all: their facts rolled back with them.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from events_svc.verbs.tokens import create_token
from tests.probes.helpers import event_body, serve_processes, until_listening
from tests.probes.webhooks.receiver import receiver

SEATS = 80  # deliveries: 0.5 s each, 4 at once in all, so 10 s of them to stop the victim in
ATTEMPTS = 120  # registrations tried: SEATS succeed, the rest find the event full
LEASE_S = 15  # the shortest lease the service accepts
API = "/api/v1/event"


@contextmanager
def services(
    db_url: str, logs: Path, n: int = 2
) -> Iterator[list[tuple[str, subprocess.Popen[str]]]]:
    env = {
        "EVENT_SCHEDULER_ENABLED": "true",
        "EVENTS_WEBHOOK_ALLOW_PRIVATE": "true",
        "EVENTS_WEBHOOK_LEASE_S": str(LEASE_S),
        "EVENTS_POOL_MAX": "6",
        "EVENTS_LOG_LEVEL": "WARNING",
    }
    with serve_processes(db_url, logs, n, **env) as procs:
        yield procs


async def rows(pool: asyncpg.Pool, sql: str, *args: object) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return list(await conn.fetch(sql, *args))


async def stop_holding(pool: asyncpg.Pool, victim: subprocess.Popen[str]) -> list[str]:
    """Stop the victim (SIGSTOP) at a moment it holds leased attempts; their ids. A lease
    the survivor took after the stop ends later than any of the victim's, and one it took
    before is recorded (its answers take 0.5 s) by the time this looks."""
    for _ in range(40):
        victim.send_signal(signal.SIGSTOP)
        async with pool.acquire() as conn:
            stopped_at = await conn.fetchval("SELECT now()")
        await asyncio.sleep(1.0)
        held = await rows(
            pool,
            "SELECT id FROM event.webhook_deliveries WHERE state = 'pending' AND lease_until <= $1",
            stopped_at + timedelta(seconds=LEASE_S),
        )
        if held:
            return [str(r["id"]) for r in held]
        victim.send_signal(signal.SIGCONT)
        await asyncio.sleep(0.05)
    return []


@pytest.mark.long
async def test_a_process_killed_mid_delivery_loses_no_committed_fact_and_sends_none_rolled_back(
    pool: asyncpg.Pool, db_url: str, tmp_path: Path
):
    token, _ = await create_token(pool, "storm", ["*"], None, datetime.now(UTC))
    auth = {"Authorization": f"Bearer {token}"}
    with receiver(default="slow", delay_s=0.5) as sink, services(db_url, tmp_path) as procs:
        (victim_base, victim), (survivor_base, _) = procs
        bases = [victim_base, survivor_base]
        await until_listening(pool, 2)  # both loops hear the first write
        async with httpx.AsyncClient(timeout=30, headers=auth) as http:
            r = await http.post(
                f"{victim_base}{API}/admin/events", json=event_body(seats_max=SEATS)
            )
            event_id = r.json()["id"]
            hook = {"url": f"{sink.url}/in", "event_types": ["registration.created"]}
            assert (
                await http.post(f"{survivor_base}{API}/admin/webhooks", json=hook)
            ).status_code == 201

            async def register(i: int) -> int:
                body = {"event_id": event_id, "name": f"Guest {i}", "email": f"g{i}@example.org"}
                answer = await http.post(f"{bases[i % 2]}{API}/admin/registrations", json=body)
                return answer.status_code

            statuses = Counter(await asyncio.gather(*(register(i) for i in range(ATTEMPTS))))
            assert statuses == {201: SEATS, 409: ATTEMPTS - SEATS}, statuses
            # deliveries have begun: stop the victim at a moment it holds some (tried
            # each second while most of the backlog is still to send)
            await sink.wait_for(SEATS // 10, within=30)
            held = await stop_holding(pool, victim)
            assert held, "the victim never held an attempt when stopped"
            victim.send_signal(signal.SIGKILL)  # mid-delivery: its attempts are in flight
            assert await asyncio.to_thread(victim.wait, 10) == -signal.SIGKILL
            deadline = time.monotonic() + LEASE_S + 30
            while True:
                done = await rows(
                    pool,
                    "SELECT message_id FROM event.webhook_deliveries WHERE state = 'succeeded'",
                )
                if len({r["message_id"] for r in done}) == SEATS:
                    break
                assert time.monotonic() < deadline, f"{len(done)} of {SEATS} delivered"
                await asyncio.sleep(0.2)
            assert (await http.get(f"{survivor_base}/readyz")).status_code == 200
    registered = {
        str(r["id"])
        for r in await rows(
            pool, "SELECT id FROM event.registrations WHERE event_id = $1", uuid.UUID(event_id)
        )
    }
    got = sink.got("/in")
    delivered = Counter(g.doc["data"]["registration_id"] for g in got)
    assert set(delivered) == registered  # every committed one, and nothing else
    assert {g.doc["type"] for g in got} == {"registration.created"}
    by_id = Counter(g.headers["webhook-id"] for g in got)
    assert len(by_id) == SEATS
    twice = [m for m, n in by_id.items() if n > 1]
    assert len(twice) <= len(held)  # only what the killed process held went out again
    assert await rows(pool, "SELECT 1 FROM event.webhook_facts") == []
