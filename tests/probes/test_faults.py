"""A database that goes away and comes back: typed 503s, /readyz, recovery, no lost writes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import psutil

from events_svc import create_app, migrate
from events_svc.embedded import EmbeddedPostgres
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token
from tests.probes.helpers import BASE, event_body


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The app over `settings`, its lifespan running; a client with a '*' token, and the
    app's pool."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        pool = app.state.events.pool
        token, _ = await create_token(pool, "fault", ["*"], None, datetime.now(UTC))
        headers = {"Authorization": f"Bearer {token}"}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            yield c, pool


async def test_postgres_stopped_and_restarted_under_load():
    folder = Path(tempfile.mkdtemp(prefix="events-fault-"))
    server = EmbeddedPostgres(folder)
    await asyncio.to_thread(server.start)
    url = server.url("events")
    try:
        conn = await asyncpg.connect(url)
        await migrate.apply(conn, migrate.default_dir())
        await conn.close()
        settings = Settings(
            database_url=url, pool_min=2, pool_max=6, connect_timeout_s=2, scheduler_enabled=False
        )
        async with serving(settings) as (c, _):
            ev = (await c.post("/admin/events", json=event_body(seats_max=0))).json()
            acknowledged: list[str] = []
            outcomes: list[tuple[int, str | None]] = []

            async def register(n: int) -> None:
                for _ in range(n):
                    r = await c.post("/admin/registrations", json={"event_id": ev["id"]})
                    code = r.json().get("error", {}).get("code") if r.status_code != 201 else None
                    outcomes.append((r.status_code, code))
                    if r.status_code == 201:
                        acknowledged.append(r.json()["id"])

            await register(10)
            await asyncio.to_thread(server.stop)  # the database goes away
            await register(10)  # refused at once (a refused connection), not hanging
            ready = await c.get("/readyz")
            assert all(status == 503 for status, _ in outcomes[10:]), outcomes[10:]
            assert {code for _, code in outcomes[10:]} == {"database_unavailable"}
            assert ready.status_code == 503
            restarted = EmbeddedPostgres(folder)
            await asyncio.to_thread(restarted.start)  # and comes back
            server = restarted
            await register(10)  # the same app, never restarted
            assert [s for s, _ in outcomes[20:]] == [201] * 10
            assert (await c.get("/readyz")).status_code == 200
        conn = await asyncpg.connect(url)
        rows = {str(r["id"]) for r in await conn.fetch("SELECT id FROM event.registrations")}
        await conn.close()
        assert rows == set(acknowledged) and len(rows) == 20  # none lost, none extra
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_server_that_turned_read_only_answers_database_unavailable_and_is_left(
    admin_url: str, settings: Settings
) -> None:
    """A connection that lands on a server in recovery (a standby, or a primary being
    demoted after a failover) refuses writes: the request answers 503
    `database_unavailable` with `Retry-After`, never a 500, and the pool drops that
    connection, so the next one is made afresh (to the new primary, with a URL of
    several hosts and `target_session_attrs=read-write`)."""
    assert settings.database_url
    name = urlsplit(settings.database_url).path[1:]
    # as a URL of several hosts would say it: only a server that takes writes will do
    url = settings.database_url + "&target_session_attrs=read-write"
    narrow = dataclasses.replace(settings, database_url=url, pool_min=1, pool_max=1)
    async with serving(narrow) as (c, pool):
        ev = (await c.post("/admin/events", json=event_body(seats_max=5))).json()
        admin = await asyncpg.connect(admin_url)
        try:
            # the pool's one connection now sits on a server that refuses writes
            await admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
            async with pool.acquire() as conn:
                await conn.execute("SET default_transaction_read_only = on")
                before = await conn.fetchval("SELECT pg_backend_pid()")
            for _ in range(2):  # the connection on it, then a new one refused by it
                r = await c.post("/admin/registrations", json={"event_id": ev["id"]})
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "database_unavailable"
                assert r.headers["retry-after"]
            ready = await c.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["reason"] == "database_unavailable"
            # the primary is back (here: the same server writable again)
            await admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        finally:
            await admin.close()
        r = await c.post("/admin/registrations", json={"event_id": ev["id"]})
        assert r.status_code == 201, r.text
        assert (await c.get("/readyz")).status_code == 200
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT pg_backend_pid()") != before


async def test_backends_cut_mid_request_answer_503_and_the_pool_heals(
    admin_url: str, settings: Settings
) -> None:
    """Server sessions ended under load (a crash, a failover, an operator's
    `pg_terminate_backend`), some mid-transaction: a request answers 201 or 503
    `database_unavailable`, never a 500 (asyncpg reports some of these cuts as an internal
    client error, its protocol left mid-operation: such a connection is dropped too), and
    once the cuts stop every request succeeds on the same app."""
    assert settings.database_url
    name = urlsplit(settings.database_url).path[1:]
    wide = dataclasses.replace(settings, pool_min=4, pool_max=8)
    async with serving(wide) as (c, _):
        ev = (await c.post("/admin/events", json=event_body(seats_max=0))).json()
        answers: list[tuple[int, str | None]] = []
        cutting = True

        async def client() -> None:
            while cutting:
                r = await c.post("/admin/registrations", json={"event_id": ev["id"]})
                code = r.json().get("error", {}).get("code") if r.status_code != 201 else None
                answers.append((r.status_code, code))

        clients = [asyncio.create_task(client()) for _ in range(12)]
        admin = await asyncpg.connect(admin_url)
        try:
            for _ in range(60):
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = $1 AND pid <> pg_backend_pid()",
                    name,
                )
                await asyncio.sleep(0.03)
        finally:
            cutting = False
            await asyncio.gather(*clients)
            await admin.close()
        statuses = {status for status, _ in answers}
        assert statuses <= {201, 503}, [a for a in answers if a[0] not in (201, 503)][:3]
        assert {code for status, code in answers if status == 503} <= {"database_unavailable"}
        assert 503 in statuses, "no request met a cut"
        for _ in range(20):  # healed: no broken connection is handed out again
            r = await c.post("/admin/registrations", json={"event_id": ev["id"]})
            assert r.status_code == 201, r.text


def _suspend_server(folder: Path) -> list[psutil.Process]:
    """SIGSTOP the postmaster of the server in `folder` and every process it started."""
    pidfile = next(folder.rglob("postmaster.pid"))
    postmaster = psutil.Process(int(pidfile.read_text().split()[0]))
    frozen = [postmaster, *postmaster.children(recursive=True)]
    for proc in frozen:
        proc.suspend()
    return frozen


async def test_a_frozen_database_answers_503_within_its_bounds_and_recovers():
    """A primary that stops answering without closing anything (a frozen machine, a cut
    network): a request waits at most the statement bound (a statement in flight) or the
    pool's wait (`EVENTS_POOL_WAIT_S`, for a connection), then answers 503
    `database_unavailable`; never a hang, never a 500. Thawed, the same app serves again."""
    folder = Path(tempfile.mkdtemp(prefix="events-frozen-"))
    server = EmbeddedPostgres(folder)
    await asyncio.to_thread(server.start)
    url = server.url("events")
    frozen: list[psutil.Process] = []
    try:
        conn = await asyncpg.connect(url)
        await migrate.apply(conn, migrate.default_dir())
        await conn.close()
        settings = Settings(
            database_url=url,
            pool_min=2,
            pool_max=2,
            connect_timeout_s=1,
            pool_wait_s=1,
            statement_timeout_ms=1000,
            scheduler_enabled=False,
        )
        async with serving(settings) as (c, _):
            ev = (await c.post("/admin/events", json=event_body(seats_max=0))).json()
            frozen = await asyncio.to_thread(_suspend_server, folder)
            body = {"event_id": ev["id"]}
            answers = await asyncio.gather(
                *(c.post("/admin/registrations", json=body, timeout=60) for _ in range(6))
            )
            assert [r.status_code for r in answers] == [503] * 6, [r.text for r in answers]
            assert {r.json()["error"]["code"] for r in answers} == {"database_unavailable"}
            assert all(r.headers["retry-after"] for r in answers)
            for proc in frozen:
                proc.resume()
            frozen = []
            for _ in range(3):  # the same app, never restarted
                r = await c.post("/admin/registrations", json=body)
                assert r.status_code == 201, r.text
    finally:
        for proc in frozen:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.resume()
        await asyncio.to_thread(server.stop)
        shutil.rmtree(folder, ignore_errors=True)


async def test_a_request_waits_for_a_connection_at_most_the_pools_wait(settings: Settings):
    """Every connection of the pool held (stuck on a database that stopped answering, or
    simply busy): a request waits `EVENTS_POOL_WAIT_S` for one, then answers 503
    `database_unavailable` with `Retry-After`; once one is free, it is served."""
    narrow = dataclasses.replace(settings, pool_min=1, pool_max=1, pool_wait_s=1)
    async with serving(narrow) as (c, pool):
        ev = (await c.post("/admin/events", json=event_body(seats_max=0))).json()
        body = {"event_id": ev["id"]}
        async with pool.acquire():
            r = await c.post("/admin/registrations", json=body, timeout=30)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "database_unavailable"
            assert r.headers["retry-after"]
        r = await c.post("/admin/registrations", json=body)
        assert r.status_code == 201, r.text


async def test_a_first_host_that_never_answers_does_not_hide_the_next(settings: Settings):
    """A URL of two hosts whose first is silent (a machine powered off or cut off: the
    connection is neither refused nor answered): each host gets the whole connect
    timeout, so the second, writable one serves; with one timeout over both, the first
    would use it up and every request would answer 503."""
    assert settings.database_url
    held: list[asyncio.StreamWriter] = []  # accepted, never answered

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    parts = urlsplit(settings.database_url)
    userinfo, _, real = parts.netloc.rpartition("@")
    netloc = f"{userinfo}@127.0.0.1:{port},{real}"
    url = parts._replace(netloc=netloc).geturl()
    url += ("&" if parts.query else "?") + "target_session_attrs=read-write"
    both = dataclasses.replace(settings, database_url=url, pool_min=0, connect_timeout_s=1)
    try:
        async with serving(both) as (c, _):
            ev = await c.post("/admin/events", json=event_body(seats_max=0))
            assert ev.status_code == 201, ev.text
            r = await c.post("/admin/registrations", json={"event_id": ev.json()["id"]})
            assert r.status_code == 201, r.text
            assert (await c.get("/readyz")).status_code == 200
    finally:
        for writer in held:
            writer.close()
        silent.close()
        await silent.wait_closed()
