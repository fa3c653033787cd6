"""Part 3 of `make bench`: the sale seam on one hot event, through HTTP.

In one run, against one `events-svc serve` process, for a hot event with 0 and 100 000
existing registrations and 32 concurrent clients, it measures:
  (p) plain registrations: POST /admin/registrations, one attendee each;
  (s) first deliveries: POST /admin/seam/orders/confirmed, a fresh order of 1 to 4
      attendees each (half free, half with a total to pay: open rows and held drafts);
  (r) redeliveries of facts already applied (the recorded answer: `already_applied`).
It prints facts/second, attendees/second and p50/p99 latency, with s/p and r/s.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import aiohttp
import asyncpg

from bench.common import drive, drop_database, fresh_database, fresh_event, ms, service
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

SEAM = "/api/v1/event/admin/seam/orders/confirmed"
PLAIN = "/api/v1/event/admin/registrations"

SEAM_HEADER = (
    "| existing | conc | (p) plain reg/s | (s) facts/s | (s) attendees/s | s/p "
    "| (r) redeliveries/s | r/s | (p) p50/p99 ms | (s) p50/p99 ms | (r) p50/p99 ms |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def order(event_id: UUID, n: int, paid: bool) -> dict[str, Any]:
    """A confirmed fact of `n` attendees on the event, a fresh order."""
    people = [{"name": f"Buyer {i}", "email": f"buyer{i}@example.org"} for i in range(n)]
    line = {"line_id": str(uuid.uuid4()), "event_id": str(event_id), "attendees": people}
    total = "25.00" if paid else "0"
    return {
        "order_id": str(uuid.uuid4()),
        "amount_total": total,
        "currency": "EUR",
        "lines": [line],
    }


async def _post(client: aiohttp.ClientSession, path: str, body: dict[str, Any], want: int) -> Any:
    async with client.post(path, json=body) as r:
        answer = await r.json()
        if r.status != want:
            raise RuntimeError(f"POST {path} answered {r.status}: {answer}")
        return answer


async def seam_cells(
    base: str, token: str, conn: asyncpg.Connection, size: int, workers: int, seconds: float
) -> str:
    """One row: plain, first deliveries and redeliveries on fresh hot events of `size` rows."""
    headers = {"Authorization": f"Bearer {token}"}
    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(base, headers=headers, connector=connector) as client:
        async with client.get("/healthz") as r:
            await r.read()
        plain_event = await fresh_event(conn, size, 800 + size // 1000)
        body = {"event_id": str(plain_event), "name": "Bench Attendee", "email": "b@example.org"}

        async def plain(_: int) -> None:
            await _post(client, PLAIN, body, 201)

        p = await drive(workers, seconds, plain)
        seam_event = await fresh_event(conn, size, 850 + size // 1000)
        sizes = itertools.cycle([1, 2, 3, 4])
        delivered: list[dict[str, Any]] = []
        attendees = 0

        async def first(w: int) -> None:
            nonlocal attendees
            fact = order(seam_event, next(sizes), paid=w % 2 == 1)
            answer = await _post(client, SEAM, fact, 200)
            if answer["outcome"] != "applied":
                raise RuntimeError(f"a first delivery answered {answer['outcome']}")
            attendees += len(answer["registration_ids"])
            delivered.append(fact)

        s = await drive(workers, seconds, first)
        again = itertools.cycle(delivered)

        async def redeliver(_: int) -> None:
            answer = await _post(client, SEAM, next(again), 200)
            if answer["outcome"] != "already_applied":
                raise RuntimeError(f"a redelivery answered {answer['outcome']}")

        r = await drive(workers, seconds, redeliver)
    return (
        f"| {size:>7,} | {workers:>2} | {p.rate:7.0f} | {s.rate:7.0f} "
        f"| {attendees / s.seconds:7.0f} | {s.rate / p.rate:5.0%} | {r.rate:7.0f} "
        f"| {r.rate / s.rate:5.1f}x | {ms(p)} | {ms(s)} | {ms(r)} |"
    )


async def seam_run(admin_url: str, sizes: list[int], workers: int, seconds: float) -> list[str]:
    """Part 3 on a fresh database and one service process; one row per size."""
    url = await fresh_database(admin_url)
    pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
    token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
    await pool.close()
    conn = await asyncpg.connect(url)
    rows = []
    try:
        with service(url, pool_max=workers) as base:
            for size in sizes:
                rows.append(await seam_cells(base, token, conn, size, workers, seconds))
                print(rows[-1], flush=True)
    finally:
        await conn.close()
        await drop_database(admin_url)
    return rows
