"""Part 12 of `make bench`: webhooks (`--webhooks N`, default 1 000 registrations).

The receiver is an aiohttp server on loopback in its own process (so it does not compete
with the bench's event loop): it answers 200 at once to every POST and keeps, per
request, its arrival time, its `webhook-id` header and its path. Three endpoints
(`registration.created`, no PII) point at three paths of it, made through
`POST /admin/webhooks` of a real `events-svc serve` (scheduler on, so its lifespan runs
the delivery loop; `EVENTS_WEBHOOK_ALLOW_PRIVATE=true` for loopback).

(f) Fan-out. N registrations of one attendee, `POST /admin/registrations` from 32 aiohttp
clients, on a fresh hot event. `live`: written through the service that delivers, while
it delivers. `backlog`: written through a service with its scheduler off (the facts
wait), then a service with its scheduler on starts and delivers them. Timed: the first
delivery to the last of the 3N, by the receiver's clock (and the span of the rows'
`attempted_at`). Checked: 3N requests with 3N distinct `webhook-id`s, N per endpoint,
the very ids of the event's messages; one attempt per message, every one `succeeded`.
Goal: at least 500 deliveries a second. Between the two, the ceiling `sender alone`: the
live run's 3N messages sent again to the receiver by the service's `WebhookSender` from
the bench process, 4 at once per endpoint like the loop, with no database.

(h) The hot registration path, side by side in one service process (scheduler on): the
same POST from 8 then 32 clients on a hot event of 10 000 registrations (a fresh one per
row), with the three endpoints inactive (`PATCH active: false`: no endpoint listens, no
fact is written) against active (every registration writes its fact and the loop
delivers while the cell runs). Each row runs off, on, on, off twice (the part's
`--seconds` each) and pools each side's four cells, so a drift of the machine's load, or
the event's growing count, falls on both. Before each cell nothing waits: after an `on`
cell the bench waits until every message is delivered (timed: the drain), and before
every cell it vacuums the tables the drains churn and takes a checkpoint, so that their
clean-up falls on no cell. Goal: `on` at least 90 % of `off`.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import aiohttp
import asyncpg
import httpx

from bench.common import (
    Cell,
    drop_database,
    free_port,
    fresh_database,
    fresh_event,
    ms,
    pooled,
    post_cell,
    service,
)
from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.db import create_pool
from events_svc.egress import EgressGuard
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token
from events_svc.verbs.webhooks import PER_ENDPOINT

ENDPOINTS = 3
WRITERS = 32
HOT_CLIENTS = (8, 32)
HOT_EXISTING = 10_000
ORDER = ("off", "on", "on", "off") * 2  # ABBA twice: a drift of the machine falls on both sides
SETTLED = ("webhook_facts", "webhook_messages", "webhook_deliveries", "registrations", "events")
DRAIN_S = 300.0  # a backlog that never drains is a failure, not a hang
POLL_S = 0.02
REGISTER = "/api/v1/event/admin/registrations"
HOOKS = "/api/v1/event/admin/webhooks"
ENV = {"EVENT_SCHEDULER_ENABLED": "true", "EVENTS_WEBHOOK_ALLOW_PRIVATE": "true"}

WAITING = """
SELECT (SELECT count(*) FROM event.webhook_facts)
    + (SELECT count(*) FROM event.webhook_deliveries WHERE state = 'pending')
"""
FACTS = "SELECT count(*) FROM event.webhook_facts"
# the event's messages: the webhook-id, the endpoint, and each attempt's state and time
MESSAGES = """
SELECT 'msg_' || replace(m.id::text, '-', '') AS webhook_id, m.endpoint_id,
    d.state::text AS state, d.attempted_at
FROM event.webhook_messages m JOIN event.webhook_deliveries d ON d.message_id = m.id
WHERE (m.body::jsonb -> 'data' ->> 'event_id')::uuid = ANY($1::uuid[])
"""

# what the sender-alone ceiling sends again: the live run's messages, to their endpoints
SENDS = """
SELECT 'msg_' || replace(m.id::text, '-', '') AS webhook_id, m.body, w.url, w.secret
FROM event.webhook_messages m JOIN event.webhook_endpoints w ON w.id = m.endpoint_id
WHERE (m.body::jsonb -> 'data' ->> 'event_id')::uuid = $1
ORDER BY m.created_at, m.id
"""

FANOUT_HEADER = (
    "| mode | registrations | endpoints | deliveries | write s | reg/s | first→last s "
    "| deliveries/s | attempted_at span s | last after last write s | all arrived once |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)
HOT_HEADER = (
    "| existing | clients | (off) reg/s | (on) reg/s | on/off | (off) p50/p99 ms "
    "| (on) p50/p99 ms | delivered in (on) cells /s | drain after (on) s | all arrived once |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


# --- the receiver, in its own process ------------------------------------------------


def receive(port: int) -> None:
    """Serve the receiver on 127.0.0.1:`port` until killed (run in a child process)."""
    from aiohttp import web  # noqa: PLC0415 - the child's only needs

    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415

        uvloop.install()
    got: list[tuple[float, str, str]] = []

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        got.append((time.time(), request.headers.get("webhook-id", ""), request.path))
        return web.Response(status=200)

    async def take(_: web.Request) -> web.Response:
        taken = got[:]
        del got[:]
        return web.json_response(taken)

    app = web.Application()
    app.router.add_post("/hook/{n}", hook)
    app.router.add_get("/take", take)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


@contextlib.contextmanager
def receiver() -> Iterator[str]:
    """The receiver's base URL, its process running."""
    port = free_port()
    code = f"from bench.webhooks import receive; receive({port})"
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=root)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/take", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the webhook receiver did not start")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def take(sink: str) -> list[tuple[float, str, str]]:
    """What arrived since the last take: (arrival time, webhook-id, path) each."""
    async with aiohttp.ClientSession() as client, client.get(f"{sink}/take") as r:
        return [(float(t), str(i), str(p)) for t, i, p in await r.json()]


# --- the API: endpoints, registrations -------------------------------------------------


async def make_endpoints(base: str, auth: dict[str, str], sink: str) -> list[str]:
    ids = []
    async with aiohttp.ClientSession(base, headers=auth) as client:
        for n in range(ENDPOINTS):
            body = {"url": f"{sink}/hook/{n}", "event_types": ["registration.created"],
                    "description": f"bench receiver {n}"}  # fmt: skip
            async with client.post(HOOKS, json=body) as r:
                if r.status != 201:
                    raise RuntimeError(f"POST {HOOKS} answered {r.status}: {await r.text()}")
                ids.append((await r.json())["id"])
    return ids


async def set_active(base: str, auth: dict[str, str], ids: list[str], active: bool) -> None:
    async with aiohttp.ClientSession(base, headers=auth) as client:
        for endpoint_id in ids:
            async with client.patch(f"{HOOKS}/{endpoint_id}", json={"active": active}) as r:
                if r.status != 200:
                    raise RuntimeError(f"PATCH {HOOKS} answered {r.status}: {await r.text()}")


async def register_n(base: str, auth: dict[str, str], event_id: UUID, n: int) -> float:
    """n registrations from WRITERS clients, as fast as they go; the seconds taken."""
    body = {"event_id": str(event_id), "name": "Bench Attendee", "email": "bench@example.org"}
    numbers = iter(range(n))
    connector = aiohttp.TCPConnector(limit=WRITERS)
    async with aiohttp.ClientSession(base, headers=auth, connector=connector) as client:

        async def writer() -> None:
            for _ in numbers:
                async with client.post(REGISTER, json=body) as r:
                    if r.status != 201:
                        raise RuntimeError(f"POST {REGISTER} answered {r.status}: {await r.text()}")

        t0 = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(WRITERS)))
        return time.perf_counter() - t0


async def drained(conn: asyncpg.Connection) -> float:
    """Wait until no fact and no attempt waits; the seconds it took."""
    t0 = time.perf_counter()
    while await conn.fetchval(WAITING):
        if time.perf_counter() - t0 > DRAIN_S:
            raise RuntimeError(f"webhooks: still waiting after {DRAIN_S:.0f} s")
        await asyncio.sleep(POLL_S)
    return time.perf_counter() - t0


async def settle(conn: asyncpg.Connection) -> None:
    """The same start for every cell: the rows the last drain wrote and deleted vacuumed,
    their pages written out (a checkpoint or an autovacuum of them, due at an instant no
    cell chooses, would otherwise fall on whichever cell runs then)."""
    await conn.execute("VACUUM (ANALYZE) " + ", ".join(f"event.{t}" for t in SETTLED))
    await conn.execute("CHECKPOINT")


async def check(
    conn: asyncpg.Connection,
    events: list[UUID],
    got: list[tuple[float, str, str]],
    expected: int,
    label: str,
) -> tuple[list[str], float]:
    """Problem lines (none: every message arrived once, one attempt each, all succeeded),
    and the span of the attempts' `attempted_at` in seconds."""
    rows = await conn.fetch(MESSAGES, events)
    problems = []
    ids = Counter(i for _, i, _ in got)
    sent = {r["webhook_id"] for r in rows}
    states = Counter(r["state"] for r in rows)
    per_endpoint = Counter(r["endpoint_id"] for r in rows)
    if len(rows) != expected or len(sent) != expected or states != {"succeeded": expected}:
        problems.append(
            f"{label}: {len(sent):,} messages, {len(rows):,} attempts {dict(states)}; "
            f"expected {expected:,}, one attempt each, all succeeded"
        )
    if len(set(per_endpoint.values())) > 1:
        problems.append(f"{label}: messages per endpoint {sorted(per_endpoint.values())}")
    twice = sum(1 for c in ids.values() if c > 1)
    if len(got) != expected or twice or set(ids) != sent:
        problems.append(
            f"{label}: {len(got):,} requests received, {len(ids):,} distinct webhook-ids, "
            f"{twice:,} more than once, {len(sent - set(ids)):,} missing, "
            f"{len(set(ids) - sent):,} unexpected"
        )
    times = [r["attempted_at"] for r in rows if r["attempted_at"] is not None]
    span = (max(times) - min(times)).total_seconds() if times else float("nan")
    return problems, span


# --- (f) fan-out -------------------------------------------------------------------------


def _fanout_row(
    mode: str,
    n: int,
    wrote: float | None,
    last_write: float | None,
    got: list[tuple[float, str, str]],
    span: float | None,
    ok: bool,
) -> str:
    first, last = min(t for t, _, _ in got), max(t for t, _, _ in got)
    took = last - first
    write = f"{wrote:.2f} | {n / wrote:,.0f}" if wrote else "- | -"
    after = f"{last - last_write:.2f}" if last_write else "-"
    return (
        f"| {mode} | {n:,} | {ENDPOINTS} | {len(got):,} | {write} | {took:.2f} "
        f"| {len(got) / took:,.0f} | {f'{span:.2f}' if span else '-'} | {after} "
        f"| {'yes' if ok else 'NO'} |"
    )


async def sender_alone(
    conn: asyncpg.Connection, sink: str, event_id: UUID, n: int
) -> tuple[str, list[str]]:
    """(s) the ceiling: the event's messages sent again by the service's sender alone,
    `PER_ENDPOINT` at once per endpoint, no database; the row and its problems."""
    rows = await conn.fetch(SENDS, event_id)
    work = iter(rows)
    sender = WebhookSender(EgressGuard(allow_private=True))
    failed = Counter[str]()

    async def lane() -> None:
        for r in work:
            body = r["body"].encode()
            answer = await sender.send(r["url"], (r["secret"],), r["webhook_id"], body)
            if not answer.ok:
                failed[str(answer.status or answer.error)] += 1

    await take(sink)
    try:
        await asyncio.gather(*(lane() for _ in range(ENDPOINTS * PER_ENDPOINT)))
    finally:
        await sender.close()
    got = await take(sink)
    ids = {i for _, i, _ in got}
    problems = []
    if failed or len(got) != len(rows) or ids != {r["webhook_id"] for r in rows}:
        problems.append(
            f"sender alone: {len(got):,} of {len(rows):,} received, {len(ids):,} distinct, "
            f"failed {dict(failed)}"
        )
    return _fanout_row("sender alone", n, None, None, got, None, not problems), problems


async def fan_out(url: str, sink: str, auth: dict[str, str], n: int) -> list[str]:
    """(f): the live row and the backlog row, then a line per failed check."""
    conn = await asyncpg.connect(url)
    lines: list[str] = []
    problems: list[str] = []
    try:
        with service(url, WRITERS, 1, **ENV) as base:
            await make_endpoints(base, auth, sink)
            event_id = await fresh_event(conn, 0, 1200)
            await asyncio.sleep(0.5)  # the loop has listened before the first write
            await take(sink)
            wrote = await register_n(base, auth, event_id, n)
            last_write = time.time()
            await drained(conn)
            got = await take(sink)
        found, span = await check(conn, [event_id], got, ENDPOINTS * n, "live")
        problems += found
        lines.append(_fanout_row("live", n, wrote, last_write, got, span, not found))
        print(lines[-1], flush=True)
        row, found = await sender_alone(conn, sink, event_id, n)
        problems += found
        lines.append(row)
        print(lines[-1], flush=True)

        event_id = await fresh_event(conn, 0, 1201)
        with service(url, WRITERS, 1, **{**ENV, "EVENT_SCHEDULER_ENABLED": "false"}) as base:
            wrote = await register_n(base, auth, event_id, n)
        facts = await conn.fetchval(FACTS)
        if facts != n:
            problems.append(f"backlog: {facts:,} facts waiting, expected {n:,}")
        with service(url, WRITERS, 1, **ENV):
            await drained(conn)
            got = await take(sink)
        found, span = await check(conn, [event_id], got, ENDPOINTS * n, "backlog")
        problems += found
        lines.append(_fanout_row("backlog", n, wrote, None, got, span, not found))
        print(lines[-1], flush=True)
    finally:
        await conn.close()
    return [*lines, *problems]


# --- (h) the hot path, endpoints off and on ---------------------------------------------


def _attendee(event_id: UUID) -> Callable[[int], dict[str, Any]]:
    body = {"event_id": str(event_id), "name": "Bench Attendee", "email": "bench@example.org"}
    return lambda _: body


async def hot_path(url: str, sink: str, auth: dict[str, str], seconds: float) -> list[str]:
    """(h): one row per client count, then a line per failed check."""
    conn = await asyncpg.connect(url)
    rows: list[str] = []
    problems: list[str] = []
    try:
        with service(url, max(HOT_CLIENTS), 1, **ENV) as base:
            ids = await make_endpoints(base, auth, sink)
            await set_active(base, auth, ids, False)
            for seq, clients in enumerate(HOT_CLIENTS, 1250):
                event_id = await fresh_event(conn, HOT_EXISTING, seq)
                body = _attendee(event_id)
                # the first requests: not timed, no endpoint listening
                await post_cell(base, REGISTER, body, clients, 0.5, auth)
                cells: dict[str, list[Cell]] = {"off": [], "on": []}
                during = drain = 0.0
                got: list[tuple[float, str, str]] = []
                for side in ORDER:
                    await settle(conn)
                    await set_active(base, auth, ids, side == "on")
                    cell = await post_cell(base, REGISTER, body, clients, seconds, auth)
                    cells[side].append(cell)
                    if side == "on":
                        arrived = await take(sink)
                        during += len(arrived)
                        drain += await drained(conn)
                        got += arrived + await take(sink)
                        await set_active(base, auth, ids, False)
                off, on = pooled(cells["off"]), pooled(cells["on"])
                found, _ = await check(
                    conn, [event_id], got, ENDPOINTS * on.done, f"hot path, {clients} clients"
                )
                problems += found
                rows.append(
                    f"| {HOT_EXISTING:,} | {clients} | {off.rate:7.0f} | {on.rate:7.0f} "
                    f"| {on.rate / off.rate:5.0%} | {ms(off)} | {ms(on)} "
                    f"| {during / on.seconds:,.0f} | {drain:.2f} | {'no' if found else 'yes'} |"
                )
                print(rows[-1], flush=True)
    finally:
        await conn.close()
    return [*rows, *problems]


async def webhooks_run(admin_url: str, n: int, seconds: float) -> tuple[list[str], list[str]]:
    """(the fan-out rows, the hot-path rows), each part on a fresh database."""
    results = []
    with receiver() as sink:
        for part in ("f", "h"):
            url = await fresh_database(admin_url)
            try:
                pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
                token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
                await pool.close()
                auth = {"Authorization": f"Bearer {token}"}
                if part == "f":
                    results.append(await fan_out(url, sink, auth, n))
                else:
                    print("\n" + HOT_HEADER, flush=True)
                    results.append(await hot_path(url, sink, auth, seconds))
            finally:
                await drop_database(admin_url)
    return results[0], results[1]
