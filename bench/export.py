"""Part of `make bench`: the registration export of one large event (`--export N`, 1 000 000).

One event of N registrations (names, emails, phones, company names; half of them on a
ticket), seeded set-based, then VACUUM ANALYZE. In the same run:
  (r) the raw ceiling: `COPY (SELECT <the same 11 columns, plain, joined the same way,
      same rows and order>) TO STDOUT` through asyncpg into a byte counter;
  (e) the export through a real `events-svc serve` process over HTTP: the preview, then the
      download read with aiohttp, counting bytes; all 11 columns, full (a `*` token) and
      masked (a token with `registration:export` only). The preview (the operator's
      confirmation step) and the download (the export itself: token consumed, rows counted
      in the snapshot, audit row committed, every byte streamed) are timed apart.
Each is run 3 times; the table shows the medians. Goals: the download under 3 s, and at
least 50 % of (r)'s rate (rows/s).
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime
from uuid import UUID

import aiohttp
import asyncpg

from bench.common import drop_database, fresh_database, service
from events_svc.db import create_pool
from events_svc.errors.exports import EXPORT_COLUMNS
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

API = "/api/v1/event"
RUNS = 3
EVENT = """
INSERT INTO event.events (name, date_begin, date_end, seats_limited, seats_max)
VALUES ('Export event', now() + interval '30 days', now() + interval '31 days', false, 0)
RETURNING id
"""
TICKET = "INSERT INTO event.tickets (event_id, name) VALUES ($1, 'Standard') RETURNING id"
SEED = """
INSERT INTO event.registrations (event_id, event_ticket_id, barcode, name, email, phone,
    company_name, state, date_open, date_closed)
SELECT $1, CASE WHEN g % 2 = 0 THEN $2::uuid END, (5000000000 + g)::text,
    'Guest Number ' || g, 'guest' || g || '@example.org',
    '+351 912 ' || lpad((g % 1000000)::text, 6, '0'), 'Company ' || (g % 1000),
    (CASE WHEN g % 10 = 0 THEN 'done' ELSE 'open' END)::event.registration_state, now(),
    CASE WHEN g % 10 = 0 THEN now() END
FROM generate_series(1, $3) g
"""
RAW = """
SELECT r.id, r.name, r.email, r.phone, r.company_name, r.state, t.name AS ticket,
    s.date_begin AS slot, r.barcode, r.created_at, r.date_closed
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.event_id = $1 AND r.active
ORDER BY r.created_at, r.id
"""

EXPORT_HEADER = (
    "| run | rows | MB | preview s | download s | rows/s | MB/s | rate vs (r) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|"
)


async def _seed(url: str, n: int) -> UUID:
    conn = await asyncpg.connect(url)
    try:
        event_id: UUID = await conn.fetchval(EVENT)
        ticket_id = await conn.fetchval(TICKET, event_id)
        await conn.execute(SEED, event_id, ticket_id, n)
        await conn.execute("VACUUM ANALYZE event.registrations")
    finally:
        await conn.close()
    return event_id


async def _raw(url: str, event_id: UUID) -> tuple[float, int]:
    """One raw COPY of the same rows; (seconds, bytes)."""
    conn = await asyncpg.connect(url)
    size = 0

    async def count(chunk: bytes) -> None:
        nonlocal size
        size += len(chunk)

    try:
        started = time.perf_counter()
        await conn.copy_from_query(RAW, event_id, output=count, format="csv", header=True)
        return time.perf_counter() - started, size
    finally:
        await conn.close()


async def _export(base: str, token: str, event_id: UUID) -> tuple[float, float, int, int]:
    """One preview and download over HTTP; (preview s, download s, bytes, rows announced)."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{base}{API}/admin/events/{event_id}/exports"
    async with aiohttp.ClientSession(headers=headers) as client:
        started = time.perf_counter()
        body = {"columns": list(EXPORT_COLUMNS)}
        async with client.post(f"{url}/preview", json=body) as r:
            preview = await r.json()
            if r.status != 200:
                raise RuntimeError(f"preview answered {r.status}: {preview}")
        previewed = time.perf_counter()
        size = 0
        confirm = {"confirmation_token": preview["confirmation_token"]}
        async with client.post(url, json=confirm) as r:
            if r.status != 200:
                raise RuntimeError(f"export answered {r.status}: {await r.text()}")
            rows = int(r.headers["X-Export-Rows"])
            async for chunk in r.content.iter_any():
                size += len(chunk)
        return previewed - started, time.perf_counter() - previewed, size, rows


def _line(
    name: str,
    rows: int,
    size: int,
    seconds: list[float],
    ceiling: float | None,
    preview: list[float] | None = None,
) -> str:
    took = statistics.median(seconds)
    rate = rows / took
    ratio = f"{rate / ceiling:.0%}" if ceiling else "—"
    before = f"{statistics.median(preview):.2f}" if preview else "—"
    return (
        f"| {name} | {rows:,} | {size / 1e6:,.1f} | {before} | {took:.2f} | {rate:,.0f} "
        f"| {size / 1e6 / took:,.0f} | {ratio} |"
    )


async def export_run(admin_url: str, n: int) -> list[str]:
    """The table rows: (r), then (e) full and masked."""
    url = await fresh_database(admin_url)
    try:
        event_id = await _seed(url, n)
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        now = datetime.now(UTC)
        full_token, _ = await create_token(pool, "bench", ["*"], None, now)
        masked_token, _ = await create_token(
            pool, "bench-masked", ["registration:export"], None, now
        )
        await pool.close()
        raw = [await _raw(url, event_id) for _ in range(RUNS)]
        raw_s = [s for s, _ in raw]
        ceiling = n / statistics.median(raw_s)
        lines = [_line("(r) raw COPY, asyncpg", n, raw[0][1], raw_s, None)]
        with service(url, pool_max=4) as base:
            for name, token in (("full", full_token), ("masked", masked_token)):
                runs = [await _export(base, token, event_id) for _ in range(RUNS)]
                if any(rows != n for _, _, _, rows in runs):
                    raise RuntimeError(f"an export announced {runs} rows, not {n}")
                label = f"(e) export over HTTP, {name}"
                download = [s for _, s, _, _ in runs]
                preview = [p for p, _, _, _ in runs]
                lines.append(_line(label, n, runs[0][2], download, ceiling, preview))
        return lines
    finally:
        await drop_database(admin_url)
