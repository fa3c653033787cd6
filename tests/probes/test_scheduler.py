"""The scheduler under real concurrency: the lifespan loop, racing passes, a killed
process, the done sweep, the routes and the CLI."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from events_svc import create_app
from events_svc.adapters.standalone import OutboxQueue, StoreRenderer
from events_svc.backoff import PASS_BLOCKED
from events_svc.db import create_pool
from events_svc.loops import PASSES, Loop, Services, compose_passes
from events_svc.observability import Metrics
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.verbs.events import sweep_done_events
from tests.probes.helpers import (
    BASE,
    BEGIN,
    Api,
    add_slot,
    composition,
    event_body,
    exactly_once,
    free_port,
    hand_loop,
    outbox,
    ports,
    run,
    run_once_cli,
    scheduler,
    seed,
    start_serve,
    template,
)


async def due_now(api: Api, admin: httpx.AsyncClient, attendees: int) -> str:
    """An ongoing event with `attendees` eligible attendees and a mail due right now."""
    body = event_body(
        seats_max=0, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    event_id = str((await admin.post("/admin/events", json=body)).json()["id"])
    await seed(api, event_id, attendees)
    await scheduler(
        admin,
        event_id,
        await template(admin),
        interval_kind="after_event_start",
        interval_unit="now",
        interval_nbr=0,
    )
    return event_id


async def test_the_lifespan_loop_wakes_on_notify(settings: Settings, api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    tpl = await template(admin)
    await scheduler(
        admin, ev["id"], tpl, interval_kind="after_sub", interval_unit="now", interval_nbr=0
    )
    looping = dataclasses.replace(settings, scheduler_enabled=True, scheduler_floor_s=3600)
    app = create_app(looping)
    async with app.router.lifespan_context(app):
        loop = app.state.events.loop
        await asyncio.wait_for(_until(lambda: loop.lanes["mail"].runs >= 1), 10)
        transport = httpx.ASGITransport(app=app)
        headers = await api.token("*")
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            r = await c.post(
                "/admin/registrations",
                json={"event_id": ev["id"], "name": "Ann", "email": "ann@example.org"},
            )
            assert r.status_code == 201
        # the floor is an hour away: only the NOTIFY of the arm can wake the loop now
        await asyncio.wait_for(_until_outbox(api, 1), 10)
    assert loop.failures == 0


async def test_a_lost_listen_connection_is_opened_again_and_wakes_the_loop(
    settings: Settings, api: Api, admin
):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    tpl = await template(admin)
    await scheduler(
        admin, ev["id"], tpl, interval_kind="after_sub", interval_unit="now", interval_nbr=0
    )
    looping = dataclasses.replace(settings, scheduler_enabled=True, scheduler_floor_s=3600)
    app = create_app(looping)
    async with app.router.lifespan_context(app):
        loop = app.state.events.loop
        await asyncio.wait_for(_until(lambda: loop.lanes["mail"].runs >= 1), 10)
        await asyncio.wait_for(loop.listener.listening.wait(), 10)
        async with api.pool.acquire() as conn:  # its server ends the session (a failover)
            ended = await conn.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN %'"
            )
        assert ended == 1
        await asyncio.wait_for(_until(lambda: loop.lost == 1), 10)  # noticed when it closed
        await asyncio.wait_for(_until(lambda: loop.lost == 0), 10)  # and listening again
        transport = httpx.ASGITransport(app=app)
        headers = await api.token("*")
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            r = await c.post(
                "/admin/registrations",
                json={"event_id": ev["id"], "name": "Ann", "email": "ann@example.org"},
            )
            assert r.status_code == 201
        # the floor is an hour away: only a NOTIFY on the new connection wakes the loop
        await asyncio.wait_for(_until_outbox(api, 1), 10)


async def _until(check) -> None:  # type: ignore[no-untyped-def]
    while not check():
        await asyncio.sleep(0.05)


async def _until_outbox(api: Api, n: int) -> None:
    while len(await outbox(api)) < n:
        await asyncio.sleep(0.05)


async def test_stopping_the_loop_finishes_the_batch_in_hand(settings: Settings, api: Api, admin):
    await due_now(api, admin, 3000)
    looping = dataclasses.replace(
        settings, scheduler_enabled=True, mail_batch=10, mail_cron_limit=100_000
    )
    app = create_app(looping)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(_until_outbox(api, 50), 20)
    stopped_at = len(await outbox(api))  # the lifespan returned: the loop has stopped
    assert 50 <= stopped_at < 3000 and stopped_at % 10 == 0  # whole batches only
    await exactly_once(api, stopped_at)
    assert len(await outbox(api)) == stopped_at  # nothing more after the stop


async def test_two_loops_racing_queue_each_mail_exactly_once(settings: Settings, api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body(seats_max=0))).json()
    await seed(api, ev["id"], 300)
    await scheduler(admin, ev["id"], await template(admin))
    assert settings.database_url
    other = await create_pool(settings.database_url, settings)
    try:
        results = await asyncio.gather(
            run(api, BEGIN, batch=10),
            run(Api(api.app, other), BEGIN, batch=10, p=ports(other)),
        )
    finally:
        await other.close()
    assert sum(r.sent for r in results) == 300
    await exactly_once(api, 300)


async def test_a_killed_pass_leaves_no_half_batch_and_the_next_finishes(db_url, api: Api, admin):
    await due_now(api, admin, 4000)
    env = {
        **os.environ,
        "EVENTS_DATABASE_URL": db_url,
        "EVENT_MAIL_BATCH": "20",
        "EVENT_MAIL_CRON_LIMIT": "100000",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "events_svc", "scheduler", "run-once"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(await outbox(api)) < 100:
        await asyncio.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    done_before = len(await outbox(api))
    assert 0 < done_before < 4000  # killed in the middle of the pass
    await exactly_once(api, done_before)  # no receipt without its mail, nor the reverse
    summary = await run(api, datetime.now(UTC), cap=100_000)
    assert summary.sent == 4000 - done_before
    await exactly_once(api, 4000)


async def test_the_done_sweep_marks_ended_events(api: Api, admin):
    past = (
        await admin.post(
            "/admin/events",
            json=event_body(date_begin="2020-01-01T00:00:00Z", date_end="2020-01-02T00:00:00Z"),
        )
    ).json()
    future = (await admin.post("/admin/events", json=event_body())).json()
    now = datetime.now(UTC)
    assert await sweep_done_events(api.pool, now) == 0  # no pipe_end stage: nothing to do
    end = (await admin.post("/admin/stages", json={"name": "Ended", "pipe_end": True})).json()
    assert await sweep_done_events(api.pool, now, batch=1) == 1
    assert (await admin.get(f"/admin/events/{past['id']}")).json()["stage_id"] == end["id"]
    assert (await admin.get(f"/admin/events/{future['id']}")).json()["stage_id"] != end["id"]
    assert await sweep_done_events(api.pool, now + timedelta(days=1)) == 0
    async with api.pool.acquire() as conn:
        actor = await conn.fetchval(
            "SELECT actor_id FROM event.event_audit_log WHERE verb = 'event_marked_done'"
        )
    assert actor == "system"


async def test_routes_templates_runs_and_outbox(api: Api, admin: httpx.AsyncClient):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    tpl = await template(admin)
    r = await admin.post(
        "/admin/registrations", json={"event_id": ev["id"], "name": "Bo", "email": "bo@example.org"}
    )
    assert r.status_code == 201
    m = await scheduler(admin, ev["id"], tpl, interval_nbr=2)
    r = await admin.patch(f"/admin/mails/{m['id']}", json={"interval_nbr": 3})
    assert r.json()["scheduled_date"].startswith("2027-05-07T09:00")
    listed = (await admin.get("/admin/mails", params={"event_id": ev["id"]})).json()["items"]
    assert [x["id"] for x in listed] == [m["id"]] and listed[0]["count_pending"] == 1
    assert (await admin.post("/admin/schedulers/run")).json()["sent"] == 0  # not due
    ran = (await admin.post(f"/admin/mails/{m['id']}/run")).json()  # now, even before due
    assert ran["summary"]["sent"] == 1 and ran["mail"]["mail_state"] == "sent"
    box = (await admin.get("/admin/outbox", params={"event_id": ev["id"]})).json()["items"]
    assert [b["recipient"] for b in box] == ["b***@example.org"]
    reader = await api.token("event:read")
    r = await api.client.get(
        "/admin/outbox", params={"event_id": ev["id"], "pii": "full"}, headers=reader
    )
    assert r.status_code == 403
    full = await admin.get("/admin/outbox", params={"event_id": ev["id"], "pii": "full"})
    assert full.json()["items"][0]["recipient"] == "bo@example.org"
    r = await api.client.post("/admin/templates", json={"name": "x", "body": "y"}, headers=reader)
    assert r.status_code == 403 and r.json()["error"]["scope"] == "template:write"
    assert (await admin.get(f"/admin/templates/{tpl}")).json()["body"].startswith("Hello")
    assert len((await admin.get("/admin/templates")).json()["items"]) == 1
    gone = (await admin.delete(f"/admin/templates/{tpl}")).json()
    assert gone == {
        "mails_deleted": 1,
        "type_lines_deleted": 0,
        "trigger_purposes_unmapped": [],
        "waitlist_offer_templates_unset": 0,
    }
    assert (await admin.get(f"/admin/mails/{m['id']}")).status_code == 404
    r = await admin.post(
        "/admin/mails",
        json={"event_id": ev["id"], "template_ref": tpl, "interval_unit": "fortnights"},
    )
    assert r.status_code == 422


async def test_scheduler_run_once_cli(db_url: str, api: Api, admin: httpx.AsyncClient):
    await due_now(api, admin, 3)
    result = json.loads(run_once_cli(db_url, "--sweep").stdout)  # the logs went to stderr
    assert set(result) == {"passes", "more"} and result["more"] is False
    passes = {p["name"]: p for p in result["passes"]}
    assert list(passes) == list(PASSES)
    assert passes["mail"]["status"] == "ran" and passes["mail"]["counts"]["sent"] == 3
    assert passes["sweep"]["counts"] == {"events_marked_done": 0}  # --sweep: it ran
    assert passes["leads"]["counts"]["requests"] == 0  # no lead rule: no lead request
    assert passes["dispatch"]["detail"] == "disabled"  # EVENT_TRIGGER_DISPATCH is off
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.outbox_messages") == 3


async def test_sigterm_during_a_long_pass_exits_in_time_with_whole_batches(db_url, api, admin):
    await due_now(api, admin, 3000)
    proc = start_serve(db_url, free_port(), EVENT_MAIL_BATCH="10", EVENT_MAIL_CRON_LIMIT="100000")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(await outbox(api)) < 50:
            await asyncio.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        await asyncio.to_thread(proc.wait, 30)
        assert time.monotonic() - started < 30  # within the grace period
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    queued = len(await outbox(api))
    assert 50 <= queued < 3000 and queued % 10 == 0  # the batch in hand committed, whole
    await exactly_once(api, queued)


class FlakyRenderer:
    """A host renderer that crashes once (an unexpected error, not a typed refusal)."""

    def __init__(self) -> None:
        self.calls = 0
        self.inner = StoreRenderer()

    async def render(self, conn, request):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("renderer crashed")
        return await self.inner.render(conn, request)

    async def template_kind(self, conn, ref):  # type: ignore[no-untyped-def]
        return await self.inner.template_kind(conn, ref)


async def test_a_crashing_renderer_fails_its_line_and_the_loop_retries_after_the_back_off(
    settings, api, admin
):
    await due_now(api, admin, 3)
    metrics = Metrics()
    flaky = Ports(template_renderer=FlakyRenderer(), mail_queue=OutboxQueue())
    quick = dataclasses.replace(settings, scheduler_floor_s=1)
    offset = timedelta(0)
    passes = composition(api.pool, quick, flaky, lambda: datetime.now(UTC) + offset)
    loop = Loop(passes.lanes, lambda: api.pool, quick, passes.services.clock, metrics)
    passes.services.metrics = metrics
    loop.start()
    try:
        while not loop.lanes["mail"].runs:
            await asyncio.sleep(0.01)
        assert await outbox(api) == [] and loop.failures == 0  # the line failed, not the pass
        offset = timedelta(minutes=1, seconds=1)  # the back-off is over
        await asyncio.wait_for(_until_outbox(api, 3), 20)
    finally:
        await loop.stop()
    assert metrics.failures.labels("render_failed")._value.get() == 1
    await exactly_once(api, 3)


async def test_a_crashing_pass_is_counted_and_retried_and_the_loop_survives(
    settings, api, admin, caplog
):
    caplog.set_level(logging.INFO, logger="events_svc.loops")
    await due_now(api, admin, 3)
    metrics = Metrics()
    calls = 0

    def flaky_pool() -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("no pool yet")
        return api.pool

    quick = dataclasses.replace(settings, scheduler_floor_s=1)
    services = Services(flaky_pool, ports(api.pool), quick, lambda: datetime.now(UTC))
    loop = Loop(compose_passes(services).lanes, flaky_pool, quick, services.clock, metrics)
    loop.start()
    try:
        await asyncio.wait_for(_until_outbox(api, 3), 20)
        lanes = loop.lanes.values()
        await asyncio.wait_for(_until(lambda: all(lane.runs for lane in lanes)), 20)
    finally:
        await loop.stop()
    assert loop.failures == 1 and not any(lane.failing for lane in loop.lanes.values())
    assert metrics.pass_errors._value.get() == 1
    await exactly_once(api, 3)
    said = [r.getMessage() for r in caplog.records if "pass" in r.getMessage()]
    assert said == ["pass failed", "pass recovered"]


async def test_slot_children_without_attendees_are_progress_not_a_blocked_pass(
    settings, api, admin
):
    ev = (
        await admin.post("/admin/events", json=event_body(seats_max=0, is_multi_slots=True))
    ).json()
    slots = [await add_slot(admin, ev["id"], hour) for hour in (10, 12, 14, 16)]
    guest = {"event_id": ev["id"], "event_slot_id": slots[-1]["id"], "email": "g@example.org"}
    assert (await admin.post("/admin/registrations", json=guest)).status_code == 201
    now = {"interval_kind": "after_event_start", "interval_unit": "now", "interval_nbr": 0}
    await scheduler(admin, ev["id"], await template(admin), **now)
    late = datetime(2027, 5, 10, 20, tzinfo=UTC)  # every slot has begun
    mail = hand_loop(api.pool, settings, clock=lambda: late).lanes["mail"]
    assert (await mail.tick())[1] > 0  # one pass walked the three empty slots and the full one
    assert len(await outbox(api)) == 1 and mail.blocked == 0


async def _ongoing_line(admin: httpx.AsyncClient, body: str, *emails: str) -> str:
    """An ongoing event with one attendee per email ('' for none) and a mail due now."""
    ongoing = event_body(
        seats_max=0, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    event_id = str((await admin.post("/admin/events", json=ongoing)).json()["id"])
    for i, email in enumerate(emails):
        guest = {"event_id": event_id, "name": f"G{i}", **({"email": email} if email else {})}
        assert (await admin.post("/admin/registrations", json=guest)).status_code == 201
    now = {"interval_kind": "after_event_start", "interval_unit": "now", "interval_nbr": 0}
    await scheduler(admin, event_id, await template(admin, body=body), **now)
    return event_id


async def test_lines_that_fail_forever_never_make_the_loop_spin(settings, api, admin, caplog):
    """A template that fails at render time, a template gone from the store, and an
    attendee without an address, over a simulated hour: every sleep is positive, and
    passes and log lines are few (failures back off, and are logged when they start)."""
    await _ongoing_line(admin, "{{ registration.name + 1 }}", "a@example.org")
    lost = await _ongoing_line(admin, "Hello", "b@example.org")
    async with api.pool.acquire() as conn:  # its template is gone from the store
        await conn.execute(
            "UPDATE event.mails SET template_ref = gen_random_uuid() WHERE event_id = $1",
            uuid.UUID(lost),
        )
    await _ongoing_line(admin, "Hello", "c@example.org", "")
    start = datetime.now(UTC)
    now = start
    sweep = (start - timedelta(hours=2)).strftime("%H:%M")  # not due in the simulated hour
    looping = dataclasses.replace(settings, scheduler_floor_s=1200, done_sweep_at=sweep)
    mail = hand_loop(api.pool, looping, clock=lambda: now).lanes["mail"]
    caplog.set_level(logging.DEBUG, logger="events_svc")
    sleeps = []
    while now < start + timedelta(hours=1):
        _, delay = await mail.tick()
        assert delay > 0
        sleeps.append(delay)
        now += timedelta(seconds=delay)
    assert mail.runs <= 8 and mail.failures == 0, sleeps
    logged = [
        r for r in caplog.records if r.levelno >= logging.INFO and r.name.startswith("events_svc")
    ]
    assert len(logged) <= 4, [r.getMessage() for r in logged]
    failing_lines = [r for r in logged if r.getMessage() == "scheduler line failing"]
    assert sorted(r.fields["kind"] for r in failing_lines) == [  # type: ignore[attr-defined]
        "render_failed",
        "template_unresolved",
    ]
    assert [o["recipient"] for o in await outbox(api)] == ["c@example.org"]


async def test_due_work_held_by_another_instance_makes_the_loop_wait_longer(settings, api, admin):
    event_id = await due_now(api, admin, 1)
    mail = hand_loop(api.pool, settings).lanes["mail"]
    async with api.pool.acquire() as other, other.transaction():
        await other.execute(  # another instance is working this row
            "SELECT 1 FROM event.mails WHERE event_id = $1 FOR UPDATE", uuid.UUID(event_id)
        )
        waits = [(await mail.tick())[1] for _ in range(4)]
        assert waits == [PASS_BLOCKED.seconds(n) for n in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, 2.0]
    assert (await mail.tick())[1] > 0  # released: the work went, nothing more is due
    assert len(await outbox(api)) == 1 and mail.blocked == 0
