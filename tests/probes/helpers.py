"""Helpers shared by the probes: the test databases, the API client, the rows a probe sets
up, the mail scheduler's pass and outbox, and real `events-svc serve` processes.
Fixtures live in conftest.py; a helper used by one probe module stays in that module.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from events_svc import migrate
from events_svc.adapters.standalone import OutboxQueue, StoreRenderer
from events_svc.loops import Composition, Entry, Loop, Services, compose_passes
from events_svc.ports import PartnerContact, Ports
from events_svc.settings import Settings
from events_svc.verbs.mail import PassOptions, run_mail_pass
from events_svc.verbs.tokens import create_token

API = "/api/v1/event"
BASE = f"http://test{API}"
# the instants of event_body's default dates
BEGIN = datetime(2027, 5, 10, 9, 0, tzinfo=UTC)
END = datetime(2027, 5, 12, 18, 0, tzinfo=UTC)


# --- test databases ------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    """The server URL `url` naming the database `name`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def new_database(admin_url: str, template: str | None) -> str:
    """Create a database with a fresh name, cloned from `template` when given; its name."""
    name = f"events_test_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(admin_url)
    try:
        clause = f' TEMPLATE "{template}" STRATEGY = FILE_COPY' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await conn.close()
    return name


async def drop_database(admin_url: str, name: str) -> None:
    """Drop the database `name`, closing the connections still open on it."""
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _copy_before(folder: Path, first: str) -> None:
    folder.mkdir()
    for path in sorted(migrate.default_dir().glob("*.sql")):
        if path.name < first:
            shutil.copy(path, folder / path.name)


async def migrate_before(conn: asyncpg.Connection, folder: Path, first: str) -> list[str]:
    """Apply the service's migrations whose names sort before `first` (copied into
    `folder`, a new folder): the database as it was before `first` landed. Applying
    `migrate.default_dir()` afterwards adds the rest."""
    _copy_before(folder, first)
    return await migrate.apply(conn, folder)


# --- the API and the rows a probe sets up --------------------------------------------


class Api:
    """An httpx client on the real ASGI app plus token minting."""

    def __init__(self, app: Any, pool: asyncpg.Pool) -> None:
        self.app = app
        self.pool = pool
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)

    async def token(self, *scopes: str, company: uuid.UUID | None = None) -> dict[str, str]:
        token, _ = await create_token(
            self.pool, "probe", list(scopes) or ["*"], company, datetime.now(UTC)
        )
        return {"Authorization": f"Bearer {token}"}


async def api_status(client: httpx.AsyncClient, method: str, path: str, **kw: Any) -> Any:
    """An admin API call's status and error code (None when it succeeded)."""
    response = await client.request(method, path, **kw)
    code = None
    if response.status_code >= 400:
        code = response.json()["error"]["code"]
    return response.status_code, code


async def company_client(api: Api, company: uuid.UUID) -> httpx.AsyncClient:
    """A client whose every request carries a '*' token of `company`."""
    headers = {**await api.token("*", company=company), "Content-Type": "application/json"}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )


def event_body(**over: Any) -> dict[str, Any]:
    """The body of a valid event (2027-05-10 09:00 to 2027-05-12 18:00 UTC, 100 seats)."""
    body: dict[str, Any] = {
        "name": "PyCon Lisbon",
        "date_begin": "2027-05-10T09:00:00+00:00",
        "date_end": "2027-05-12T18:00:00+00:00",
        "date_tz": "Europe/Lisbon",
        "seats_limited": True,
        "seats_max": 100,
    }
    body.update(over)
    return body


async def make_event(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    """Create an event from event_body(**over) through the API (201); its view."""
    r = await admin.post("/admin/events", json=event_body(**over))
    assert r.status_code == 201, r.text
    return dict(r.json())


async def insert_registration(
    pool: asyncpg.Pool,
    event_id: Any,
    *,
    ticket: Any = None,
    slot: Any = None,
    state: str = "open",
    sale_status: str | None = None,
) -> uuid.UUID:
    """Set up a registration row directly (tests of constraints that need one); with a
    `sale_status`, the row is linked to a fresh sale order."""
    async with pool.acquire() as conn:
        multi = await conn.fetchval("SELECT is_multi_slots FROM event.events WHERE id=$1", event_id)
        return await conn.fetchval(
            """INSERT INTO event.registrations (event_id, event_is_multi_slots, event_slot_id,
                   event_ticket_id, state, barcode, sale_status, sale_order_id)
               VALUES ($1, $2, $3, $4, $5::event.registration_state, $6, $7::event.sale_status,
                   CASE WHEN $7 IS NOT NULL THEN gen_random_uuid() END) RETURNING id""",
            event_id,
            multi,
            slot,
            ticket,
            state,
            str(uuid.uuid4().int)[:20],
            sale_status,
        )


async def correct(
    admin: httpx.AsyncClient,
    registration_id: str,
    reason: str = "the attendee asked",
    params: dict[str, str] | None = None,
    **fields: Any,
) -> httpx.Response:
    """PATCH a correction of `fields`, with the registration's current version as If-Match."""
    url = f"/admin/registrations/{registration_id}"
    version = (await admin.get(url)).json()["version"]
    body = {"reason": reason, **fields}
    return await admin.patch(url, json=body, headers={"If-Match": str(version)}, params=params)


async def cancel(
    admin: httpx.AsyncClient, registration_id: str, reason: str = "the attendee asked"
) -> httpx.Response:
    """POST the cancel command with a reason."""
    return await admin.post(
        f"/admin/registrations/{registration_id}/cancel", json={"reason": reason}
    )


async def add_slot(admin: httpx.AsyncClient, event_id: str, hour: int = 10) -> dict[str, Any]:
    """A one-hour slot on 2027-05-10 (inside event_body's dates)."""
    begin, end = f"2027-05-10T{hour:02}:00:00Z", f"2027-05-10T{hour + 1:02}:00:00Z"
    body = {"event_id": event_id, "date_begin": begin, "date_end": end}
    r = await admin.post("/admin/slots", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def add_ticket(admin: httpx.AsyncClient, event_id: str, **fields: Any) -> dict[str, Any]:
    """A ticket of the event, named "T" unless `fields` say otherwise (201)."""
    r = await admin.post("/admin/tickets", json={"event_id": event_id, "name": "T", **fields})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def seed(api: Api, event_id: str, n: int, base: int = 0) -> None:
    """n open attendees with an email, inserted in one statement (G1 <g1@example.org> ...);
    their barcodes are base+1 .. base+n."""
    async with api.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, name, email, date_open)"
            " SELECT $1, ($3::bigint + g)::text, 'G' || g, 'g' || g || '@example.org', now()"
            " FROM generate_series(1, $2) g",
            uuid.UUID(event_id),
            n,
            base,
        )


class Directory:
    """A host's partner directory that answers `contact` for every partner."""

    def __init__(self, contact: PartnerContact | None) -> None:
        self._contact = contact

    async def contact(self, partner_id: uuid.UUID) -> PartnerContact | None:
        return self._contact


# --- the mail scheduler ----------------------------------------------------------------


def ports(pool: asyncpg.Pool) -> Ports:
    """The standalone renderer and outbox queue, as a pass needs them."""
    return Ports(template_renderer=StoreRenderer(), mail_queue=OutboxQueue())


async def run(
    api: Api,
    now: datetime,
    *,
    batch: int = 50,
    cap: int = 1000,
    p: Ports | None = None,
    **kw: Any,
) -> Any:
    """One mail pass at `now` (standalone ports unless `p`); its RunSummary."""
    options = PassOptions(batch=batch, cap=cap, default_sender="events@example.org")
    return await run_mail_pass(api.pool, p or ports(api.pool), options, now, **kw)


def composition(
    pool: asyncpg.Pool,
    settings: Settings,
    p: Ports | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Composition:
    """The one composition of the passes over `pool` (standalone ports unless `p`)."""
    return compose_passes(Services(lambda: pool, p or ports(pool), settings, clock))


def hand_loop(
    pool: asyncpg.Pool,
    settings: Settings,
    p: Ports | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Loop:
    """A loop over the composition, not started: a probe turns its lanes by hand
    (`loop.lanes[name].tick()`)."""
    passes = composition(pool, settings, p, clock)
    return Loop(passes.lanes, lambda: pool, settings, clock)


async def run_all(
    pool: asyncpg.Pool,
    settings: Settings,
    p: Ports | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    *,
    sweep: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every pass once, as `scheduler run-once` runs them: each pass's view by name."""
    passes = composition(pool, settings, p, clock)
    try:
        reports = await passes.run(Entry("cli", sweep=sweep))
    finally:
        await passes.close()
    return {r.name: r.view() for r in reports}


async def template(admin: httpx.AsyncClient, body: str = "Hello {{ registration.name }}") -> str:
    """A stored message template (subject "About {{ event.name }}"); its id."""
    subject = "About {{ event.name }}"
    r = await admin.post("/admin/templates", json={"name": "T", "subject": subject, "body": body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def scheduler(admin: httpx.AsyncClient, event_id: str, tpl: str, **over: Any) -> dict:
    """A mail line of the event (one day before it unless `over` says otherwise); its view."""
    body = {
        "event_id": event_id,
        "interval_nbr": 1,
        "interval_unit": "days",
        "interval_kind": "before_event",
        "template_ref": tpl,
        **over,
    }
    r = await admin.post("/admin/mails", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def outbox(api: Api, scheduler_id: str | None = None) -> list[asyncpg.Record]:
    """The queued messages (of one mail line when given), by recipient."""
    async with api.pool.acquire() as conn:
        return await conn.fetch(
            "SELECT * FROM event.outbox_messages WHERE $1::uuid IS NULL OR scheduler_id = $1"
            " ORDER BY recipient",
            uuid.UUID(scheduler_id) if scheduler_id else None,
        )


async def exactly_once(api: Api, n: int) -> None:
    """n messages queued, one per (line, attendee), each with its receipt and no receipt
    without its message."""
    async with api.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS rows, count(DISTINCT (scheduler_id, registration_id)) AS pairs"
            " FROM event.outbox_messages"
        )
        orphans = await conn.fetchval(
            "SELECT count(*) FROM event.mail_registrations mr WHERE mr.mail_sent AND NOT EXISTS"
            " (SELECT 1 FROM event.outbox_messages o WHERE o.scheduler_id = mr.scheduler_id"
            "  AND o.registration_id = mr.registration_id)"
        )
        unreceipted = await conn.fetchval(
            "SELECT count(*) FROM event.outbox_messages o WHERE NOT EXISTS (SELECT 1 FROM"
            " event.mail_registrations mr WHERE mr.scheduler_id = o.scheduler_id"
            " AND mr.registration_id = o.registration_id AND mr.mail_sent)"
        )
    assert (row["rows"], row["pairs"], orphans, unreceipted) == (n, n, 0, 0)


# --- event operations ------------------------------------------------------------------

# a reschedule of event_body's event one month later
MOVED = {"date_begin": "2027-06-10T09:00:00+00:00", "date_end": "2027-06-12T18:00:00+00:00"}


# --- waiting on state, never on time ---------------------------------------------------

_LISTENING = """
SELECT count(DISTINCT pid) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %'
"""
_LOCK_WAITERS = """
SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE NOT l.granted AND a.datname = current_database()
"""


async def until_true(check: Callable[[], Any], within: float = 10.0) -> Any:
    """Poll `check` (plain or a coroutine function) until it answers something truthy;
    its answer. Fails after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        assert time.monotonic() < deadline, f"not within {within} s"
        await asyncio.sleep(0.02)


async def until_listening(pool: asyncpg.Pool, n: int = 1, within: float = 30.0) -> None:
    """Until `n` loops LISTEN on this database (their LISTEN connections are open)."""
    await until_true(lambda: _at_least(pool, _LISTENING, n), within)


async def until_lock_waiters(pool: asyncpg.Pool, n: int, within: float = 10.0) -> None:
    """Until `n` lock requests wait (ungranted in `pg_locks`) in this database."""
    await until_true(lambda: _at_least(pool, _LOCK_WAITERS, n), within)


async def _at_least(pool: asyncpg.Pool, sql: str, n: int) -> bool:
    async with pool.acquire() as conn:
        return int(await conn.fetchval(sql)) >= n


async def heard_nothing_more(
    conn: asyncpg.Connection, heard: asyncio.Queue[str], channel: str
) -> bool:
    """Whether nothing but a marker reached `heard` (a queue `conn` LISTENs into on
    `channel`): the marker is NOTIFYed now, and notices arrive in commit order, so a
    notice of anything committed before comes first."""
    marker = f"marker-{uuid.uuid4().hex}"
    await conn.execute("SELECT pg_notify($1, $2)", channel, marker)
    first = await asyncio.wait_for(heard.get(), 5)
    return first == marker


def run_once_cli(
    db_url: str, *args: str, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """`events-svc scheduler run-once` over `db_url`, with more `env` (its stdout: one
    JSON object)."""
    env = {**os.environ, "EVENTS_DATABASE_URL": db_url, **env}
    return subprocess.run(
        [sys.executable, "-m", "events_svc", "scheduler", "run-once", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


def operation_params(kind: str) -> dict[str, Any]:
    """Valid parameters of an operation of `kind` on event_body's event."""
    if kind == "reschedule":
        return dict(MOVED)
    if kind == "cancellation":
        return {"reason": "the venue closed"}
    return {"audience_cutoff": datetime.now(UTC).isoformat()}


async def preview(
    admin: httpx.AsyncClient, event_id: Any, kind: str = "reschedule", **params: Any
) -> dict[str, Any]:
    """Preview an operation of `kind` (its default parameters unless `params`) (201)."""
    body = {"kind": kind, "params": params or operation_params(kind)}
    r = await admin.post(f"/admin/events/{event_id}/operations", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def start(admin: httpx.AsyncClient, operation: dict[str, Any]) -> dict[str, Any]:
    """Start a previewed operation with its revision as If-Match (202); its view."""
    r = await admin.post(
        f"/admin/operations/{operation['id']}/start",
        headers={"If-Match": f'"{operation["revision"]}"'},
    )
    assert r.status_code == 202, r.text
    return dict(r.json())


async def finish(admin: httpx.AsyncClient, operation: dict[str, Any]) -> dict[str, Any]:
    """Resume a started operation until its batches are done (completed); its view."""
    r = await admin.post(f"/admin/operations/{operation['id']}/resume")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "completed", r.text
    return dict(r.json())


async def register(admin: httpx.AsyncClient, event_id: str, name: str = "Ada") -> str:
    """An open registration of the event made through the API (<name>@example.org); its id."""
    body = {"event_id": event_id, "name": name, "email": f"{name.lower()}@example.org"}
    r = await admin.post("/admin/registrations", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def trigger_rows(pool: asyncpg.Pool, operation_id: Any = None) -> list[asyncpg.Record]:
    """The triggers (of one operation when given), in feed order."""
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT * FROM event.triggers WHERE $1::uuid IS NULL OR operation_id = $1"
                " ORDER BY seq",
                uuid.UUID(str(operation_id)) if operation_id else None,
            )
        )


# --- real service processes ------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_serve(
    db_url: str, port: int, *args: str, output: int = subprocess.DEVNULL, **env: str
) -> subprocess.Popen[str]:
    """A real `events-svc serve` process on 127.0.0.1:port, started, not waited for.
    `args` are serve options (`--workers`, `2`), `env` more EVENT(S)_* variables; its
    output (stdout and stderr) goes to `output`."""
    environ = {**os.environ, "EVENTS_DATABASE_URL": db_url, "EVENTS_PORT": str(port), **env}
    return subprocess.Popen(
        [sys.executable, "-m", "events_svc", "serve", *args],
        env=environ,
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_all(procs: list[tuple[str, subprocess.Popen[str]]]) -> None:
    """Stop `serve` processes (base URL, process): a SIGTERM to each still running, then
    wait for each (30 s) and kill the ones that do not stop."""
    for _, proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for _, proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(proc: subprocess.Popen[str], base: str, timeout: float = 60) -> None:
    """Until GET {base}/readyz answers 200; fails when the process exits first or after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"serve exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"serve was not ready in {timeout} s"
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)


def tails(logs: Path) -> dict[str, str]:
    """The end of each process's output in `logs` (for a failure's message)."""
    return {p.name: p.read_text()[-2000:] for p in sorted(logs.glob("*.log"))}


@contextmanager
def serve_processes(
    db_url: str, logs: Path, n: int = 2, **env: str
) -> Iterator[list[tuple[str, subprocess.Popen[str]]]]:
    """`n` real `serve` processes over `db_url` with `env`, each one's output in
    `logs`/serve-{i}.log; (base URL, process) once every one is ready; stopped on exit."""
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    with ExitStack() as files:
        try:
            for i in range(n):
                port = free_port()
                out = files.enter_context((logs / f"serve-{i}.log").open("w"))
                proc = start_serve(db_url, port, output=out.fileno(), **env)
                procs.append((f"http://127.0.0.1:{port}", proc))
            for base, proc in procs:
                try:
                    wait_ready(proc, base, timeout=90)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: {tails(logs)}") from None
            yield procs
        finally:
            stop_all(procs)
