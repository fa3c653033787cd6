"""The delivery pass's shared rules, across loops and against the requests: at most four
attempts in flight to one endpoint however many processes claim, deliveries that yield
while requests keep the process busy, the wakes of a redelivery and of an endpoint
enabled again, PII taken out of kept messages when `include_pii` goes off, and the
sweep (old messages of a disabled endpoint, previous secrets past their overlap)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.loops import WebhookPass
from events_svc.loops.webhooks import BUSY_BATCH, BUSY_TURN_S
from events_svc.observability import Load
from events_svc.settings import Settings
from events_svc.verbs.webhooks import PER_ENDPOINT, WAKE_CHANNEL, attempts
from tests.probes.helpers import heard_nothing_more, make_event
from tests.probes.webhooks.kit import (
    PII,
    Clock,
    endpoint,
    endpoint_row,
    hand_loop,
    lane_of,
    log,
    ping,
    turn,
    turn_until_quiet,
)
from tests.probes.webhooks.receiver import Receiver, receiver


async def pings(admin: httpx.AsyncClient, endpoint_id: str, n: int) -> None:
    for _ in range(n):
        await ping(admin, endpoint_id)


async def test_two_processes_claim_at_most_four_attempts_of_one_endpoint_between_them(
    admin: httpx.AsyncClient, app: Any, clock: Clock
):
    with receiver(default="slow", delay_s=0.3) as slow:
        one, other = hand_loop(app, clock), hand_loop(app, clock)
        try:
            hook = await endpoint(admin, f"{slow.url}/in")
            await pings(admin, hook["id"], 10)
            await turn(one)
            await turn(other)  # the endpoint's four slots are the first loop's
            assert (len(one.flights), len(other.flights)) == (PER_ENDPOINT, 0)
            pool = app.state.events.db()
            assert await attempts.claim(pool, clock(), PER_ENDPOINT, timedelta(minutes=2)) == []
            for _ in range(40):
                flights = one.flights | other.flights
                if not flights and len(slow.got()) == 10:
                    break
                if flights:
                    await asyncio.wait(flights, return_when=asyncio.FIRST_COMPLETED)
                await turn(other)  # the second loop first: it takes freed slots too
                await turn(one)
            assert len(slow.got()) == 10
            assert slow.most_in_flight["/in"] == PER_ENDPOINT
            await turn_until_quiet(one)
            assert {r["state"] for r in await log(admin, hook["id"])} == {"succeeded"}
        finally:
            await one.sender.close()
            await other.sender.close()


async def settle(loop: WebhookPass) -> None:
    if loop.flights:
        await asyncio.wait(set(loop.flights))


class Busy(Load):
    """A load whose share the probe sets."""

    def __init__(self) -> None:
        super().__init__()
        self.given = 1.0

    def share(self) -> float:
        return self.given


async def test_deliveries_yield_while_requests_keep_the_process_busy(
    admin: httpx.AsyncClient, app: Any, clock: Clock, sink: Receiver
):
    busy = Busy()
    hand = hand_loop(app, clock)
    hand.load = busy
    try:
        hooks = [await endpoint(admin, f"{sink.url}/{n}") for n in range(3)]
        for hook in hooks:
            await pings(admin, hook["id"], 5)
        lane = lane_of(app, hand).lanes["webhooks"]
        assert await lane.tick() == (BUSY_TURN_S, 0.0)  # more is due: the next after a pause
        assert hand.yielding
        await settle(hand)
        assert len(sink.got()) == BUSY_BATCH  # four of two endpoints, oldest first
        await turn(hand)
        await settle(hand)
        assert len(sink.got()) == 14  # still busy: the rest up to four per endpoint
        busy.given = 0.2  # the requests left room: no pause, no batch limit
        await lane.tick()
        assert not hand.yielding
        await turn_until_quiet(hand)
        assert len(sink.got()) == 15
    finally:
        await hand.sender.close()


def test_the_load_is_the_busy_share_of_the_last_half_second():
    now = [100.0]
    load = Load(clock=lambda: now[0])
    load.begin()
    now[0] += 0.1
    load.begin()  # two at once count once
    now[0] += 0.2
    load.end()
    load.end()
    now[0] += 0.2
    assert load.share() == pytest.approx(0.6)
    now[0] += 0.1
    assert load.share() == pytest.approx(0.6)  # the window is not over: the last share
    load.begin()
    now[0] += 0.5  # in flight the whole window, not yet ended
    assert load.share() == pytest.approx(1.0 * 0.5 / 0.6)
    now[0] += 0.6
    assert load.share() == pytest.approx(1.0)
    load.end()
    now[0] += 0.5
    assert load.share() == 0.0
    # a quiet spell of 30 s, then a rush begins: its first requests count as busy
    now[0] += 30.0
    load.begin()
    now[0] += 0.01
    assert load.share() == 1.0
    now[0] += 0.2
    assert load.share() == 1.0  # until the next window measures them
    load.end()
    now[0] += 0.3
    assert load.share() == pytest.approx(0.2 / 0.5)  # busy 0.2 s of the window since
    # a quiet spell with nothing in flight at its end: its own (low) share
    now[0] += 30.0
    load.begin()
    load.end()
    assert load.share() == 0.0


async def test_the_requests_are_counted_in_flight_by_the_app(admin: httpx.AsyncClient, app: Any):
    load = app.state.events.metrics.load
    before = load.busy_seconds()
    r = await admin.get("/admin/webhooks")
    assert r.status_code == 200
    assert load.inflight == 0 and load.busy_seconds() > before


async def wakes(conn: asyncpg.Connection) -> asyncio.Queue[str]:
    heard: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(WAKE_CHANNEL, lambda *a: heard.put_nowait(a[3]))
    return heard


async def test_a_redelivery_and_an_endpoint_enabled_again_wake_the_passes(
    admin: httpx.AsyncClient, settings: Settings, loop: WebhookPass, clock: Clock
):
    with receiver(script=["500"]) as sink:
        hook = await endpoint(admin, f"{sink.url}/in")
        await pings(admin, hook["id"], 1)
        await turn_until_quiet(loop)  # answered 500: the retry waits 5 s
        (waiting,) = [d for d in await log(admin, hook["id"]) if d["state"] == "pending"]
        assert waiting["attempt"] == 2
        assert settings.database_url
        conn = await asyncpg.connect(settings.database_url)
        try:
            heard = await wakes(conn)
            r = await admin.post(f"/admin/webhook-deliveries/{waiting['id']}/redeliver")
            assert r.status_code == 202 and r.json()["id"] == waiting["id"]
            await asyncio.wait_for(heard.get(), 5)
            r = await admin.patch(f"/admin/webhooks/{hook['id']}", json={"active": False})
            assert r.status_code == 200
            assert await heard_nothing_more(conn, heard, WAKE_CHANNEL)  # pausing wakes nobody
            r = await admin.patch(f"/admin/webhooks/{hook['id']}", json={"active": True})
            assert r.status_code == 200
            await asyncio.wait_for(heard.get(), 5)
        finally:
            await conn.close()
        await turn_until_quiet(loop)  # the redelivery made it due now: no clock moved
        assert [g.headers["webhook-id"] for g in sink.got()] == [waiting["message_id"]] * 2


async def test_turning_include_pii_off_takes_the_pii_out_of_the_kept_messages(
    admin: httpx.AsyncClient, app: Any, loop: WebhookPass, clock: Clock
):
    with receiver(script=["500"]) as sink:
        hook = await endpoint(admin, f"{sink.url}/in", include_pii=True)
        event = await make_event(admin)
        person = {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+4420794609"}
        r = await admin.post("/admin/registrations", json={"event_id": event["id"], **person})
        assert r.status_code == 201, r.text
        await turn_until_quiet(loop)
        (first,) = sink.got()
        assert set(first.doc["data"]) >= PII and first.doc["data"]["email"] == person["email"]
        r = await admin.patch(f"/admin/webhooks/{hook['id']}", json={"include_pii": False})
        assert r.status_code == 200
        async with app.state.events.db().acquire() as conn:
            kept = await conn.fetchrow(
                "SELECT body, pii_keys FROM event.webhook_messages WHERE endpoint_id = $1",
                hook["id"],
            )
        assert kept["pii_keys"] is None
        data = json.loads(kept["body"])["data"]
        assert not PII & set(data) and data["event_name"] == event["name"]
        clock.move(seconds=6)
        await turn_until_quiet(loop)
        second = sink.got()[1]
        assert second.headers["webhook-id"] == first.headers["webhook-id"]
        assert not PII & set(second.doc["data"])
        assert "ada@example.org" not in second.body.decode()
        assert {k: v for k, v in first.doc["data"].items() if k not in PII} == second.doc["data"]


async def test_the_sweep_forgets_old_messages_of_a_disabled_endpoint_and_old_secrets(
    admin: httpx.AsyncClient, app: Any, loop: WebhookPass, clock: Clock
):
    with receiver(default="500") as sink:
        paused = await endpoint(admin, f"{sink.url}/paused")
        live = await endpoint(admin, f"{sink.url}/live")
        await pings(admin, paused["id"], 1)
        await pings(admin, live["id"], 1)
        await turn_until_quiet(loop)  # both failed once: their retries wait
        r = await admin.patch(f"/admin/webhooks/{paused['id']}", json={"active": False})
        assert r.status_code == 200
        r = await admin.post(f"/admin/webhooks/{live['id']}/rotate-secret")
        assert r.status_code == 200
        with receiver() as fine:
            done = await endpoint(admin, f"{fine.url}/done")
            await pings(admin, done["id"], 1)
            await turn_until_quiet(loop)
        assert [d["state"] for d in await log(admin, done["id"])] == ["succeeded"]
        pool = app.state.events.db()
        later = clock() + timedelta(days=40)
        assert await attempts.sweep(pool, later, later - timedelta(days=30), 100) == 2
        assert not await log(admin, paused["id"])  # its waiting message went too
        assert not await log(admin, done["id"])  # delivered and old
        assert sorted(d["state"] for d in await log(admin, live["id"])) == ["pending", "retrying"]
        row = await endpoint_row(pool, live["id"])
        assert row["previous_secret"] is None and row["previous_secret_until"] is None
        r = await admin.get(f"/admin/webhooks/{live['id']}")
        assert r.json()["rotation_ends_at"] is None


async def test_concurrent_claims_never_lease_more_than_four_attempts_of_one_endpoint(
    admin: httpx.AsyncClient, app: Any, loop: WebhookPass, clock: Clock
):
    hook = await endpoint(admin, "http://127.0.0.1:9/in")
    await pings(admin, hook["id"], 30)
    pool = app.state.events.db()
    await attempts.fan_out(pool, clock(), 500)
    lease = timedelta(minutes=2)
    for _ in range(5):  # each round after the last one's leases ran out
        claims = [attempts.claim(pool, clock(), PER_ENDPOINT, lease) for _ in range(4)]
        taken = [job for jobs in await asyncio.gather(*claims) for job in jobs]
        assert len(taken) == PER_ENDPOINT  # four connections at once, four leases in all
        async with pool.acquire() as conn:
            held = await conn.fetchval(
                "SELECT count(*) FROM event.webhook_deliveries"
                " WHERE endpoint_id = $1 AND lease_until > $2",
                hook["id"],
                clock(),
            )
        assert held == PER_ENDPOINT
        clock.move(seconds=lease.total_seconds() + 1)


async def test_a_message_made_with_pii_goes_without_it_once_the_endpoint_stops_receiving_it(
    admin: httpx.AsyncClient, app: Any, loop: WebhookPass, clock: Clock
):
    hook = await endpoint(admin, "http://127.0.0.1:9/in", include_pii=True)
    event = await make_event(admin)
    person = {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+4420794609"}
    r = await admin.post("/admin/registrations", json={"event_id": event["id"], **person})
    assert r.status_code == 201, r.text
    pool = app.state.events.db()
    await attempts.fan_out(pool, clock(), 500)
    async with pool.acquire() as conn:
        # what a fan-out that overlapped the patch turning include_pii off leaves behind
        await conn.execute(
            "UPDATE event.webhook_endpoints SET include_pii = false WHERE id = $1", hook["id"]
        )
    (job,) = await attempts.claim(pool, clock(), PER_ENDPOINT, timedelta(minutes=2))
    sent = json.loads(job.body)["data"]
    assert not PII & set(sent) and sent["event_name"] == event["name"]
    assert b"ada@example.org" not in job.body
    kept = "SELECT body, pii_keys FROM event.webhook_messages WHERE endpoint_id = $1"
    async with pool.acquire() as conn:
        assert (await conn.fetchrow(kept, hook["id"]))["pii_keys"] is not None
    await attempts.sweep(pool, clock(), clock() - timedelta(days=30), 100)
    async with pool.acquire() as conn:
        row = await conn.fetchrow(kept, hook["id"])
    assert row["pii_keys"] is None and "ada@example.org" not in row["body"]
    assert json.loads(row["body"])["data"] == sent


async def test_deleting_an_endpoint_waits_for_a_recording_pass_and_never_deadlocks_it(
    admin: httpx.AsyncClient, settings: Settings, loop: WebhookPass, clock: Clock
):
    with receiver(default="500") as sink:
        hook = await endpoint(admin, f"{sink.url}/in")
        await pings(admin, hook["id"], 1)
        await turn_until_quiet(loop)  # one attempt recorded, its retry waiting
    (waiting,) = [d for d in await log(admin, hook["id"]) if d["state"] == "pending"]
    assert settings.database_url
    record = await asyncpg.connect(settings.database_url)
    try:
        await record.execute("SET lock_timeout = '5s'")
        async with record.transaction():  # what a recording pass holds, in its order:
            await record.execute(  # the attempt it records first ...
                "UPDATE event.webhook_deliveries SET attempted_at = now() WHERE id = $1",
                uuid.UUID(waiting["id"]),
            )
            deleting = asyncio.create_task(admin.delete(f"/admin/webhooks/{hook['id']}"))
            for _ in range(500):  # until the delete waits on the attempt's lock
                waits = await record.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"
                )
                if waits:
                    break
                await asyncio.sleep(0.02)
            assert waits == 1 and not deleting.done()
            # ... then the endpoint (the retry's reference): free, the delete holds nothing
            await record.execute(
                "SELECT 1 FROM event.webhook_endpoints WHERE id = $1 FOR KEY SHARE",
                uuid.UUID(hook["id"]),
            )
        assert (await deleting).status_code == 204
    finally:
        await record.close()
    assert (await admin.get(f"/admin/webhooks/{hook['id']}")).status_code == 404
