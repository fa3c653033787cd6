"""What a request can cost and how failures answer: body limits, a lowered seat cap, lock
conflicts as 503 busy, and an unexpected error logged once without bound values."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import Request

from events_svc import create_app, errors
from events_svc.actors import Actor
from events_svc.db import transaction
from events_svc.observability import JsonFormatter
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, add_slot, add_ticket, event_body

MIB = 1024 * 1024


async def test_a_body_over_the_limit_is_refused_before_it_is_read(api: Api, admin):
    big = b'{"name": "' + b"x" * (MIB + 10) + b'"}'
    r = await admin.post("/admin/events", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    detail = f"The request body is larger than {MIB} bytes."
    assert r.json()["error"] == {"code": "payload_too_large", "limit_bytes": MIB, "detail": detail}
    assert r.headers["cache-control"] == "no-store" and r.headers["x-request-id"]


async def test_a_streamed_body_is_cut_off_at_the_limit(api: Api):
    """No Content-Length (chunked): the service stops reading once the limit is passed."""
    sent = 0

    async def stream() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"attendees": [{"name": "'
        for _ in range(3200):  # 200 MiB if it were all read
            sent += 1
            yield b"x" * 65536

    r = await api.client.post(
        "/intake/00000000-0000-0000-0000-000000000000",
        content=stream(),
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert sent <= MIB // 65536 + 2  # what was read: the limit, not the 200 MiB


async def test_the_limit_is_a_setting_and_small_bodies_pass(settings: Settings, pool):
    tight = dataclasses.replace(settings, max_body_bytes=2048)
    app = create_app(tight)
    async with app.router.lifespan_context(app):
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)
        body = json.dumps(event_body(description="d" * 1500)).encode()
        r = await c.post("/admin/events", content=body)
        assert r.status_code == 401  # read, parsed as far as auth: under the limit
        r = await c.post("/admin/events", content=body + b" " * 1000)
        assert r.status_code == 413 and r.json()["error"]["limit_bytes"] == 2048
        await c.aclose()
    with pytest.raises(Exception, match="EVENTS_MAX_BODY_BYTES"):
        Settings.from_env({"EVENTS_MAX_BODY_BYTES": "12"})


async def test_lowering_seats_below_the_taken_seats_is_refused(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body(seats_max=10))).json()
    ticket = await add_ticket(admin, ev["id"], seats_max=5)
    for _ in range(3):
        body = {"event_id": ev["id"], "event_ticket_id": ticket["id"]}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"seats_max": 2})
    assert r.status_code == 409
    assert r.json()["error"] | {"detail": ""} == {
        "code": "seats_below_taken",
        "detail": "",
        "field": "seats_max",
        "seats_max": 2,
        "taken": 3,
    }
    r = await admin.patch(f"/admin/tickets/{ticket['id']}", json={"seats_max": 1})
    assert r.status_code == 409 and r.json()["error"]["taken"] == 3
    # exactly the taken seats, unlimited again, and raising stay allowed
    assert (
        await admin.patch(f"/admin/events/{ev['id']}", json={"seats_max": 3})
    ).status_code == 200
    assert (await admin.patch(f"/admin/tickets/{ticket['id']}", json={"seats_max": 0})).is_success
    off = await admin.patch(f"/admin/events/{ev['id']}", json={"seats_limited": False})
    assert off.status_code == 200
    # turning the limit back on below what is taken is the same refusal
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"seats_limited": True, "seats_max": 1})
    assert r.status_code == 409 and r.json()["error"]["code"] == "seats_below_taken"


async def test_a_multi_slot_cap_is_checked_against_the_fullest_slot(api: Api, admin):
    ev = (
        await admin.post("/admin/events", json=event_body(seats_max=4, is_multi_slots=True))
    ).json()
    full, quiet = await add_slot(admin, ev["id"], 10), await add_slot(admin, ev["id"], 12)
    for slot, n in ((full, 3), (quiet, 1)):
        for _ in range(n):
            body = {"event_id": ev["id"], "event_slot_id": slot["id"]}
            assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"seats_max": 2})
    assert r.status_code == 409 and r.json()["error"]["taken"] == 3
    assert (
        await admin.patch(f"/admin/events/{ev['id']}", json={"seats_max": 3})
    ).status_code == 200


async def test_a_deadlock_answers_busy_not_a_crash(api: Api, pool):
    """Two transactions taking two rows in opposite orders: PostgreSQL breaks the cycle,
    and the one transaction helper turns its victim into 503 busy with Retry-After."""
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE public.pair (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO public.pair VALUES (1), (2)")
    both = asyncio.Barrier(2)

    async def take(first: int, second: int) -> str:
        try:
            async with transaction(pool) as conn:
                await conn.execute("SELECT 1 FROM public.pair WHERE id = $1 FOR UPDATE", first)
                await both.wait()
                await conn.execute("SELECT 1 FROM public.pair WHERE id = $1 FOR UPDATE", second)
        except errors.Busy as busy:
            assert busy.response_headers()["Retry-After"] == "1"
            return "busy"
        return "done"

    assert sorted(await asyncio.gather(take(1, 2), take(2, 1))) == ["busy", "done"]


async def test_a_serialization_failure_answers_busy_not_a_crash(api: Api, pool):
    """Write skew under SERIALIZABLE: PostgreSQL refuses one of the two commits, and the
    transaction helper turns it into 503 busy like a deadlock."""
    async with pool.acquire() as conn:
        await conn.execute("CREATE TABLE public.account (id int PRIMARY KEY, n int NOT NULL)")
        await conn.execute("INSERT INTO public.account VALUES (1, 0), (2, 0)")
    both = asyncio.Barrier(2)

    async def skew(mine: int) -> str:
        try:
            async with transaction(pool) as conn:
                await conn.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                total = await conn.fetchval("SELECT sum(n) FROM public.account")
                await both.wait()
                await conn.execute(
                    "UPDATE public.account SET n = $2 WHERE id = $1", mine, total + 1
                )
        except errors.Busy:
            return "busy"
        return "done"

    assert sorted(await asyncio.gather(skew(1), skew(2))) == ["busy", "done"]


async def test_an_unexpected_error_is_one_500_logged_once_without_bound_values(
    settings: Settings, pool: asyncpg.Pool, caplog: pytest.LogCaptureFixture
):
    secret = "ada.lovelace@example.org"

    async def failing_actor(request: Request) -> Actor:
        # a bug reaching the database with a value that must never be logged
        await pool.fetchval("SELECT $1::text::int", secret)
        raise AssertionError("unreachable")

    app = create_app(settings, actor_dependency=failing_actor)
    caplog.set_level(logging.DEBUG)
    async with app.router.lifespan_context(app):
        c = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE)
        r = await c.get("/admin/events", headers={"X-Request-ID": "req-500-probe"})
        await c.aclose()
    assert r.status_code == 500
    assert r.json() == {
        "error": {
            "code": "internal_error",
            "request_id": "req-500-probe",
            "detail": "An internal error occurred.",
        }
    }
    assert r.headers["cache-control"] == "no-store"
    formatter = JsonFormatter()
    errors_logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors_logged) == 1
    line: dict[str, Any] = json.loads(formatter.format(errors_logged[0]))
    assert line["request_id"] == "req-500-probe" and line["route"] == "/admin/events"
    assert line["error_type"] == "InvalidTextRepresentationError" and line["sqlstate"] == "22P02"
    everything = caplog.text + "".join(formatter.format(rec) for rec in caplog.records)
    assert secret not in everything and "ada.lovelace" not in everything
