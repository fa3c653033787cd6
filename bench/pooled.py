"""Part 13 of `make bench`: the hot event across processes (`--pooled C`: C clients,
default 32; 0 skips it).

The same `POST /admin/registrations` from C aiohttp clients on a hot event of 10 000
registrations (a fresh one per cell), against three set-ups of a real `events-svc serve`:

- `1 process`: one process, its pool straight to PostgreSQL (as part 1's (c) cell);
- `3 processes`: `--workers 3`, each with its own pool straight to PostgreSQL;
- `3 processes, PgBouncer`: `--workers 3` behind a real PgBouncer in transaction pooling
  (`tests/pgbouncer.py`: 3 server sessions per database, the probes' bouncer) with
  `EVENTS_DB_POOLER=transaction`, `LISTEN` and the migrations on the direct URL.

Each process keeps C connections in its pool (`EVENTS_POOL_MAX`); behind the bouncer the
3 x C client connections share its 3 server sessions. Each set-up runs twice, in the
order A B C C B A, and pools its two cells (a drift of the machine falls on all three).
Checked: every answer 201; the event holds exactly the registrations answered.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from urllib.parse import urlsplit

import asyncpg

from bench.common import (
    Cell,
    drop_database,
    fresh_database,
    fresh_event,
    http_cell,
    pooled,
    service,
)
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

EXISTING = 10_000
SETUPS = ("1 process", "3 processes", "3 processes, PgBouncer")
ORDER = (0, 1, 2, 2, 1, 0)

POOLED_HEADER = (
    "| set-up | clients | reg/s | p50 / p99 ms | vs 1 process | registrations checked |\n"
    "|---|---:|---:|---|---:|---|"
)


async def pooled_run(admin_url: str, clients: int, seconds: float) -> list[str]:
    """One row per set-up."""
    from tests.pgbouncer import pgbouncer  # noqa: PLC0415 - the probes' real PgBouncer

    url = await fresh_database(admin_url)
    conn = await asyncpg.connect(url)
    try:
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
        await pool.close()
        cells: dict[int, list[Cell]] = {0: [], 1: [], 2: []}
        checked: dict[int, bool] = {0: True, 1: True, 2: True}
        with pgbouncer(admin_url) as bouncer:
            through = bouncer.format(database=urlsplit(url).path[1:])
            pooled_env = {
                "EVENTS_DB_POOLER": "transaction",
                "EVENTS_DATABASE_DIRECT_URL": url,
            }
            for seq, setup in enumerate(ORDER, 1300):
                event_id = await fresh_event(conn, EXISTING, seq)
                if setup == 2:
                    target, workers, env = through, 3, pooled_env
                else:
                    target, workers, env = url, 1 if setup == 0 else 3, {}
                with service(target, clients, workers, **env) as base:
                    await http_cell(base, token, event_id, clients, 0.5)  # untimed start
                    before = await _count(conn, event_id)
                    cell = await http_cell(base, token, event_id, clients, seconds)
                cells[setup].append(cell)
                checked[setup] &= await _count(conn, event_id) - before == cell.done
        one = pooled(cells[0]).rate
        rows = []
        for setup, name in enumerate(SETUPS):
            c = pooled(cells[setup])
            rows.append(
                f"| {name} | {clients} | {c.rate:6.0f} | {c.pct(0.5):5.1f} / {c.pct(0.99):6.1f} "
                f"| {c.rate / one:5.0%} | {'yes' if checked[setup] else 'NO'} |"
            )
        return rows
    finally:
        await conn.close()
        await drop_database(admin_url)


async def _count(conn: asyncpg.Connection, event_id: uuid.UUID) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM event.registrations WHERE event_id = $1", event_id
        )
    )
