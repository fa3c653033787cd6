"""Part of `make bench`: one attendance import of N rows (`--imports N`, default 10 000).

One event of N `open` registrations, seeded set-based; the import is POSTed as a CSV
(`barcode` column, N rows) to a real `events-svc serve` process, and timed until the job
is `completed`. The job is driven by the service's lifespan scheduler loop (woken by the
create's NOTIFY; default `EVENTS_IMPORT_BATCH` 500, 20 batches a pass), polled every
50 ms. The ceiling, in the same run on a second event of N: the same state change and
audit rows written set-based in one transaction (one `UPDATE ... FROM unnest` and one
`INSERT ... SELECT`). Goal: the import completes in under 10 s.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from uuid import UUID

import asyncpg
import httpx

from bench.common import drop_database, fresh_database, service
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

API = "/api/v1/event"
EVENT = """
INSERT INTO event.events (name, date_begin, date_end, seats_limited, seats_max)
VALUES ('Import event', now() - interval '2 days', now() - interval '1 day', false, 0)
RETURNING id
"""
SEED = """
INSERT INTO event.registrations (event_id, barcode, name, email, date_open)
SELECT $1, ($2::bigint + g)::text, 'Guest ' || g, 'guest' || g || '@example.org', now()
FROM generate_series(1, $3) g
"""
RAW_MARK = """
UPDATE event.registrations r
SET state = 'done', date_closed = coalesce(r.date_closed, now()), version = r.version + 1,
    updated_at = now()
FROM unnest($1::text[]) AS b(barcode)
WHERE r.barcode = b.barcode AND r.state = 'open' AND r.active
RETURNING r.id
"""
RAW_AUDIT = """
INSERT INTO event.event_audit_log (actor_id, actor_kind, verb, object_kind, object_id, event_id,
    summary)
SELECT 'bench', 'token', 'registration_set_done', 'registration', x.id, $2,
    jsonb_build_object('from', 'open', 'to', 'done', 'source', 'import')
FROM unnest($1::uuid[]) AS x(id)
"""
DONE = "SELECT count(*) FROM event.registrations WHERE event_id = $1 AND state = 'done'"

IMPORTS_HEADER = (
    "| rows | raw s | raw rows/s | POST s | import s | import rows/s | ratio | marked |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def _event(conn: asyncpg.Connection, n: int, base: int) -> tuple[UUID, list[str]]:
    event_id: UUID = await conn.fetchval(EVENT)
    await conn.execute(SEED, event_id, base, n)
    return event_id, [str(base + g) for g in range(1, n + 1)]


async def _raw(conn: asyncpg.Connection, event_id: UUID, codes: list[str]) -> float:
    t0 = time.perf_counter()
    async with conn.transaction():
        ids = [r["id"] for r in await conn.fetch(RAW_MARK, codes)]
        await conn.execute(RAW_AUDIT, ids, event_id)
    return time.perf_counter() - t0


async def _import(base: str, token: str, event_id: UUID, codes: list[str]) -> tuple[float, float]:
    """(seconds of the POST, seconds until the job is completed), both from the POST."""
    body = ("barcode\n" + "\n".join(codes) + "\n").encode()
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=f"{base}{API}", headers=headers, timeout=60) as http:
        t0 = time.perf_counter()
        r = await http.post(
            f"/admin/events/{event_id}/attendance-imports",
            content=body,
            headers={"content-type": "text/csv", "idempotency-key": "bench"},
        )
        posted = time.perf_counter() - t0
        if r.status_code != 202:
            raise RuntimeError(f"the import answered {r.status_code}: {r.text[:500]}")
        path = f"/admin/attendance-imports/{r.json()['id']}"
        while True:
            job = (await http.get(path)).json()
            if job["state"] in ("completed", "cancelled", "failed"):
                break
            if time.perf_counter() - t0 > 300:
                raise RuntimeError(f"the import did not finish: {job}")
            await asyncio.sleep(0.05)
        took = time.perf_counter() - t0
        if job["state"] != "completed":
            raise RuntimeError(f"the import ended {job['state']}: {job.get('last_error')}")
    return posted, took


async def imports_run(admin_url: str, n: int) -> str:
    url = await fresh_database(admin_url)
    try:
        conn = await asyncpg.connect(url)
        raw_event, raw_codes = await _event(conn, n, 8_000_000_000)
        event_id, codes = await _event(conn, n, 9_000_000_000)
        await conn.execute("VACUUM ANALYZE event.registrations")
        raw = await _raw(conn, raw_event, raw_codes)
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
        await pool.close()
        with service(url, pool_max=8) as base:
            posted, took = await _import(base, token, event_id, codes)
        marked = int(await conn.fetchval(DONE, event_id))
        await conn.close()
    finally:
        await drop_database(admin_url)
    return (
        f"| {n:,} | {raw:.2f} | {n / raw:,.0f} | {posted:.2f} | {took:.2f} | {n / took:,.0f} "
        f"| {(n / took) / (n / raw):.0%} | {marked:,} |"
    )
