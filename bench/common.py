"""What the benchmark parts share: the timing cell, the driver, the hot event, the database
server, a real `events-svc serve` process, the two cells part 1 and part 8 both run (the
raw-SQL ceiling and HTTP), and the HTTP cell under it that part 11 runs too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID

import aiohttp
import asyncpg
import httpx

from events_svc import migrate
from events_svc.embedded import scratch_server

DB = "events_bench"
NEW_EVENT = """
INSERT INTO event.events (name, date_begin, date_end, seats_limited, seats_max)
VALUES ('Hot event', now() + interval '30 days', now() + interval '31 days', true, 100000000)
RETURNING id
"""
SEED = """
INSERT INTO event.registrations (event_id, barcode, name)
SELECT $1, ($2::bigint * 1000000 + g)::text, 'Seed' FROM generate_series(1, $3) g
"""


@dataclass
class Cell:
    done: int
    seconds: float
    latencies: list[float]

    @property
    def rate(self) -> float:
        return self.done / self.seconds

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def pooled(cells: list[Cell]) -> Cell:
    """The cells of one side of an a, b, b, a row as one."""
    return Cell(
        sum(c.done for c in cells),
        sum(c.seconds for c in cells),
        [x for c in cells for x in c.latencies],
    )


def ms(cell: Cell) -> str:
    """`p50 / p99` in milliseconds."""
    return f"{cell.pct(0.5):5.1f} / {cell.pct(0.99):6.1f}"


def barcode() -> str:
    return str(int.from_bytes(secrets.token_bytes(8), "little"))


async def drive(workers: int, seconds: float, op: Callable[[int], Awaitable[None]]) -> Cell:
    """Run `op(worker)` in a loop on `workers` tasks for `seconds`; time each call."""
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await op(w)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(workers)))
    return Cell(len(latencies), time.perf_counter() - start, latencies)


async def fresh_event(admin: asyncpg.Connection, existing: int, seq: int) -> UUID:
    event_id: UUID = await admin.fetchval(NEW_EVENT)
    if existing:
        await admin.execute(SEED, event_id, seq, existing)
    await admin.execute("VACUUM ANALYZE event.registrations")
    return event_id


def with_db(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def admin_server() -> Iterator[str]:
    given = os.environ.get("EVENTS_BENCH_ADMIN_URL")
    if given:
        yield given
        return
    with scratch_server("events-bench-") as url:
        yield url


@contextlib.contextmanager
def service(url: str, pool_max: int, workers: int = 1, **extra: str) -> Iterator[str]:
    """A real `events-svc serve [--workers N]` on `url` (`extra`: more environment); its
    base URL."""
    port = free_port()
    env = {**os.environ, "EVENTS_DATABASE_URL": url, "EVENTS_PORT": str(port),
           "EVENTS_POOL_MAX": str(pool_max), "EVENTS_POOL_MIN": str(min(4, pool_max)),
           "EVENTS_LOG_LEVEL": "WARNING", **extra}  # fmt: skip
    with tempfile.TemporaryFile() as log:
        argv = [sys.executable, "-m", "events_svc", "serve", "--workers", str(workers)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                        break
                time.sleep(0.2)
            else:
                log.seek(0)
                tail = log.read().decode()[-2000:]
                raise RuntimeError(f"the service did not become ready:\n{tail}")
            yield base
        finally:
            proc.terminate()
            proc.wait(timeout=30)


async def fresh_database(admin_url: str) -> str:
    """A new, migrated benchmark database; its URL."""
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{DB}"')
    await admin.close()
    url = with_db(admin_url, DB)
    conn = await asyncpg.connect(url)
    await migrate.apply(conn, migrate.default_dir())
    await conn.close()
    return url


async def drop_database(admin_url: str) -> None:
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.close()


# --- the cells part 1 and part 8 share: the raw-SQL ceiling and HTTP (part 11: HTTP) ------

RAW_LOCK = "SELECT id FROM event.events WHERE id = $1 FOR UPDATE"
# the service's own count (`holds_seat_at` in its two halves: seats._COUNT_EVENT)
RAW_COUNT = (
    "SELECT (SELECT count(*) FROM event.registrations WHERE event_id = $1"
    " AND event.holds_seat_for_good(state, active, sale_status, hold_expires_at))"
    " + (SELECT count(*) FROM event.registrations WHERE event_id = $1"
    " AND event.holds_seat_held(state, active, sale_status, hold_expires_at)"
    " AND hold_expires_at > now())"
)
RAW_INSERT = "INSERT INTO event.registrations (event_id, barcode) VALUES ($1, $2)"


async def raw_cell(url: str, event_id: UUID, workers: int, seconds: float) -> Cell:
    conns = [await asyncpg.connect(url) for _ in range(workers)]

    async def op(w: int) -> None:
        conn = conns[w]
        async with conn.transaction():
            await conn.fetchval(RAW_LOCK, event_id)
            await conn.fetchval(RAW_COUNT, event_id)
            await conn.execute(RAW_INSERT, event_id, barcode())

    try:
        return await drive(workers, seconds, op)
    finally:
        for c in conns:
            await c.close()


async def post_cell(
    base: str,
    path: str,
    body: Callable[[int], dict[str, Any]],
    workers: int,
    seconds: float,
    headers: dict[str, str] | None = None,
) -> Cell:
    """POST `body(worker)` to `path` from `workers` aiohttp clients for `seconds`; every
    answer must be 201."""
    return await load_cell(base, path, workers, seconds, headers=headers, body=body, expect=201)


async def load_cell(
    base: str,
    path: str,
    workers: int,
    seconds: float,
    *,
    headers: dict[str, str] | None = None,
    body: Callable[[int], dict[str, Any]] | None = None,
    expect: int = 200,
) -> Cell:
    """GET `path` (POST `body(worker)` when given) from `workers` aiohttp clients for
    `seconds`, each answer read whole; every answer must be `expect`."""
    connector = aiohttp.TCPConnector(limit=workers)
    async with aiohttp.ClientSession(base, headers=headers, connector=connector) as client:

        async def op(w: int) -> None:
            sent = client.get(path) if body is None else client.post(path, json=body(w))
            async with sent as r:
                answer = await r.read()
                if r.status != expect:
                    method = "GET" if body is None else "POST"
                    raise RuntimeError(f"{method} {path} answered {r.status}: {answer[:500]!r}")

        async with client.get("/healthz") as r:
            await r.read()
        return await drive(workers, seconds, op)


async def http_cell(base: str, token: str, event_id: UUID, workers: int, seconds: float) -> Cell:
    body = {"event_id": str(event_id), "name": "Bench Attendee", "email": "bench@example.org"}
    return await post_cell(
        base,
        "/api/v1/event/admin/registrations",
        lambda _: body,
        workers,
        seconds,
        headers={"Authorization": f"Bearer {token}"},
    )
