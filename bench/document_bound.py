"""Part 15 of `make bench`: the process keeps answering while its document bound is full
(`--document-bound S`, default 6 sheets at once; 0 skips it).

One real `events-svc serve` (one process) per row, over one event of 5 000 badges (the
largest sheet, `verbs.badges.MAX_BADGES`) in `four_per_sheet`. Each row runs S clients
that print the event's badge sheet back to back through HTTP (each sheet read to its
last byte) for `SECONDS`, with the bound `EVENTS_DOCUMENT_CONCURRENCY` at 1, unset (the
default: the number of cores) and at four times the cores, while one more client
asks `GET /healthz` every 10 ms on a connection of its own. A first row without any
sheet is the idle baseline. Each row: the sheets printed (200) and refused (503
`documents_busy`, after their 10 s wait), the median time of a printed sheet (its wait
for a place included), and `/healthz`'s p50 / p99 / max over the row's time (its requests
while every place of the bound was taken). Goal: `/healthz` p99 under 50 ms with the
default bound.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from datetime import UTC, datetime
from uuid import UUID

import aiohttp

from bench.common import drop_database, fresh_database, service
from bench.documents import SEED
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.badges import MAX_BADGES
from events_svc.verbs.tokens import create_token

SECONDS = 20.0  # each row's time under load
TICK = 0.010  # /healthz every 10 ms
GOAL_MS = 50.0
BADGES = "/api/v1/event/admin/events/{}/badges.pdf"

BOUND_HEADER = (
    "| bound | sheets at once | printed | refused 503 | sheet p50 s "
    "| /healthz n | p50 ms | p99 ms | max ms | p99 < 50 ms |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _health(base: str, until: float) -> list[float]:
    """`GET /healthz` every TICK until `until` (perf_counter); each answer's ms."""
    times: list[float] = []
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(base, connector=connector) as client:
        next_at = time.perf_counter()
        while next_at < until:
            t0 = time.perf_counter()
            async with client.get("/healthz") as r:
                await r.read()
                if r.status != 200:
                    raise RuntimeError(f"/healthz answered {r.status}")
            times.append((time.perf_counter() - t0) * 1000)
            next_at = max(next_at + TICK, time.perf_counter())
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    return times


async def _sheets(
    base: str, auth: dict[str, str], event_id: UUID, clients: int, until: float
) -> tuple[list[float], int]:
    """`clients` printing the sheet back to back until `until`: the printed sheets' times
    (s) and how many were refused (503 documents_busy)."""
    printed: list[float] = []
    refused = 0
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(base, headers=auth, connector=connector, timeout=timeout) as s:

        async def worker() -> None:
            nonlocal refused
            while time.perf_counter() < until:
                t0 = time.perf_counter()
                async with s.get(BADGES.format(event_id)) as r:
                    size = 0
                    async for chunk in r.content.iter_chunked(1 << 16):
                        size += len(chunk)
                    if r.status == 503:
                        refused += 1
                        continue
                    if r.status != 200 or size < 1024:
                        raise RuntimeError(f"the sheet answered {r.status} ({size} bytes)")
                printed.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker() for _ in range(clients)))
    return printed, refused


async def _row(
    base: str, auth: dict[str, str], event_id: UUID, label: str, clients: int, seconds: float
) -> str:
    async with (
        aiohttp.ClientSession(base, headers=auth) as warm,  # fonts, routes: untimed
        warm.get(BADGES.format(event_id)) as r,
    ):
        await r.read()
    until = time.perf_counter() + seconds
    health = asyncio.create_task(_health(base, until))
    printed, refused = await _sheets(base, auth, event_id, clients, until) if clients else ([], 0)
    times = await health
    p99 = _pct(times, 0.99)
    sheet = f"{statistics.median(printed):.2f}" if printed else "—"
    return (
        f"| {label} | {clients} | {len(printed)} | {refused} | {sheet} | {len(times):,} "
        f"| {_pct(times, 0.5):.1f} | {p99:.1f} | {max(times):.1f} "
        f"| {'yes' if p99 < GOAL_MS else 'NO'} |"
    )


async def document_bound_run(admin_url: str, clients: int, badges: int = MAX_BADGES) -> list[str]:
    """The table's rows: idle, a bound of 1, the default bound, four times the cores."""
    cores = os.cpu_count() or 1
    url = await fresh_database(admin_url)
    rows: list[str] = []
    try:
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        try:
            async with pool.acquire() as conn:
                event_id = await conn.fetchval(SEED, badges)  # the badges bench's event
                await conn.execute("VACUUM ANALYZE event.registrations")
            token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
        finally:
            await pool.close()
        auth = {"Authorization": f"Bearer {token}"}
        runs = [
            ("idle (no sheet)", "", 0, 5.0),
            *([("1", "1", clients, SECONDS)] if cores > 1 else []),
            (f"default ({cores}, the cores)", "", clients, SECONDS),
            (f"{4 * cores} (4x the cores)", str(4 * cores), clients, SECONDS),
        ]
        for label, bound, sheets, seconds in runs:
            env = {"EVENTS_DOCUMENT_CONCURRENCY": bound, "EVENT_SCHEDULER_ENABLED": "false"}
            with service(url, 8, 1, **env) as base:
                rows.append(await _row(base, auth, event_id, label, sheets, seconds))
            print(rows[-1], flush=True)
    finally:
        await drop_database(admin_url)
    return rows
