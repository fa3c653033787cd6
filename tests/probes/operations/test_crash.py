"""Event operations under crashes, and the proof that the operations lane sends nothing.

A real `events-svc serve` (EVENTS_OPERATION_BATCH=5) is SIGKILLed at each boundary: right
after its start answered 202, in the middle of the batches, and with only the last batch
left; each time a restarted server (or a resume) converges to exactly one trigger per
attendee and the event's ics_sequence moved once. The boundary is made exact, not raced:
the probe holds one registration's row lock, so the batch that reaches it waits inside
its transaction, and the server is killed once that batch is seen waiting.

The operations lane writes no outbox row and opens no connection but the database's: in
process, socket connects and the event loop's connection calls are wrapped for success,
rollback, replay and denial; the crashed servers run with a `sitecustomize` that wraps
them the same way and writes any other destination to a file that must stay empty.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx
import pytest

from events_svc.adapters.standalone import standalone_ports
from events_svc.app import create_app
from events_svc.ports import Ports
from events_svc.settings import Settings
from tests.probes.helpers import (
    API,
    BASE,
    Api,
    free_port,
    make_event,
    operation_params,
    preview,
    run_all,
    scheduler,
    seed,
    start,
    start_serve,
    template,
    trigger_rows,
    wait_ready,
)

AUDIENCE = 200
BATCH = 5
# wraps every outbound connection of the process: a destination that is not the
# database's is written to PROBE_NET_LOG and refused; the database's go to PROBE_NET_LOG.db
SITECUSTOMIZE = """
import asyncio
import json
import os
import socket

_LOG = os.environ["PROBE_NET_LOG"]
_ALLOWED = json.loads(os.environ["PROBE_NET_ALLOW"])


def _allowed(address):
    if isinstance(address, (str, bytes)):
        path = os.fsdecode(address)
        return any(path.startswith(a) for a in _ALLOWED if a.startswith("/"))
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}" in _ALLOWED
    return False


def _check(kind, address):
    ok = _allowed(address)
    with open(_LOG + ".db" if ok else _LOG, "a") as out:
        out.write(f"{os.getpid()} {kind} {address!r}\\n")
    if not ok:
        raise OSError(f"outbound connection refused by the probe: {address!r}")


def _wrap_socket(name):
    original = getattr(socket.socket, name)

    def wrapped(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
            _check(name, address)
        return original(self, address)

    setattr(socket.socket, name, wrapped)


def _wrap_loop(cls):
    create, sock_connect, unix = cls.create_connection, cls.sock_connect, cls.create_unix_connection

    async def create_connection(self, factory, host=None, port=None, *args, **kw):
        if host is not None:
            _check("create_connection", (host, port))
        return await create(self, factory, host, port, *args, **kw)

    async def sock_connect_(self, sock, address):
        _check("sock_connect", address)
        return await sock_connect(self, sock, address)

    async def create_unix_connection(self, factory, path=None, *args, **kw):
        if path is not None:
            _check("create_unix_connection", path)
        return await unix(self, factory, path, *args, **kw)

    cls.create_connection = create_connection
    cls.sock_connect = sock_connect_
    cls.create_unix_connection = create_unix_connection


for _name in ("connect", "connect_ex"):
    _wrap_socket(_name)
_wrap_loop(asyncio.BaseEventLoop)
try:
    import uvloop
except ImportError:
    pass
else:
    _wrap_loop(uvloop.Loop)
"""


def database_destinations(url: str) -> list[str]:
    """Where a connection to the database at `url` may go: its socket folder, or its host
    (as named and as resolved) and port."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = (query.get("host") or [parts.hostname or "localhost"])[0]
    port = int((query.get("port") or [parts.port or 5432])[0])
    if host.startswith("/"):
        return [host]
    resolved = {info[4][0] for info in socket.getaddrinfo(host, port)}
    return [f"{h}:{port}" for h in {host, *resolved}]


def allowed(destinations: list[str], address: Any) -> bool:
    if isinstance(address, (str, bytes)):
        path = os.fsdecode(address)
        return any(path.startswith(d) for d in destinations if d.startswith("/"))
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}" in destinations
    return False


class Guard:
    """The in-process wrapper's record: every destination, and the refused ones."""

    def __init__(self, destinations: list[str]) -> None:
        self.destinations = destinations
        self.database: list[Any] = []
        self.refused: list[Any] = []

    def check(self, address: Any) -> None:
        if allowed(self.destinations, address):
            self.database.append(address)
            return
        self.refused.append(address)
        raise OSError(f"outbound connection refused by the probe: {address!r}")


@pytest.fixture
async def guard(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Guard]:
    """Wrap this process's socket connects and its event loop's connection calls."""
    assert settings.database_url
    found = Guard(database_destinations(settings.database_url))
    for name in ("connect", "connect_ex"):
        original = getattr(socket.socket, name)

        def wrapped(self: socket.socket, address: Any, _original: Callable = original) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
                found.check(address)
            return _original(self, address)

        monkeypatch.setattr(socket.socket, name, wrapped)
    loop_type = type(asyncio.get_running_loop())
    create = loop_type.create_connection
    sock_connect = loop_type.sock_connect
    unix = loop_type.create_unix_connection

    async def create_connection(
        self: Any, factory: Any, host: Any = None, port: Any = None, *a: Any, **kw: Any
    ) -> Any:
        if host is not None:
            found.check((host, port))
        return await create(self, factory, host, port, *a, **kw)

    async def sock_connect_(self: Any, sock: Any, address: Any) -> Any:
        found.check(address)
        return await sock_connect(self, sock, address)

    async def create_unix_connection(
        self: Any, factory: Any, path: Any = None, *a: Any, **kw: Any
    ) -> Any:
        if path is not None:
            found.check(path)
        return await unix(self, factory, path, *a, **kw)

    monkeypatch.setattr(loop_type, "create_connection", create_connection)
    monkeypatch.setattr(loop_type, "sock_connect", sock_connect_)
    monkeypatch.setattr(loop_type, "create_unix_connection", create_unix_connection)
    yield found


async def outbox_count(api: Api) -> int:
    async with api.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM event.outbox_messages"))


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


# --- in process: success, rollback, replay, denial --------------------------------------------


async def test_operations_write_no_outbox_row_and_connect_nowhere_but_the_database(
    api: Api, admin, settings: Settings, guard: Guard
):
    # the guard has teeth: a connection elsewhere is refused and recorded, the database's
    # own connections are seen and let through
    with pytest.raises(OSError, match="refused by the probe"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    loop = asyncio.get_running_loop()
    with pytest.raises(OSError, match="refused by the probe"):
        await loop.create_connection(asyncio.Protocol, "127.0.0.1", 9)
    assert len(guard.refused) == 2
    guard.refused.clear()
    assert settings.database_url
    conn = await asyncpg.connect(settings.database_url)
    await conn.close()
    assert guard.database

    company = uuid.uuid4()
    ev = await make_event(admin, company_id=str(company))
    await scheduler(admin, ev["id"], await template(admin))  # a mail line the event has
    await seed(api, ev["id"], 4)
    before = await outbox_count(api)
    # success: preview, start, resume, and the loop's pass over another operation
    op = await start(admin, await preview(admin, ev["id"]))
    assert (await admin.post(f"/admin/operations/{op['id']}/resume")).json()["state"] == "completed"
    reminder = await start(admin, await preview(admin, ev["id"], "reminder"))
    await run_all(api.pool, settings, standalone_ports())
    got = (await admin.get(f"/admin/operations/{reminder['id']}")).json()
    assert got["state"] == "completed"
    # rollback: a fault after the event change, inside the start's transaction
    async with api.pool.acquire() as c:
        await c.execute(
            "CREATE FUNCTION event.probe_fault() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'probe' USING ERRCODE = '55P03'; END $$;"
            " CREATE TRIGGER probe_fault BEFORE INSERT ON event.operation_audience"
            " FOR EACH ROW EXECUTE FUNCTION event.probe_fault()"
        )
    cancelling = await preview(admin, ev["id"], "cancellation")
    url = f"/admin/operations/{cancelling['id']}/start"
    revision = {"If-Match": str(cancelling["revision"])}
    assert error(await admin.post(url, headers=revision)) == (503, "busy")
    async with api.pool.acquire() as c:
        await c.execute("DROP TRIGGER probe_fault ON event.operation_audience")
    # replay: a second start, resume and cancel of a finished operation
    r = await admin.post(f"/admin/operations/{op['id']}/start", headers={"If-Match": "1"})
    assert error(r) == (409, "operation_already_started")
    for action in ("resume", "cancel"):
        r = await admin.post(f"/admin/operations/{op['id']}/{action}")
        assert error(r) == (409, "operation_finished")
    # denial: 428, 412, 409 in progress, 403, 404
    assert error(await admin.post(url)) == (428, "precondition_required")
    assert error(await admin.post(url, headers={"If-Match": "99"})) == (412, "stale_revision")
    running = await start(admin, await preview(admin, ev["id"], "follow_up"))
    rival = await preview(admin, ev["id"], "follow_up")
    r = await admin.post(
        f"/admin/operations/{rival['id']}/start", headers={"If-Match": str(rival["revision"])}
    )
    assert error(r) == (409, "operation_in_progress")
    no_scope = await api.token("event:read")
    r = await api.client.post(url, headers={**no_scope, **revision})
    assert error(r) == (403, "missing_scope")
    stranger = await api.token("event:operate", company=uuid.uuid4())  # another company
    r = await api.client.post(url, headers={**stranger, **revision})
    assert error(r) == (404, "not_found")
    body = {"kind": "reminder", "params": operation_params("reminder")}
    r = await api.client.post(f"/admin/events/{ev['id']}/operations", json=body, headers=stranger)
    assert error(r) == (404, "not_found")
    # and the rolled-back cancellation, started at last, once the follow-up is done (a
    # change of the event waits for every operation in progress on it)
    for o in (running, cancelling):
        if o is cancelling:
            await start(admin, cancelling)
        assert (await admin.post(f"/admin/operations/{o['id']}/resume")).json()["state"] == (
            "completed"
        )
    assert len(await trigger_rows(api.pool)) == 16  # 4 attendees, 4 completed operations
    assert await outbox_count(api) == before == 0
    assert guard.refused == []


# --- real processes, SIGKILLed at each boundary ------------------------------------------------


class NetProbe:
    """The `sitecustomize` of the crashed servers, and what it recorded."""

    def __init__(self, folder: Path, db_url: str) -> None:
        (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.log = folder / "outbound.log"
        self.db_log = folder / "outbound.log.db"
        paths = [str(folder), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.env = {
            "PYTHONPATH": os.pathsep.join(paths),
            "PROBE_NET_LOG": str(self.log),
            "PROBE_NET_ALLOW": json.dumps(database_destinations(db_url)),
        }

    def check_armed(self) -> None:
        """A process with this environment refuses and records a connection elsewhere."""
        code = (
            "import socket\n"
            "try:\n    socket.create_connection(('127.0.0.1', 9), 1)\n"
            "except OSError as e:\n    print(e)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=True,
        )
        assert "refused by the probe" in out.stdout, out
        assert "('127.0.0.1', 9)" in self.log.read_text()
        self.log.unlink()

    def outbound(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def serve(db_url: str, port: int, probe: NetProbe) -> subprocess.Popen[str]:
    return start_serve(
        db_url,
        port,
        EVENTS_OPERATION_BATCH=str(BATCH),
        EVENTS_LOCK_TIMEOUT_MS="120000",
        EVENTS_STATEMENT_TIMEOUT_MS="120000",
        EVENTS_LOG_LEVEL="WARNING",
        **probe.env,
    )


async def waiting_on(api: Api, holder_pid: int) -> int:
    async with api.pool.acquire() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                holder_pid,
            )
        )


async def crash_at(
    api: Api, admin: httpx.AsyncClient, db_url: str, tmp_path: Path, position: int
) -> tuple[dict[str, Any], dict[str, Any], NetProbe]:
    """Seed AUDIENCE attendees, hold the row lock of the `position`-th (in the batches'
    order), start a reschedule on a real server, SIGKILL it once the batch reaching that
    row waits; (the event, the operation as the crash left it, the probe)."""
    ev = await make_event(admin, seats_max=AUDIENCE)
    await seed(api, ev["id"], AUDIENCE)
    async with api.pool.acquire() as conn:
        ids = sorted(r["id"] for r in await conn.fetch("SELECT id FROM event.registrations"))
    probe = NetProbe(tmp_path, db_url)
    probe.check_armed()
    holder = await asyncpg.connect(db_url)
    tx = holder.transaction()
    await tx.start()
    await holder.execute(
        "SELECT 1 FROM event.registrations WHERE id = $1 FOR UPDATE", ids[position]
    )
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = serve(db_url, port, probe)
    try:
        await asyncio.to_thread(wait_ready, proc, base, 90)
        token = await api.token("event:operate")
        async with httpx.AsyncClient(base_url=f"{base}{API}", headers=token) as http:
            op = await start(http, await preview(http, ev["id"]))
            assert op["state"] == "running"
        for _ in range(6000):  # until the batch that reaches the held row waits for it
            if await waiting_on(api, holder.get_server_pid()):
                break
            assert proc.poll() is None
            await asyncio.sleep(0.01)
        assert await waiting_on(api, holder.get_server_pid())
        proc.kill()  # SIGKILL: the batch in hand dies with its transaction
        await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
        await tx.rollback()
        await holder.close()
    crashed = (await admin.get(f"/admin/operations/{op['id']}")).json()
    return ev, crashed, probe


async def converge_on_a_restarted_server(
    api: Api, admin: httpx.AsyncClient, db_url: str, op: dict[str, Any], probe: NetProbe
) -> dict[str, Any]:
    port = free_port()
    proc = serve(db_url, port, probe)
    try:
        await asyncio.to_thread(wait_ready, proc, f"http://127.0.0.1:{port}", 90)
        view = op
        for _ in range(6000):  # the restarted loop picks the operation up by itself
            view = (await admin.get(f"/admin/operations/{op['id']}")).json()
            if view["state"] == "completed":
                break
            assert proc.poll() is None
            await asyncio.sleep(0.02)
        return dict(view)
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)


async def converge_by_resume(admin: httpx.AsyncClient, op: dict[str, Any]) -> dict[str, Any]:
    view = op
    for _ in range(1000):  # the killed server's backend lets go of the operation soon
        r = await admin.post(f"/admin/operations/{op['id']}/resume")
        assert r.status_code in (200, 503), r.text
        view = r.json() if r.status_code == 200 else view
        if view["state"] == "completed":
            break
        await asyncio.sleep(0.02)
    return dict(view)


async def assert_converged(
    api: Api,
    admin: httpx.AsyncClient,
    ev: dict[str, Any],
    view: dict[str, Any],
    probe: NetProbe,
    servers: int,
) -> None:
    assert (view["state"], view["audience"], view["processed"]) == ("completed", AUDIENCE, AUDIENCE)
    assert (view["triggers_created"], view["skipped_inactive"]) == (AUDIENCE, 0)
    made = await trigger_rows(api.pool)
    assert len(made) == len({t["registration_id"] for t in made}) == AUDIENCE
    assert {(t["ics_sequence"], t["event_revision"]) for t in made} == {(1, 2)}
    event = (await admin.get(f"/admin/events/{ev['id']}")).json()
    assert (event["ics_sequence"], event["revision"]) == (1, 2)  # moved once
    async with api.pool.acquire() as conn:
        updates = await conn.fetchval(
            "SELECT count(*) FROM event.event_audit_log WHERE verb = 'event_updated'"
        )
        outcomes = await conn.fetch(
            "SELECT outcome::text AS outcome, count(*) AS n"
            " FROM event.operation_audience GROUP BY 1"
        )
        outbox = await conn.fetchval("SELECT count(*) FROM event.outbox_messages")
    assert updates == 1
    assert [(o["outcome"], o["n"]) for o in outcomes] == [("created", AUDIENCE)]
    # the crashed and the restarted servers connected to the database, and nowhere else
    assert outbox == 0
    assert probe.outbound() == ""
    processes = {line.split()[0] for line in probe.db_log.read_text().splitlines()}
    assert len(processes) == servers


@pytest.mark.timeout(300)
async def test_a_sigkill_right_after_the_start_answered_converges_on_restart(
    api: Api, admin, db_url: str, tmp_path: Path
):
    ev, crashed, probe = await crash_at(api, admin, db_url, tmp_path, 0)
    # the start committed whole: the event moved, the snapshot exists, no batch ran
    assert (crashed["state"], crashed["audience"], crashed["processed"]) == ("running", AUDIENCE, 0)
    assert await trigger_rows(api.pool) == []
    view = await converge_on_a_restarted_server(api, admin, db_url, crashed, probe)
    await assert_converged(api, admin, ev, view, probe, servers=2)


@pytest.mark.timeout(300)
async def test_a_sigkill_mid_batch_keeps_whole_batches_and_resume_converges(
    api: Api, admin, db_url: str, tmp_path: Path
):
    ev, crashed, probe = await crash_at(api, admin, db_url, tmp_path, AUDIENCE // 2)
    # the batches before the held row committed; the one holding it died whole
    assert 0 < crashed["processed"] == AUDIENCE // 2 < AUDIENCE
    assert crashed["triggers_created"] == AUDIENCE // 2 == len(await trigger_rows(api.pool))
    view = await converge_by_resume(admin, crashed)
    await assert_converged(api, admin, ev, view, probe, servers=1)


@pytest.mark.timeout(300)
async def test_a_sigkill_before_completion_converges_on_restart(
    api: Api, admin, db_url: str, tmp_path: Path
):
    ev, crashed, probe = await crash_at(api, admin, db_url, tmp_path, AUDIENCE - 1)
    # every batch but the last committed; the operation is not completed
    assert (crashed["state"], crashed["processed"]) == ("running", AUDIENCE - BATCH)
    assert len(await trigger_rows(api.pool)) == AUDIENCE - BATCH
    view = await converge_on_a_restarted_server(api, admin, db_url, crashed, probe)
    await assert_converged(api, admin, ev, view, probe, servers=2)


class PortSpy:
    """Every host port at once: any call is recorded and refused."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async def called(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise AssertionError(f"an operation called the port method {name}")

        return called


async def test_operations_call_no_port(settings: Settings, pool: asyncpg.Pool):
    """Preview, start, batches, resume, cancel and the feed, through an app whose every
    port records and refuses any call (the scheduler loop running too): no call."""
    spy = PortSpy()
    ports = Ports(
        partner_directory=spy,
        template_renderer=spy,
        mail_queue=spy,
        lead_sink=spy,
        sms_queue=spy,
    )
    app = create_app(settings, ports)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        admin = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE, headers=await api.token("*")
        )
        ev = await make_event(admin)
        await seed(api, ev["id"], 12)
        cancelled = await preview(admin, ev["id"], "follow_up")
        for kind in ("reminder", "reschedule", "cancellation"):
            op = await start(admin, await preview(admin, ev["id"], kind))
            assert (await admin.post(f"/admin/operations/{op['id']}/resume")).status_code == 200
        assert (await admin.post(f"/admin/operations/{cancelled['id']}/cancel")).status_code == 200
        assert (
            len((await admin.get("/admin/triggers", params={"limit": 200})).json()["items"]) == 36
        )
        await admin.aclose()
        await api.client.aclose()
    assert spy.calls == []
