"""Part of `make bench`: documents rendered from the rows (`--badges N`, default 5 000).

(b) N badges of one event in `four_per_sheet` through the badges verb, in-process: the
checks, the count and the audit (`start_badges`), then the streamed PDF consumed to its
end (`BadgeSheet.chunks`: keyset pages of rows, each rendered in a worker thread). The
time is the whole print; the memory is the peak of Python allocations (tracemalloc)
over a second print of the same sheet, and of a print of a tenth of it, to show it flat.
(t) the tickets PDF of one registration (`registration_tickets_pdf`, what a mail with
`attach_tickets` attaches and what the tickets link answers per ticket): the median of
200 renders. Goals: 5 000 badges in under 10 s, one tickets PDF in under 50 ms.
"""

from __future__ import annotations

import statistics
import time
import tracemalloc
from uuid import UUID

import asyncpg

from bench.common import drop_database, fresh_database
from events_svc.actors import Actor
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.badges import BadgeFilters, start_badges
from events_svc.verbs.public import registration_tickets_pdf

DOCUMENTS_HEADER = (
    "| badges | format | (b) print s | pages | MiB | peak MiB (N) | peak MiB (N/10) "
    "| (t) tickets PDF median ms |\n"
    "|---:|---|---:|---:|---:|---:|---:|---:|"
)
ACTOR = Actor(id="bench", kind="system", scopes=frozenset({"*"}))
SEED = """
WITH e AS (
    INSERT INTO event.events (name, date_begin, date_end, date_tz, location, badge_format)
    VALUES ('Bench Conference Ωmega 2027', '2027-05-10 09:00+00', '2027-05-12 18:00+00',
        'Europe/Lisbon', 'Centro de Congressos, Lisboa', 'four_per_sheet')
    RETURNING id
)
INSERT INTO event.registrations (event_id, name, company_name, state, barcode)
SELECT e.id,
    (ARRAY['Zoë Çelik', 'Ζωή Παπαδοπούλου', 'Анна Каренина', 'Grace Hopper'])[1 + g % 4]
        || ' ' || g,
    'Company ' || (g % 97), 'open', '88' || lpad(g::text, 12, '0')
FROM e, generate_series(1, $1) g
RETURNING event_id, id
"""


async def _print(pool: asyncpg.Pool, event_id: UUID, limit: int | None = None) -> tuple[int, int]:
    filters = BadgeFilters()
    if limit is not None:
        async with pool.acquire() as conn:
            ids = await conn.fetch(
                "SELECT id FROM event.registrations WHERE event_id = $1 ORDER BY id LIMIT $2",
                event_id,
                limit,
            )
        filters = BadgeFilters(registration_ids=tuple(r["id"] for r in ids))
    sheet = await start_badges(pool, ACTOR, event_id, filters)
    size = 0
    async for chunk in sheet.chunks():
        size += len(chunk)
    return size, (sheet.count + 3) // 4


async def _peak(pool: asyncpg.Pool, event_id: UUID, limit: int | None = None) -> float:
    tracemalloc.start()
    try:
        await _print(pool, event_id, limit)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


async def documents_run(admin_url: str, n: int) -> list[str]:
    """The table row."""
    url = await fresh_database(admin_url)
    try:
        settings = Settings(database_url=url, pool_min=2, pool_max=4)
        pool = await create_pool(url, settings)
        try:
            async with pool.acquire() as conn:
                rows = await conn.fetch(SEED, n)
                await conn.execute("VACUUM ANALYZE event.registrations")
            event_id, one = rows[0]["event_id"], rows[0]["id"]
            t0 = time.perf_counter()
            size, pages = await _print(pool, event_id)
            took = time.perf_counter() - t0
            peak_all = await _peak(pool, event_id)
            peak_tenth = await _peak(pool, event_id, max(1, n // 10))
            await registration_tickets_pdf(pool, one)  # fonts parsed once per process
            times = []
            for _ in range(200):
                t0 = time.perf_counter()
                await registration_tickets_pdf(pool, one)
                times.append((time.perf_counter() - t0) * 1000)
        finally:
            await pool.close()
    finally:
        await drop_database(admin_url)
    return [
        f"| {n:,} | four_per_sheet | {took:.2f} | {pages:,} | {size / 2**20:.1f} "
        f"| {peak_all:.1f} | {peak_tenth:.1f} | {statistics.median(times):.1f} |"
    ]
