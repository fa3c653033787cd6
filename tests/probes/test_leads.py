"""CRM lead rules: typed predicates per axis, the answer-to-rule bridge, both grouping
grains in one pass, re-runs that create nothing new, a parked refusal retried to success,
a walker SIGKILLed mid-pass whose groups are never created twice, relink, and the
refusals (real PostgreSQL, the real HTTP app, a real webhook server on loopback)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import itertools
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web

from events_svc import create_app
from events_svc.adapters.lead_webhook import WebhookLeadSink
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.verbs.leads import LeadOptions, run_lead_pass
from events_svc.verbs.leads.worker import LEASE_S
from tests.probes.helpers import BASE, Api, free_port, hand_loop, make_event

SECRET = "lead-webhook-secret-0123456789"
RULES = "/admin/lead-rules"
RUN = "/admin/lead-requests/run"


class Hook:
    """A CRM's webhook: records every call (checking its signature) and creates one lead
    per idempotency key; `mode` makes it refuse (422) or stall until released."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.leads: dict[str, str] = {}
        self.mode = "ok"
        self.delay = 0.0  # seconds each answer takes
        self.seen = asyncio.Event()
        self.release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        expected = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        body = json.loads(raw)
        key = request.headers["Idempotency-Key"]
        signed = hmac.compare_digest(request.headers.get("X-Events-Signature", ""), expected)
        self.calls.append({"body": body, "key": key, "signed": signed})
        self.seen.set()
        await asyncio.sleep(self.delay)
        if self.mode == "refuse":
            return web.json_response({"error": "not today"}, status=422)
        if self.mode == "stall":
            await self.release.wait()
        if body["action"] == "create":
            lead = self.leads.setdefault(key, f"lead-{len(self.leads) + 1}")
            return web.json_response({"lead_id": lead})
        return web.json_response({})

    def creates(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["body"]["action"] == "create"]

    def updates(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["body"]["action"] == "update"]


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    h = Hook()
    app = web.Application()
    app.router.add_post("/leads", h.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    h.url = f"http://127.0.0.1:{port}/leads"
    yield h
    h.release.set()
    await runner.cleanup()


@pytest.fixture
async def crm(settings: Settings, pool: asyncpg.Pool, hook: Hook) -> AsyncIterator[Any]:
    """A client of the app composed with the webhook sink (a '*' token)."""
    wired = dataclasses.replace(settings, lead_webhook_url=hook.url, lead_webhook_secret=SECRET)
    app = create_app(wired)
    async with app.router.lifespan_context(app):
        headers = await Api(app, pool).token("*")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            yield c


async def rule(client: httpx.AsyncClient, *predicates: dict[str, Any], **over: Any) -> dict:
    body = {"name": "Leads", "predicates": list(predicates), **over}
    r = await client.post(RULES, json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def register(client: httpx.AsyncClient, event_id: str, n: int = 1, **over: Any) -> list:
    ids = []
    for i in range(n):
        body = {"event_id": event_id, "name": f"Guest {i}", "email": f"g{i}@example.org", **over}
        r = await client.post("/admin/registrations", json=body)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


async def run(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post(RUN)
    assert r.status_code == 200, r.text
    return dict(r.json())


def by_rule(hook: Hook, rule_id: str) -> set[str]:
    """Every registration the webhook was told about for a rule."""
    return {r for c in hook.calls if c["body"]["rule_id"] == rule_id
            for r in c["body"]["registration_ids"]}  # fmt: skip


async def requests(client: httpx.AsyncClient, event_id: str) -> dict[str, Any]:
    r = await client.get("/admin/lead-requests", params={"event_id": event_id})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    assert len(items) == 1
    return dict(items[0])


async def age(api_pool: asyncpg.Pool, ids: list[str], created_at: datetime) -> None:
    async with api_pool.acquire() as conn:
        await conn.execute(
            "UPDATE event.registrations SET created_at = $2 WHERE id = ANY($1::uuid[])",
            [uuid.UUID(i) for i in ids],
            created_at,
        )


async def test_a_rule_per_axis_reaches_exactly_the_attendees_it_admits(crm, hook):
    kind = (await crm.post("/admin/types", json={"name": "Meetup"})).json()["id"]
    company = str(uuid.uuid4())
    q = await crm.post("/admin/questions", json={"title": "Role", "answers": [
        {"name": "Buyer"}, {"name": "Student"}]})  # fmt: skip
    question = q.json()
    buyer, student = (a["id"] for a in question["answers"])
    by_id = await make_event(crm)
    by_type = await make_event(crm, event_type_id=kind)
    by_company = await make_event(crm, company_id=company)
    by_answer = await make_event(crm)
    r = await crm.post(
        f"/admin/events/{by_answer['id']}/questions", json={"question_id": question["id"]}
    )
    assert r.status_code in (200, 201), r.text
    rules = {
        "event": await rule(crm, {"axis": "event", "value_ids": [by_id["id"]]}),
        "event_type": await rule(crm, {"axis": "event_type", "value_ids": [kind]}),
        "company": await rule(crm, {"axis": "company", "value_ids": [company]}),
        "question_answer": await rule(
            crm, {"axis": "question_answer", "question_id": question["id"], "value_ids": [buyer]}
        ),
    }
    people = {ev["id"]: await register(crm, ev["id"], 2) for ev in (by_id, by_type, by_company)}
    answered = {}
    for choice in (buyer, student):
        body = {"answers": [{"question_id": question["id"], "value_answer_id": choice}]}
        answered[choice] = (await register(crm, by_answer["id"], 1, **body))[0]

    summary = await run(crm)

    assert summary["parked"] == 0, (await crm.get("/admin/lead-requests")).json()
    assert summary["groups_created"] == 4
    assert by_rule(hook, rules["event"]["id"]) == set(people[by_id["id"]])
    assert by_rule(hook, rules["event_type"]["id"]) == set(people[by_type["id"]])
    assert by_rule(hook, rules["company"]["id"]) == set(people[by_company["id"]])
    assert by_rule(hook, rules["question_answer"]["id"]) == {answered[buyer]}
    assert all(c["signed"] for c in hook.calls)
    for ev in (by_id, by_type, by_company, by_answer):
        assert (await requests(crm, ev["id"]))["done"] is True
    view = (await crm.get(f"{RULES}/{rules['event']['id']}")).json()
    assert view["groups"] == {"per_order": 0, "per_event_day": 1} and view["last_error"] is None
    assert view["predicates"] == [
        {"axis": "event", "value_ids": [by_id["id"]], "question_id": None}
    ]


async def test_a_rule_made_from_an_answer_has_that_one_predicate(crm, hook):
    q = (await crm.post("/admin/questions", json={"title": "Diet", "answers": [
        {"name": "Vegan"}]})).json()  # fmt: skip
    other = (await crm.post("/admin/questions", json={"title": "Size", "answers": [
        {"name": "XL"}]})).json()  # fmt: skip
    answer = q["answers"][0]["id"]
    body = {"question_id": q["id"], "answer_ids": [answer]}
    r = await crm.post(f"{RULES}/from-answer", json=body)
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["predicates"] == [
        {"axis": "question_answer", "value_ids": [answer], "question_id": q["id"]}
    ]
    assert made["active"] is True and made["trigger"] == "create" and made["name"]
    alien = {"question_id": q["id"], "answer_ids": [other["answers"][0]["id"]]}
    r = await crm.post(f"{RULES}/from-answer", json=alien)
    assert r.status_code == 422 and r.json()["error"]["code"] == "answer_not_of_question"
    ev = await make_event(crm)
    await crm.post(f"/admin/events/{ev['id']}/questions", json={"question_id": q["id"]})
    picked = {"answers": [{"question_id": q["id"], "value_answer_id": answer}]}
    ids = await register(crm, ev["id"], 1, **picked) + await register(crm, ev["id"], 1)
    await run(crm)
    assert by_rule(hook, made["id"]) == {ids[0]}


async def test_per_order_and_per_day_groups_in_one_pass_and_reruns_only_update(crm, hook, pool):
    ev = await make_event(crm)
    made = await rule(crm, {"axis": "event", "value_ids": [ev["id"]]})
    order = str(uuid.uuid4())
    line = {"line_id": str(uuid.uuid4()), "event_id": ev["id"], "attendees": [
        {"name": "Buyer One"}, {"name": "Buyer Two"}]}  # fmt: skip
    fact = {"order_id": order, "amount_total": "0", "currency": "EUR", "lines": [line]}
    r = await crm.post("/admin/seam/orders/confirmed", json=fact)
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text
    sold = r.json()["registration_ids"]
    day_one = await register(crm, ev["id"], 2)
    day_two = await register(crm, ev["id"], 1)
    # 23:30 UTC is already the next day in Lisbon (UTC+1 in May): the event's day counts
    await age(pool, day_one, datetime(2027, 5, 9, 23, 30, tzinfo=UTC))
    await age(pool, day_two, datetime(2027, 5, 11, 12, 0, tzinfo=UTC))

    summary = await run(crm)

    assert summary["groups_created"] == 3 and summary["registrations"] == 5
    groups = {c["body"]["group_key"]: c["body"] for c in hook.creates()}
    assert set(groups) == {order, f"{ev['id']}:2027-05-10", f"{ev['id']}:2027-05-11"}
    assert groups[order]["grain"] == "per_order"
    assert sorted(groups[order]["registration_ids"]) == sorted(sold)
    assert sorted(groups[f"{ev['id']}:2027-05-10"]["registration_ids"]) == sorted(day_one)
    assert groups[f"{ev['id']}:2027-05-11"]["grain"] == "per_event_day"
    assert all(g["lead_id"] is None and g["event_id"] == ev["id"] for g in groups.values())
    view = (await crm.get(f"{RULES}/{made['id']}")).json()
    assert view["groups"] == {"per_order": 1, "per_event_day": 2}

    calls = len(hook.calls)
    await run(crm)  # nothing new: nothing sent
    assert len(hook.calls) == calls

    late = await register(crm, ev["id"], 1)
    await age(pool, late, datetime(2027, 5, 10, 8, 0, tzinfo=UTC))
    summary = await run(crm)
    await run(crm)
    assert summary["groups_created"] == 0 and summary["groups_updated"] == 1
    (update,) = hook.updates()
    create = next(c for c in hook.creates() if c["body"]["group_key"] == f"{ev['id']}:2027-05-10")
    assert update["body"]["new_registration_ids"] == late
    assert sorted(update["body"]["registration_ids"]) == sorted(day_one + late)
    assert update["body"]["lead_id"] == hook.leads[create["key"]]
    provenance, number = update["key"].split(":")
    assert create["key"] == f"{provenance}:1" and number == "2"


async def test_a_refused_delivery_parks_the_request_and_a_retry_succeeds(crm, hook):
    ev = await make_event(crm)
    made = await rule(crm, {"axis": "event", "value_ids": [ev["id"]]})
    await register(crm, ev["id"], 2)
    hook.mode = "refuse"

    summary = await run(crm)

    assert summary["parked"] == 1 and summary["finished"] == 0
    parked = await requests(crm, ev["id"])
    assert parked["done"] is False and parked["claimed_at"] is None
    assert parked["error_detail"] == "webhook answered 422" and parked["attempts"] == 1
    assert parked["next_attempt_at"] is not None
    view = (await crm.get(f"{RULES}/{made['id']}")).json()
    assert view["last_error"] == "webhook answered 422"

    hook.mode = "ok"
    summary = await run(crm)  # the officer's run ignores the back-off

    assert summary["finished"] == 1 and summary["groups_created"] == 1
    healed = await requests(crm, ev["id"])
    assert healed["done"] is True and healed["error_detail"] is None and healed["attempts"] == 0
    assert (await crm.get(f"{RULES}/{made['id']}")).json()["last_error"] is None
    refused, accepted = hook.calls
    assert refused["key"] == accepted["key"]  # the same delivery, the same key


async def test_without_a_sink_requests_park_loudly(admin):
    ev = await make_event(admin)
    await rule(admin, {"axis": "event", "value_ids": [ev["id"]]})
    await register(admin, ev["id"], 1)
    summary = await run(admin)
    assert summary["parked"] == 1
    parked = await requests(admin, ev["id"])
    assert parked["done"] is False and parked["error_detail"] == "lead_sink_not_composed"


WALKER = Path(__file__).with_name("lead_walker.py")  # a script: python WALKER URL HOOK KEY


@pytest.mark.timeout(90)
async def test_a_walker_killed_mid_pass_never_creates_a_group_twice(crm, hook, pool, db_url):
    ev = await make_event(crm)
    await rule(crm, {"axis": "event", "value_ids": [ev["id"]]})
    for day in (9, 10, 11):
        ids = await register(crm, ev["id"], 2)
        await age(pool, ids, datetime(2027, 5, day, 12, 0, tzinfo=UTC))
    hook.mode = "stall"
    walker = subprocess.Popen([sys.executable, str(WALKER), db_url, hook.url, SECRET])
    try:
        await asyncio.wait_for(hook.seen.wait(), timeout=60)  # its first create is in flight
        walker.send_signal(signal.SIGKILL)
        assert walker.wait(timeout=10) == -signal.SIGKILL
    finally:
        if walker.poll() is None:
            walker.kill()
    hook.mode = "ok"
    hook.release.set()
    leased = await requests(crm, ev["id"])
    assert leased["done"] is False and leased["claimed_at"] is not None
    sink = WebhookLeadSink(hook.url, SECRET)
    try:
        early = await run_lead_pass(pool, sink, LeadOptions(), datetime.now(UTC))
        assert early.requests == 0  # the dead walker's lease still holds
        after_lease = datetime.now(UTC) + timedelta(seconds=LEASE_S + 1)
        summary = await run_lead_pass(pool, sink, LeadOptions(), after_lease)
    finally:
        await sink.close()

    assert summary.finished == 1 and summary.groups_created == 3
    keys: dict[str, set[str]] = {}
    for call in hook.creates():
        keys.setdefault(call["body"]["group_key"], set()).add(call["key"])
    assert len(keys) == 3 and all(len(k) == 1 for k in keys.values())  # one create each
    assert len(set(hook.leads.values())) == 3
    assert (await requests(crm, ev["id"]))["done"] is True


async def test_relink_moves_a_merged_lead(crm, hook, pool):
    ev = await make_event(crm)
    await rule(crm, {"axis": "event", "value_ids": [ev["id"]]})
    await register(crm, ev["id"], 1)
    await run(crm)
    (old,) = hook.leads.values()
    r = await crm.post("/admin/leads/relink", json={"old_lead_id": old, "new_lead_id": "L-9"})
    assert r.status_code == 200 and r.json() == {"moved": 1}, r.text
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT lead_id FROM event.lead_provenances") == "L-9"
    r = await crm.post("/admin/leads/relink", json={"old_lead_id": old, "new_lead_id": "L-10"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "lead_not_found"


async def test_an_axis_outside_the_vocabulary_is_refused_naming_it(admin):
    ev = await make_event(admin)
    body = {"name": "Tags", "predicates": [{"axis": "tag", "value_ids": [ev["id"]]}]}
    r = await admin.post(RULES, json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "lead_axis_unknown" and error["field"] == "predicates.0.axis"
    for axis in ("event", "event_type", "company", "question_answer"):
        assert axis in error["detail"]
    made = await rule(admin, {"axis": "event", "value_ids": [ev["id"]]})
    r = await admin.patch(f"{RULES}/{made['id']}", json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "lead_axis_unknown"
    stray = {"axis": "event", "value_ids": [ev["id"]], "question_id": str(uuid.uuid4())}
    r = await admin.post(RULES, json={"name": "X", "predicates": [stray]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_failed"
    r = await admin.post(RULES, json={"name": "X", "predicates": []})
    assert r.status_code == 422


async def test_lead_writes_need_the_lead_write_scope(api, admin):
    ev = await make_event(admin)
    body = {"name": "R", "predicates": [{"axis": "event", "value_ids": [ev["id"]]}]}
    reader, writer = await api.token("event:read"), await api.token("lead:write")
    for path, sent in ((RULES, body), (RUN, None), ("/admin/leads/relink", None)):
        r = await api.client.post(path, json=sent, headers=reader)
        assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    assert (await api.client.get(RULES, headers=reader)).status_code == 200
    assert (await api.client.post(RULES, json=body, headers=writer)).status_code == 201


async def _settle(pool: asyncpg.Pool) -> None:
    """Mark every queued request done, as a finished pass would."""
    async with pool.acquire() as conn:
        await conn.execute("UPDATE event.lead_requests SET done = true")


async def test_queueing_follows_mints_and_confirms_and_costs_nothing_without_rules(admin, pool):
    ev = await make_event(admin)
    (first,) = await register(admin, ev["id"], 1)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.lead_requests") == 0
    await rule(admin, {"axis": "event", "value_ids": [ev["id"]]}, trigger="confirm")
    assert (await requests(admin, ev["id"]))["done"] is False  # the new rule queued it
    async with pool.acquire() as conn:
        await conn.execute("UPDATE event.lead_requests SET done = true")
    r = await admin.post(f"/admin/registrations/{first}/set-draft")
    assert r.status_code == 200, r.text
    assert (await requests(admin, ev["id"]))["done"] is True  # a draft is not confirmed
    r = await admin.post(f"/admin/registrations/{first}/confirm")
    assert r.status_code == 200, r.text
    assert (await requests(admin, ev["id"]))["done"] is False  # entering open queues it
    await _settle(pool)
    await admin.post(f"/admin/registrations/{first}/set-draft")
    await _settle(pool)
    await admin.post(f"/admin/registrations/{first}/set-done")  # checked in from draft
    assert (await requests(admin, ev["id"]))["done"] is False
    # the sale seam's mints queue it (a free order: born open), and so does the paid heal
    await _settle(pool)
    line = {"line_id": str(uuid.uuid4()), "event_id": ev["id"], "attendees": [{"name": "B"}]}
    fact = {"order_id": str(uuid.uuid4()), "amount_total": "0", "currency": "EUR"}
    r = await admin.post("/admin/seam/orders/confirmed", json={**fact, "lines": [line]})
    assert r.json()["outcome"] == "applied"
    assert (await requests(admin, ev["id"]))["done"] is False
    unpaid = {**fact, "order_id": str(uuid.uuid4()), "amount_total": "9", "lines": [line]}
    await admin.post("/admin/seam/orders/confirmed", json=unpaid)
    await _settle(pool)
    r = await admin.post("/admin/seam/orders/paid", json={"order_id": unpaid["order_id"]})
    assert len(r.json()["registration_ids"]) == 1
    assert (await requests(admin, ev["id"]))["done"] is False  # the heal confirmed it
    other = await make_event(admin)
    await register(admin, other["id"], 1)
    async with pool.acquire() as conn:
        queued = await conn.fetchval(
            "SELECT count(*) FROM event.lead_requests WHERE event_id = $1",
            uuid.UUID(other["id"]),
        )
    assert queued == 0  # no rule admits that event


async def test_the_loop_runs_the_lead_pass_and_a_parked_request_never_makes_it_spin(
    admin, pool, settings
):
    ev = await make_event(admin)
    await rule(admin, {"axis": "event", "value_ids": [ev["id"]]})
    await register(admin, ev["id"], 1)
    far = (datetime.now(UTC) + timedelta(hours=12)).strftime("%H:%M")  # no sweep due soon
    loop = hand_loop(pool, dataclasses.replace(settings, done_sweep_at=far), Ports())
    leads = loop.lanes["leads"]
    _, delay = await leads.tick()  # the refusing sink parks the request: it backs off a minute
    assert 50 < delay <= 60
    assert (await requests(admin, ev["id"]))["error_detail"] == "lead_sink_not_composed"
    assert 50 < (await leads.tick())[1] <= 60  # still parked: nothing claimed, no spin
    assert (await requests(admin, ev["id"]))["attempts"] == 1


async def test_concurrent_passes_work_each_request_once(crm, hook, pool):
    events = [await make_event(crm) for _ in range(4)]
    for ev in events:
        await register(crm, ev["id"], 2)
    await rule(crm, {"axis": "event", "value_ids": [ev["id"] for ev in events]})
    summaries = await asyncio.gather(*(run(crm) for _ in range(4)))
    assert sum(s["requests"] for s in summaries) == 4  # each request claimed by one pass
    keys = [c["body"]["group_key"] for c in hook.creates()]
    assert len(keys) == len(set(keys)) == 4  # one walk-in day per event, created once
    assert sum(s["groups_created"] for s in summaries) == 4


async def _queue_rows(pool: asyncpg.Pool) -> list[dict[str, Any]]:
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT id, done, attempts, updated_at, next_attempt_at, lease_until, lease_token"
            " FROM event.lead_requests ORDER BY updated_at"
        )
    return [dict(r) for r in rows]


async def _events_with_requests(crm: httpx.AsyncClient, n: int) -> None:
    events = [await make_event(crm) for _ in range(n)]
    await rule(crm, {"axis": "event", "value_ids": [ev["id"] for ev in events]})
    for ev in events:
        await register(crm, ev["id"], 1)


async def test_a_parked_requests_back_off_counts_from_its_own_try(crm, hook, pool):
    """Each request of a pass parks at the time it was tried (the pass's start plus the
    time it has run), so a slow CRM does not shorten the later requests' back-off."""
    await _events_with_requests(crm, 3)
    hook.mode, hook.delay = "refuse", 0.3
    sink = WebhookLeadSink(hook.url, SECRET)
    try:
        summary = await run_lead_pass(pool, sink, LeadOptions(), datetime.now(UTC))
    finally:
        await sink.close()
    assert (summary.requests, summary.parked) == (3, 3)
    parked = await _queue_rows(pool)
    for req in parked:
        assert req["attempts"] == 1 and req["lease_token"] is None
        assert req["next_attempt_at"] - req["updated_at"] == timedelta(minutes=1)
    tried = [req["updated_at"] for req in parked]
    assert all(b - a >= timedelta(seconds=0.25) for a, b in itertools.pairwise(tried))


async def test_a_pass_renews_its_lease_while_it_works(crm, hook, pool):
    """Work that outlasts the claim's lease never leaves a claimed request free for
    another walker: past half the lease, the pass renews what it still holds (each
    request's own work well within that half)."""
    await _events_with_requests(crm, 9)
    hook.delay = 0.4
    sink = WebhookLeadSink(hook.url, SECRET)
    seen: list[int] = []  # requests claimed with a lease already run out, each look
    short = LeadOptions(lease_s=3.0)
    try:
        task = asyncio.create_task(run_lead_pass(pool, sink, short, datetime.now(UTC)))
        while not task.done():
            now = datetime.now(UTC)
            rows = await _queue_rows(pool)
            seen.append(sum(1 for r in rows if r["lease_token"] and r["lease_until"] <= now))
            await asyncio.sleep(0.05)
        summary = await task
    finally:
        await sink.close()
    assert summary.finished == 9  # 3.6 s of work under a 3 s lease
    assert len(seen) > 10 and not any(seen)
    assert all(r["done"] and r["lease_token"] is None for r in await _queue_rows(pool))


async def test_a_cancelled_pass_gives_its_requests_back_and_wakes_the_walkers(
    crm, hook, pool, db_url
):
    """A pass cancelled in a CRM call (a shutdown) gives back what its claim held, at
    once, and NOTIFYs the lead channel: no request waits for a lease no one is using."""
    from events_svc.verbs.leads.arming import WAKE_CHANNEL

    await _events_with_requests(crm, 2)
    hook.mode = "stall"
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(db_url)
    await listener.add_listener(WAKE_CHANNEL, lambda *args: heard.put_nowait(args[3]))
    sink = WebhookLeadSink(hook.url, SECRET)
    try:
        task = asyncio.create_task(run_lead_pass(pool, sink, LeadOptions(), datetime.now(UTC)))
        await asyncio.wait_for(hook.seen.wait(), 10)
        assert all(r["lease_token"] is not None for r in await _queue_rows(pool))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.wait_for(heard.get(), 5) == "given_back"
    finally:
        await sink.close()
        await listener.close()
    rows = await _queue_rows(pool)
    assert [(r["done"], r["lease_token"], r["attempts"]) for r in rows] == [(False, None, 0)] * 2
