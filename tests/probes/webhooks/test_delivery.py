"""The webhook delivery loop against a real HTTP receiver on loopback: Standard Webhooks
signatures (checked with the `standardwebhooks` package), the retry schedule with one
`webhook-id`, 410, timeouts, redirects, the five-day disable, redelivery, the guard at
delivery time, per-endpoint concurrency, the log and the metrics."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from events_svc.adapters.http import POOL_IDLE_S
from events_svc.adapters.webhook_sender import WebhookSender
from events_svc.backoff import WEBHOOKS
from events_svc.egress import EgressGuard
from events_svc.loops import WebhookPass
from tests.probes.helpers import api_status, until_true
from tests.probes.webhooks.kit import (
    Clock,
    endpoint,
    endpoint_row,
    hand_loop,
    lane_of,
    log,
    notify,
    ping,
    turn,
    turn_until_quiet,
    utc_now,
)
from tests.probes.webhooks.receiver import Receiver, receiver


async def test_a_ping_arrives_signed_and_verifies_also_during_a_rotation(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock
):
    hook = await endpoint(admin, f"{sink.url}/in")
    queued = await ping(admin, hook["id"])
    assert queued["state"] == "pending" and queued["event_type"] == "ping"
    await turn_until_quiet(loop)
    (got,) = sink.got("/in")
    assert got.headers["webhook-id"] == queued["message_id"]
    assert got.headers["content-type"] == "application/json"
    assert Webhook(hook["secret"]).verify(got.body, got.headers) == {
        "type": "ping",
        "timestamp": got.doc["timestamp"],
        "data": {"endpoint_id": hook["id"]},
    }
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 44).verify(got.body, got.headers)
    fresh = (await admin.post(f"/admin/webhooks/{hook['id']}/rotate-secret")).json()["secret"]
    await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    second = sink.got("/in")[1]
    assert len(second.headers["webhook-signature"].split(" ")) == 2
    for secret in (hook["secret"], fresh):  # either secret verifies during the overlap
        assert Webhook(secret).verify(second.body, second.headers)["type"] == "ping"
    clock.move(hours=24, seconds=1)
    await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    third = sink.got("/in")[2]
    assert len(third.headers["webhook-signature"].split(" ")) == 1
    with pytest.raises(WebhookVerificationError):
        Webhook(hook["secret"]).verify(third.body, third.headers)
    (attempt,) = [d for d in await log(admin, hook["id"]) if d["id"] == queued["id"]]
    assert attempt["state"] == "succeeded" and attempt["response_status"] == 200
    assert attempt["duration_ms"] is not None and attempt["attempt"] == 1


async def test_500_then_200_is_retried_after_5_s_with_the_same_webhook_id(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock
):
    sink.script = ["500"]
    hook = await endpoint(admin, f"{sink.url}/in")
    queued = await ping(admin, hook["id"])
    clock.move(milliseconds=1)  # the answer comes after the ping: the log's order
    await turn_until_quiet(loop)
    rows = await log(admin, hook["id"])
    assert [(r["attempt"], r["state"]) for r in rows] == [(2, "pending"), (1, "retrying")]
    assert rows[1]["response_status"] == 500
    assert rows[1]["next_attempt_at"] == rows[0]["next_attempt_at"]
    clock.move(seconds=4)
    await turn_until_quiet(loop)
    assert len(sink.got()) == 1  # not due before its 5 s
    clock.move(seconds=1.5)
    await turn_until_quiet(loop)
    ids = [r.headers["webhook-id"] for r in sink.got()]
    assert ids == [queued["message_id"]] * 2
    rows = await log(admin, hook["id"])
    assert [(r["attempt"], r["state"], r["response_status"]) for r in rows] == [
        (2, "succeeded", 200),
        (1, "retrying", 500),
    ]
    assert {r["message_id"] for r in rows} == {queued["message_id"]}
    assert (await endpoint_row(loop.pool(), hook["id"]))["failing_since"] is None


async def test_the_schedule_is_spent_after_eight_attempts_then_failed(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock
):
    sink.default = "503"
    hook = await endpoint(admin, f"{sink.url}/in")
    await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    # the contract's schedule, written out: a retry comes this long after each failure
    minutes = [5 / 60, 5, 30, 120, 300, 600, 600]
    assert [wait / 60 for wait in WEBHOOKS.schedule] == minutes
    assert WEBHOOKS.gives_up(8) and not WEBHOOKS.gives_up(7)
    for wait in minutes:
        clock.now += timedelta(minutes=wait)
        await turn_until_quiet(loop)
    rows = await log(admin, hook["id"])
    assert [r["state"] for r in rows] == ["failed"] + ["retrying"] * 7
    assert len(sink.got()) == 8
    assert {g.headers["webhook-id"] for g in sink.got()} == {rows[0]["message_id"]}
    row = await endpoint_row(loop.pool(), hook["id"])
    assert row["active"] and row["failing_since"] is not None  # 27.6 h: not yet 5 days


async def test_410_disables_the_endpoint_at_once_and_enabling_clears_it(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass
):
    sink.script = ["410"]
    hook = await endpoint(admin, f"{sink.url}/in")
    queued = await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    seen = (await admin.get(f"/admin/webhooks/{hook['id']}")).json()
    assert (seen["active"], seen["disabled_reason"]) == (False, "gone")
    assert [r["state"] for r in await log(admin, hook["id"])] == ["failed"]
    later = await ping(admin, hook["id"])  # waits while the endpoint is disabled
    await turn_until_quiet(loop)
    assert len(sink.got()) == 1
    redeliver = f"/admin/webhook-deliveries/{queued['id']}/redeliver"
    assert await api_status(admin, "POST", redeliver) == (409, "webhook_endpoint_disabled")
    enabled = (await admin.patch(f"/admin/webhooks/{hook['id']}", json={"active": True})).json()
    assert (enabled["active"], enabled["disabled_reason"], enabled["failing_since"]) == (
        True,
        None,
        None,
    )
    r = await admin.post(redeliver)
    assert r.status_code == 202 and r.json()["message_id"] == queued["message_id"]
    await turn_until_quiet(loop)
    ids = sorted(g.headers["webhook-id"] for g in sink.got()[1:])
    assert ids == sorted([queued["message_id"], later["message_id"]])


async def test_five_days_of_failures_disable_the_endpoint(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, clock: Clock, pool: asyncpg.Pool
):
    sink.default = "500"
    hook = await endpoint(admin, f"{sink.url}/in")
    async with pool.acquire() as conn:
        await conn.execute(
            "UPDATE event.webhook_endpoints SET failing_since = $2 WHERE id = $1",
            hook["id"],
            clock.now - timedelta(days=5),
        )
    await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    seen = (await admin.get(f"/admin/webhooks/{hook['id']}")).json()
    assert (seen["active"], seen["disabled_reason"]) == (False, "failing")


async def test_a_receiver_that_hangs_times_out_and_a_redirect_is_not_followed(
    admin: httpx.AsyncClient, app: Any, clock: Clock
):
    # the hang outlasts the probe's timeout: only the sender's timeout can end the attempt
    # with `timeout` (the receiver hanging up at the end would be `connection`)
    with receiver(script=["hang", "302"], hang_s=60) as slow:
        hand = hand_loop(app, clock, timeout_s=0.4)
        try:
            hook = await endpoint(admin, f"{slow.url}/in")
            await ping(admin, hook["id"])
            await turn_until_quiet(hand)
            (first,) = [r for r in await log(admin, hook["id"]) if r["attempt"] == 1]
            assert (first["state"], first["error"], first["response_status"]) == (
                "retrying",
                "timeout",
                None,
            )
            clock.move(seconds=6)
            await turn_until_quiet(hand)
            second = next(r for r in await log(admin, hook["id"]) if r["attempt"] == 2)
            assert (second["state"], second["response_status"]) == ("retrying", 302)
            assert slow.got("/elsewhere") == []
        finally:
            await hand.sender.close()


async def test_the_guard_is_asked_again_at_delivery(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass, app: Any
):
    hook = await endpoint(admin, f"{sink.url}/in")
    app.state.events.egress.allow_private = False  # e.g. the name now resolves privately
    await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    assert sink.got() == []
    (attempt,) = [r for r in await log(admin, hook["id"]) if r["attempt"] == 1]
    assert (attempt["state"], attempt["error"]) == ("retrying", "address_not_allowed")


async def test_a_slow_endpoint_gets_four_at_once_and_holds_no_other_back(
    admin: httpx.AsyncClient, app: Any, clock: Clock
):
    gate = threading.Event()  # the slow receiver answers nothing until it is set
    with receiver(default="slow", gate=gate) as slow, receiver() as fast:
        hand = hand_loop(app, clock)
        try:
            tortoise = await endpoint(admin, f"{slow.url}/in")
            hare = await endpoint(admin, f"{fast.url}/in")
            for _ in range(10):
                await ping(admin, tortoise["id"])
            for _ in range(3):
                await ping(admin, hare["id"])
            await turn(hand)  # claims both endpoints' attempts and starts them
            await fast.wait_for(3, within=5)  # while the slow one holds four
            await slow.wait_for(4, within=5)
            assert slow.in_flight["/in"] == 4 and len(slow.got()) == 4
            gate.set()
            await turn_until_quiet(hand)
            assert len(slow.got()) == 10
            assert slow.most_in_flight["/in"] == 4
        finally:
            await hand.sender.close()


async def test_redeliver_sends_the_same_message_again_and_the_metrics_count(
    admin: httpx.AsyncClient, sink: Receiver, loop: WebhookPass
):
    hook = await endpoint(admin, f"{sink.url}/in")
    queued = await ping(admin, hook["id"])
    await turn_until_quiet(loop)
    r = await admin.post(f"/admin/webhook-deliveries/{queued['id']}/redeliver")
    assert r.status_code == 202
    again = r.json()
    assert (again["attempt"], again["state"], again["message_id"]) == (
        2,
        "pending",
        queued["message_id"],
    )
    await turn_until_quiet(loop)
    assert [g.headers["webhook-id"] for g in sink.got()] == [queued["message_id"]] * 2
    assert sink.got()[0].body == sink.got()[1].body
    metrics = (await admin.get("/metrics")).text
    assert 'events_webhook_deliveries_total{result="succeeded"} 2.0' in metrics
    assert "events_webhook_delivery_seconds_count 2.0" in metrics
    assert "events_webhook_pending 0.0" in metrics
    missing = "/admin/webhook-deliveries/00000000-0000-0000-0000-000000000000/redeliver"
    assert await api_status(admin, "POST", missing) == (404, "not_found")


async def test_a_stopped_loop_records_what_it_had_in_flight(
    admin: httpx.AsyncClient, app: Any, clock: Clock
):
    with receiver(default="slow", delay_s=0.3) as slow:
        hand = hand_loop(app, clock)
        hook = await endpoint(admin, f"{slow.url}/in")
        await ping(admin, hook["id"])
        looping = lane_of(app, hand)
        looping.start()
        notify(hand)
        await slow.wait_for(1, within=5)
        await asyncio.wait_for(looping.stop(), 10)
        await asyncio.wait_for(hand.close(), 20)  # what is in flight ends and is recorded
        assert [r["state"] for r in await log(admin, hook["id"])] == ["succeeded"]


async def test_an_idle_loop_sleeps_even_while_unheard_facts_and_empty_fan_outs_happen(
    admin: httpx.AsyncClient, app: Any, clock: Clock
):
    hand = hand_loop(app, clock)
    turns = 0
    run = hand.run

    async def counted(*args: Any) -> Any:
        nonlocal turns
        turns += 1
        return await run(*args)

    hand.run = counted  # type: ignore[method-assign]
    looping = lane_of(app, hand)  # the probe app's loop is off: a loop of this pass
    looping.start()
    try:
        await asyncio.wait_for(looping.listener.listening.wait(), 10)
        lane = looping.lanes["webhooks"]
        await until_true(lambda: lane.runs >= 1 and not lane.woken.is_set())  # asleep
        event = (
            await admin.post(
                "/admin/events",
                json={
                    "name": "Quiet",
                    "date_begin": "2027-05-10T09:00:00Z",
                    "date_end": "2027-05-10T18:00:00Z",
                    "date_tz": "UTC",
                },
            )
        ).json()
        for i in range(5):  # facts nobody listens to: no row, no wake
            r = await admin.post(
                "/admin/registrations", json={"event_id": event["id"], "name": f"Q{i}"}
            )
            assert r.status_code == 201, r.text
        await asyncio.sleep(1)
    finally:
        await looping.stop()
        await hand.close()
    assert turns <= 2  # the first run, and perhaps its listener's opening: never a spin


def pools(sender: WebhookSender) -> dict[Any, Any]:
    """The sender's connection pools, by receiver."""
    assert sender.client.pools is not None
    return sender.client.pools.pools


async def test_the_sender_keeps_a_pool_per_receiver_and_closes_one_left_idle():
    now = [0.0]
    sender = WebhookSender(EgressGuard(allow_private=True), clock=lambda: now[0])
    secret = ("whsec_" + "A" * 44,)

    async def send(url: str) -> None:
        answer = await sender.send(url, secret, "msg_1", b"{}")
        assert answer.ok, answer

    try:
        with receiver() as one, receiver() as other:
            for url in (f"{one.url}/a", f"{one.url}/b", f"{other.url}/a"):
                await send(url)
            assert len(pools(sender)) == 3  # a path is a receiver of its own
            now[0] = POOL_IDLE_S - 1
            await send(f"{other.url}/a")  # nothing idle long enough yet
            assert len(pools(sender)) == 3
            now[0] = POOL_IDLE_S + 60
            await send(f"{other.url}/a")  # the two others were unused for 360 s: closed
            assert [key[3] for key in pools(sender)] == ["/a"]
            assert len(other.got()) == 3
            await send(f"{one.url}/a")  # a new pool, as on first use
            assert len(pools(sender)) == 2 and len(one.got()) == 3
    finally:
        await sender.close()


async def test_a_big_answer_is_read_no_further_than_64_kib_and_its_connection_is_not_reused():
    sender = WebhookSender(EgressGuard(allow_private=True))
    secret = ("whsec_" + "A" * 44,)
    try:
        with receiver(script=["200", "200", "big", "200"]) as sink:
            for n in range(4):
                answer = await sender.send(f"{sink.url}/in", secret, f"msg_{n}", b"{}")
                assert answer.ok and answer.error is None, answer
            ports = [g.port for g in sink.got()]
        assert ports[0] == ports[1] == ports[2]  # kept alive up to the big answer
        assert ports[3] != ports[2]  # its unread rest: that connection was closed
    finally:
        await sender.close()


async def test_a_redelivered_attempt_is_claimed_ahead_of_its_endpoints_others(
    admin: httpx.AsyncClient, pool: asyncpg.Pool, sink: Receiver, loop: WebhookPass
):
    """A redelivery is due before every attempt of its endpoint that no pass holds: the
    waiting ones, and one whose lease ran out (a dead sender's, due again). The next
    claim of one attempt takes it."""
    from uuid import UUID, uuid4

    from events_svc.verbs.leases import WEBHOOK_ATTEMPTS

    hook = await endpoint(admin, f"{sink.url}/in")
    dead, older, asked = [await ping(admin, hook["id"]) for _ in range(3)]
    now = utc_now()
    async with pool.acquire() as conn:  # a sender died holding `dead`; `older` waits
        await conn.execute(
            "UPDATE event.webhook_deliveries SET next_attempt_at = $2, lease_until = $2,"
            " lease_token = $3 WHERE id = $1",
            UUID(dead["id"]),
            now - timedelta(minutes=10),
            uuid4(),
        )
        await conn.execute(
            "UPDATE event.webhook_deliveries SET next_attempt_at = $2 WHERE id = $1",
            UUID(older["id"]),
            now - timedelta(minutes=5),
        )
    r = await admin.post(f"/admin/webhook-deliveries/{asked['id']}/redeliver")
    assert r.status_code == 202, r.text
    assert r.json()["id"] == asked["id"]  # the waiting attempt, made due first
    claim = await WEBHOOK_ATTEMPTS.claim(pool, utc_now(), 1, timedelta(minutes=2), 4)
    assert [str(row["id"]) for row in claim.rows] == [asked["id"]]
    await WEBHOOK_ATTEMPTS.give_back(pool, claim.held(), utc_now())
