"""Part 8 of `make bench`: the register verb's combiner on one hot event.

In ONE run on one PostgreSQL, for a hot limited event with 0, 100 000 and 1 000 000
existing registrations, side by side, with 1, 8, 32 and 128 concurrent clients:
  (a) raw single-transaction SQL: BEGIN; lock the event row; count; insert; COMMIT
      (at most 32 connections: the row lock serialises them anyway);
  (b) the register verb in-process, uncombined (EVENTS_REGISTER_BATCH_MAX=1) and combined;
  (c) POST /admin/registrations through a real `events-svc serve`, uncombined and combined.
Then three service processes (`serve --workers 3`) against one alone, 96 clients, 100 000
existing registrations, combined. The batch sizes the in-process combined cells formed
are printed under the table.

Each client count of the sizes up to 100 000 gets a fresh event seeded with its existing
rows; 1 000 000 rows are seeded once, into one event every cell of that size registers
into (the few thousand rows the cells add are noise there). The table is vacuumed before
every cell, so rows earlier cells added are counted through the index alone, like the
seeded ones. Each path serves a few untimed requests first.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from uuid import UUID

import asyncpg

from bench.common import Cell, drive, fresh_database, fresh_event, http_cell, raw_cell, service
from events_svc.actors import SYSTEM
from events_svc.db import create_pool
from events_svc.models import AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.registrations import COMBINER, register
from events_svc.verbs.tokens import create_token

# connections: PostgreSQL's default 100 must hold both services' pools, the in-process
# pool and the raw clients at once (an idle pool keeps what it opened)
POOL = 16
RAW_CONNECTIONS = 32  # the raw ceiling is one lock: more connections add only waiting
RESEED_UP_TO = 100_000  # sizes seeded afresh for each client count; larger ones once
COMBINER_HEADER = (
    "| existing | clients | (a) raw/s | (b) verb/s | (b+) combined verb/s | (c) http/s "
    "| (c+) combined http/s | c+/a | c+/c | (a) p99 ms | (c) p99 ms | (c+) p50/p99 ms |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
PROCESSES_HEADER = (
    "| existing | clients | processes | combined http/s | p50/p99 ms | ratio to one |\n"
    "|---:|---:|---:|---:|---:|---:|"
)


async def vacuum(conn: asyncpg.Connection) -> None:
    """Every cell starts from a vacuumed table: the rows earlier cells added are counted
    through the index alone, as the seeded ones are."""
    await conn.execute("VACUUM ANALYZE event.registrations")


async def verb_cell(
    url: str, event_id: UUID, workers: int, seconds: float, max_batch: int
) -> tuple[Cell, Counter[int]]:
    """The register verb in this process with batches of at most `max_batch`; the cell and
    the batch sizes it formed."""
    settings = Settings(database_url=url, pool_min=min(workers, 4), pool_max=min(workers, POOL))
    pool = await create_pool(url, settings)
    attendee = [AttendeeInput(name="Bench Attendee", email="bench@example.org")]
    COMBINER.max_batch = max_batch
    before = Counter(COMBINER.batch_sizes)

    async def op(_: int) -> None:
        await register(pool, SYSTEM, event_id, attendee, datetime.now(UTC))

    try:
        cell = await drive(workers, seconds, op)
    finally:
        await pool.close()
    return cell, COMBINER.batch_sizes - before


def sizes_line(sizes: Counter[int]) -> str:
    """A batch-size distribution in words: mean, and the share of requests by size band."""
    requests = sum(n * k for n, k in sizes.items())
    if not requests:
        return "no batches"
    batches = sum(sizes.values())
    bands = {"1": (1, 1), "2-8": (2, 8), "9-32": (9, 32), "33-64": (33, 64), ">64": (65, 10**9)}
    shares = []
    for name, (lo, hi) in bands.items():
        share = sum(n * k for n, k in sizes.items() if lo <= n <= hi) / requests
        if share:
            shares.append(f"{name}: {share:.0%}")
    return f"{batches} batches, mean {requests / batches:.1f}; requests in batches of " + (
        ", ".join(shares)
    )


async def combiner_run(
    admin_url: str, sizes: list[int], clients: list[int], seconds: float
) -> tuple[list[str], list[str], list[str]]:
    """(the table's rows, the batch-size lines, the processes rows)."""
    url = await fresh_database(admin_url)
    conn = await asyncpg.connect(url)
    pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
    token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
    await pool.close()
    rows, batch_lines = [], []
    most = max(clients)
    with (
        service(url, pool_max=min(most, POOL), EVENTS_REGISTER_BATCH_MAX="1") as single,
        service(url, pool_max=min(most, POOL)) as combined,
    ):
        warm = await fresh_event(conn, 0, 899)  # first requests of each path: not timed
        for base in (single, combined):
            await http_cell(base, token, warm, 4, 0.5)
        await verb_cell(url, warm, 4, 0.5, 64)
        seq = 900
        for size in sizes:
            event_id = await fresh_event(conn, size, seq := seq + 1)
            for workers in clients:
                if size <= RESEED_UP_TO and workers != clients[0]:
                    event_id = await fresh_event(conn, size, seq := seq + 1)
                await vacuum(conn)
                a = await raw_cell(url, event_id, min(workers, RAW_CONNECTIONS), seconds)
                await vacuum(conn)
                b, _ = await verb_cell(url, event_id, workers, seconds, 1)
                await vacuum(conn)
                b2, formed = await verb_cell(url, event_id, workers, seconds, 64)
                await vacuum(conn)
                c = await http_cell(single, token, event_id, workers, seconds)
                await vacuum(conn)
                c2 = await http_cell(combined, token, event_id, workers, seconds)
                rows.append(
                    f"| {size:>9,} | {workers:>3} | {a.rate:7.0f} | {b.rate:7.0f} "
                    f"| {b2.rate:7.0f} | {c.rate:7.0f} | {c2.rate:7.0f} "
                    f"| {c2.rate / a.rate:5.2f}x | {c2.rate / c.rate:5.2f}x "
                    f"| {a.pct(0.99):6.1f} | {c.pct(0.99):6.1f} "
                    f"| {c2.pct(0.5):5.1f} / {c2.pct(0.99):6.1f} |"
                )
                batch_lines.append(f"- {size:,} existing, {workers} clients: {sizes_line(formed)}")
                print(rows[-1], flush=True)
    COMBINER.max_batch = 64
    processes = await _processes(url, token, conn, seconds)
    await conn.close()
    return rows, batch_lines, processes


async def _processes(url: str, token: str, conn: asyncpg.Connection, seconds: float) -> list[str]:
    """96 clients through one service process, then through three."""
    event_id = await fresh_event(conn, 100_000, 990)
    await vacuum(conn)
    rows = []
    one = 0.0
    for processes in (1, 3):
        with service(url, pool_max=POOL, workers=processes) as base:
            cell = await http_cell(base, token, event_id, 96, seconds)
        one = one or cell.rate
        rows.append(
            f"| 100,000 | 96 | {processes} | {cell.rate:7.0f} "
            f"| {cell.pct(0.5):5.1f} / {cell.pct(0.99):6.1f} | {cell.rate / one:4.2f}x |"
        )
        print(rows[-1], flush=True)
    return rows
