"""CRM lead rules behind the company fence, each probe an attack with two companies'
tokens: a rule naming another company's events or company (on create, on patch), a rule
on a shared type or question, a rule whose predicates name another company's events in
the database anyway, another company's rule read, patched or deleted, another company's
lead relinked by guessing its CRM id, a company's run and queue; and migration 0026 giving
existing rules a company (real PostgreSQL, the real HTTP app; the lead sink is the
standalone signed webhook, and the CRM behind it a real HTTP server on loopback that checks
each signature and records what it is sent)."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from aiohttp import web

from events_svc import create_app, migrate
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, free_port, make_event, migrate_before

A, B = uuid.uuid4(), uuid.uuid4()
RULES = "/admin/lead-rules"
RUN = "/admin/lead-requests/run"
RELINK = "/admin/leads/relink"
OUT_OF_SCOPE = "lead_predicate_out_of_scope"


SECRET = "lead-fence-webhook-secret-0123"


@dataclass
class Sink:
    """The CRM behind the lead webhook: records every signed delivery's body and numbers
    its leads with small integers, as CRMs often do."""

    deliveries: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        signed = "sha256=" + hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(request.headers["X-Events-Signature"], signed)
        body = json.loads(raw)
        self.deliveries.append(body)
        if body["action"] == "create":
            return web.json_response({"lead_id": str(len(self.deliveries))})
        return web.json_response({})

    def reached(self) -> set[str]:
        """Every registration the sink was told about."""
        return {r for d in self.deliveries for r in d["registration_ids"]}


@dataclass
class Two:
    """Clients of companies A and B, and of the platform (`*` without a company)."""

    a: httpx.AsyncClient
    b: httpx.AsyncClient
    root: httpx.AsyncClient
    sink: Sink
    pool: asyncpg.Pool


@pytest.fixture
async def two(settings: Settings, pool: asyncpg.Pool) -> AsyncIterator[Two]:
    sink = Sink()
    crm = web.Application()
    crm.router.add_post("/leads", sink.handle)
    runner = web.AppRunner(crm)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    sink.url = f"http://127.0.0.1:{port}/leads"
    wired = dataclasses.replace(settings, lead_webhook_url=sink.url, lead_webhook_secret=SECRET)
    app = create_app(wired)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        clients = []
        for company in (A, B, None):
            headers = await api.token("*", company=company)
            transport = httpx.ASGITransport(app=app)
            clients.append(httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers))
        try:
            yield Two(clients[0], clients[1], clients[2], sink, pool)
        finally:
            for c in clients:
                await c.aclose()
            await api.client.aclose()
            await runner.cleanup()


def predicate(axis: str, *ids: str, question_id: str | None = None) -> dict[str, Any]:
    p: dict[str, Any] = {"axis": axis, "value_ids": list(ids)}
    if question_id is not None:
        p["question_id"] = question_id
    return p


async def rule(client: httpx.AsyncClient, *predicates: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(RULES, json={"name": "Leads", "predicates": list(predicates)})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def register(client: httpx.AsyncClient, event_id: str, **over: Any) -> str:
    body = {"event_id": event_id, "name": "Guest", "email": "guest@example.org", **over}
    r = await client.post("/admin/registrations", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def run(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.post(RUN)
    assert r.status_code == 200, r.text
    return dict(r.json())


def refusal(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 422, r.text
    error = dict(r.json()["error"])
    assert error["code"] == OUT_OF_SCOPE, error
    return error


def without_ids(error: dict[str, Any]) -> dict[str, Any]:
    """What the refusal says besides the ids the caller sent itself."""
    return {k: v for k, v in error.items() if k != "value_ids"}


async def queued(pool: asyncpg.Pool, event_id: str) -> asyncpg.Record | None:
    async with pool.acquire() as conn:
        return await conn.fetchrow(
            "SELECT done, generation FROM event.lead_requests WHERE event_id = $1",
            uuid.UUID(event_id),
        )


async def test_a_company_cannot_name_another_companys_event_in_a_rule(two: Two):
    theirs, mine = (await make_event(two.b))["id"], (await make_event(two.a))["id"]
    shared = (await make_event(two.root))["id"]  # no company: every company sees it
    await register(two.b, theirs)

    stolen = refusal(await two.a.post(RULES, json={
        "name": "Steal", "predicates": [predicate("event", mine, theirs)]}))  # fmt: skip
    unknown = str(uuid.uuid4())
    missing = refusal(await two.a.post(RULES, json={
        "name": "Steal", "predicates": [predicate("event", mine, unknown)]}))  # fmt: skip

    assert stolen["value_ids"] == [theirs] and missing["value_ids"] == [unknown]
    assert stolen["axis"] == "event" and stolen["predicate"] == 0
    assert stolen["field"] == "predicates.0.value_ids"
    assert without_ids(stolen) == without_ids(missing)  # B's event answers like nobody's
    assert (await two.root.get(RULES)).json()["items"] == []
    assert await queued(two.pool, theirs) is None
    made = await rule(two.a, predicate("event", mine, shared))
    assert made["company_id"] == str(A)


async def test_a_company_cannot_patch_a_rule_to_name_another_companys_event(two: Two):
    theirs, mine = (await make_event(two.b))["id"], (await make_event(two.a))["id"]
    await register(two.b, theirs)
    made = await rule(two.a, predicate("event", mine))
    second = predicate("company", str(A))

    r = await two.a.patch(
        f"{RULES}/{made['id']}",
        json={"name": "Renamed", "predicates": [second, predicate("event", theirs)]},
    )

    error = refusal(r)
    assert error["field"] == "predicates.1.value_ids" and error["predicate"] == 1
    assert error["axis"] == "event" and error["value_ids"] == [theirs]
    kept = (await two.a.get(f"{RULES}/{made['id']}")).json()
    assert kept["name"] == "Leads" and kept["predicates"] == made["predicates"]
    assert await queued(two.pool, theirs) is None
    # the platform actor patching A's rule is held to the rule's company too
    r = await two.root.patch(
        f"{RULES}/{made['id']}", json={"predicates": [predicate("event", theirs)]}
    )
    assert refusal(r)["value_ids"] == [theirs]


async def test_a_company_cannot_name_another_company_in_a_rule(two: Two):
    await register(two.b, (await make_event(two.b))["id"])

    for ids in ([str(B)], [str(A), str(B)]):
        error = refusal(await two.a.post(RULES, json={
            "name": "Steal", "predicates": [predicate("company", *ids)]}))  # fmt: skip
        assert error["axis"] == "company" and error["value_ids"] == [str(B)]
    made = await rule(two.a, predicate("company", str(A)))
    r = await two.a.patch(
        f"{RULES}/{made['id']}", json={"predicates": [predicate("company", str(B))]}
    )
    assert refusal(r)["value_ids"] == [str(B)]
    assert (await two.root.get(RULES)).json()["items"][0]["predicates"] == made["predicates"]
    # a platform rule may name any company: nobody's fence is crossed by the platform
    assert (await rule(two.root, predicate("company", str(B))))["company_id"] is None


async def test_a_rule_on_a_shared_type_reaches_only_its_companys_registrations(two: Two):
    kind = (await two.root.post("/admin/types", json={"name": "Meetup"})).json()["id"]
    mine = (await make_event(two.a, event_type_id=kind))["id"]
    theirs = (await make_event(two.b, event_type_id=kind))["id"]
    own = await register(two.a, mine)
    await register(two.b, theirs)

    made = await rule(two.a, predicate("event_type", kind))  # types are shared: in scope
    summary = await run(two.root)  # the platform's pass: every request there is

    assert summary["parked"] == 0 and summary["registrations"] == 1
    assert two.sink.reached() == {own}
    assert {d["rule_id"] for d in two.sink.deliveries} == {made["id"]}
    assert await queued(two.pool, theirs) is None  # the rule never even queued B's event
    unknown = str(uuid.uuid4())
    error = refusal(await two.a.post(RULES, json={
        "name": "X", "predicates": [predicate("event_type", kind, unknown)]}))  # fmt: skip
    assert error["axis"] == "event_type" and error["value_ids"] == [unknown]


async def test_a_rule_from_a_shared_questions_answer_reaches_only_its_companys_registrations(
    two: Two,
):
    q = (await two.root.post("/admin/questions", json={"title": "Role", "answers": [
        {"name": "Buyer"}]})).json()  # fmt: skip
    buyer = q["answers"][0]["id"]
    answers = {"answers": [{"question_id": q["id"], "value_answer_id": buyer}]}
    found = []
    for client in (two.a, two.b):
        ev = (await make_event(client))["id"]
        r = await client.post(f"/admin/events/{ev}/questions", json={"question_id": q["id"]})
        assert r.status_code in (200, 201), r.text
        found.append(await register(client, ev, **answers))
    own, _ = found

    r = await two.a.post(
        f"{RULES}/from-answer", json={"question_id": q["id"], "answer_ids": [buyer]}
    )
    assert r.status_code == 201, r.text
    assert r.json()["company_id"] == str(A)
    summary = await run(two.root)

    assert summary["parked"] == 0 and two.sink.reached() == {own}


async def test_a_rule_naming_another_companys_event_in_the_database_never_reaches_it(two: Two):
    mine, theirs = (await make_event(two.a))["id"], (await make_event(two.b))["id"]
    own = await register(two.a, mine)
    await register(two.b, theirs)
    made = await rule(two.a, predicate("event", mine))
    async with two.pool.acquire() as conn:  # as if the rule had got past the check somehow
        await conn.execute(
            "UPDATE event.lead_rule_predicates SET value_ids = $2::jsonb WHERE rule_id = $1",
            uuid.UUID(made["id"]),
            [mine, theirs],  # the pool's jsonb codec encodes it
        )
        await conn.execute(
            "INSERT INTO event.lead_requests (event_id) VALUES ($1)", uuid.UUID(theirs)
        )
    await register(two.b, theirs)  # a new attendee of B's: the mint does not arm A's rule

    summary = await run(two.root)

    assert summary["requests"] == 2 and summary["parked"] == 0
    assert two.sink.reached() == {own}
    async with two.pool.acquire() as conn:
        linked = await conn.fetchval(
            "SELECT count(*) FROM event.lead_provenance_registrations WHERE rule_id = $1",
            uuid.UUID(made["id"]),
        )
    assert linked == 1


async def test_a_company_cannot_read_patch_or_delete_another_companys_rule(two: Two):
    ev = (await make_event(two.b))["id"]
    theirs = await rule(two.b, predicate("event", ev))
    platform = await rule(two.root, predicate("event", ev))
    nobody = str(uuid.uuid4())

    for rule_id in (theirs["id"], platform["id"]):
        for method, sent in (("GET", None), ("PATCH", {"name": "Mine"}), ("DELETE", None)):
            foreign = await two.a.request(method, f"{RULES}/{rule_id}", json=sent)
            missing = await two.a.request(method, f"{RULES}/{nobody}", json=sent)
            assert foreign.status_code == missing.status_code == 404, foreign.text
            assert foreign.json() == missing.json()
    assert (await two.a.get(RULES)).json()["items"] == []
    seen = [(r["id"], r["name"]) for r in (await two.root.get(RULES)).json()["items"]]
    assert seen == [(theirs["id"], "Leads"), (platform["id"], "Leads")]
    assert [r["id"] for r in (await two.b.get(RULES)).json()["items"]] == [theirs["id"]]


async def test_relink_of_another_companys_lead_answers_like_an_unknown_one(two: Two):
    for client in (two.a, two.b):
        ev = (await make_event(client))["id"]
        await rule(client, predicate("event", ev))
        await register(client, ev)
    await run(two.root)  # the CRM numbers the two groups' leads 1 and 2
    async with two.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT p.lead_id, r.company_id FROM event.lead_provenances p"
            " JOIN event.lead_rules r ON r.id = p.rule_id"
        )
    by_company = {r["company_id"]: r["lead_id"] for r in rows}
    theirs, mine = by_company[B], by_company[A]
    assert {theirs, mine} == {"1", "2"}

    guessed = await two.a.post(RELINK, json={"old_lead_id": theirs, "new_lead_id": "A-1"})
    unknown = await two.a.post(RELINK, json={"old_lead_id": "999", "new_lead_id": "A-1"})

    assert guessed.status_code == unknown.status_code == 404
    assert guessed.json() == unknown.json()
    assert guessed.json()["error"]["code"] == "lead_not_found"
    async with two.pool.acquire() as conn:
        # a lead id both companies' groups carry: A's relink moves A's only
        await conn.execute("UPDATE event.lead_provenances SET lead_id = '7'")
    r = await two.a.post(RELINK, json={"old_lead_id": "7", "new_lead_id": "A-7"})
    assert r.status_code == 200 and r.json() == {"moved": 1}, r.text
    async with two.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT p.lead_id, r.company_id FROM event.lead_provenances p"
            " JOIN event.lead_rules r ON r.id = p.rule_id"
        )
    assert {r["company_id"]: r["lead_id"] for r in rows} == {A: "A-7", B: "7"}
    r = await two.b.post(RELINK, json={"old_lead_id": "7", "new_lead_id": "B-7"})
    assert r.status_code == 200 and r.json() == {"moved": 1}, r.text


async def test_a_company_run_processes_only_its_companys_requests(two: Two):
    events = {}
    for name, client in (("a", two.a), ("b", two.b), ("shared", two.root)):
        ev = (await make_event(client))["id"]
        await rule(client, predicate("event", ev))
        events[name] = (ev, await register(client, ev))

    summary = await run(two.a)

    assert summary["requests"] == 1 and summary["finished"] == 1
    assert two.sink.reached() == {events["a"][1]}
    assert (await queued(two.pool, events["a"][0]))["done"] is True
    for other in ("b", "shared"):  # B's, and the shared event's (other companies' rules)
        assert (await queued(two.pool, events[other][0]))["done"] is False
    assert (await run(two.b))["requests"] == 1
    assert two.sink.reached() == {events["a"][1], events["b"][1]}
    summary = await run(two.root)  # the platform's run works what is left
    assert summary["requests"] == 1 and two.sink.reached() == {r for _, r in events.values()}


async def test_the_queue_shows_a_company_only_its_events_requests(two: Two):
    mine, theirs = (await make_event(two.a))["id"], (await make_event(two.b))["id"]
    for client, ev in ((two.a, mine), (two.b, theirs)):
        await rule(client, predicate("event", ev))

    listed = (await two.a.get("/admin/lead-requests")).json()["items"]
    foreign = await two.a.get("/admin/lead-requests", params={"event_id": theirs})
    missing = await two.a.get("/admin/lead-requests", params={"event_id": str(uuid.uuid4())})

    assert [i["event_id"] for i in listed] == [mine]
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()
    assert len((await two.root.get("/admin/lead-requests")).json()["items"]) == 2


async def test_existing_rules_take_the_company_of_the_events_they_match(
    empty_db_url: str, tmp_path: Path
):
    """Migration 0026 on rules made before it: a rule's creation audit row names its
    company; without one, one company's events (shared ones aside) make a rule that
    company's, several companies or none a platform rule."""
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrate_before(conn, tmp_path / "migrations", "0026")
        event = (
            "INSERT INTO event.events (name, date_begin, date_end, company_id)"
            " VALUES ('E', now(), now(), $1) RETURNING id::text"
        )
        a1, a2, b1, shared = [await conn.fetchval(event, c) for c in (A, A, B, None)]
        cases = {
            "one event of A": ("event", [a1], A),
            "A's and a shared event": ("event", [a2, shared], A),
            "A's and B's events": ("event", [a1, b1], None),
            "company B": ("company", [str(B)], B),
            "nothing": ("event", [str(uuid.uuid4())], None),
        }
        made = {}
        for name, (axis, ids, _) in cases.items():
            made[name] = await conn.fetchval(
                "INSERT INTO event.lead_rules (name) VALUES ($1) RETURNING id", name
            )
            await conn.execute(
                "INSERT INTO event.lead_rule_predicates (rule_id, axis, value_ids)"
                " VALUES ($1, $2::event.lead_predicate_axis, $3::jsonb)",
                made[name],
                axis,
                json.dumps(ids),
            )
        # rules made through the verbs: their creation audit row names the company
        audited = {"A's rule on a shared type": A, "B's rule naming A's events": B}
        for name, company in audited.items():
            made[name] = await conn.fetchval(
                "INSERT INTO event.lead_rules (name) VALUES ($1) RETURNING id", name
            )
            await conn.execute(
                "INSERT INTO event.lead_rule_predicates (rule_id, axis, value_ids)"
                " VALUES ($1, 'event', $2::jsonb)",
                made[name],
                json.dumps([a1, a2] if company == B else [shared]),
            )
            await conn.execute(
                "INSERT INTO event.event_audit_log (actor_id, actor_kind, company_id, verb,"
                " object_kind, object_id) VALUES ('t', 'token', $1, 'lead_rule_created',"
                " 'lead_rule', $2)",
                company,
                made[name],
            )
        cases.update({n: ("event", [], c) for n, c in audited.items()})
        await migrate.apply(conn, migrate.default_dir())
        for name, (_, _, company) in cases.items():
            found = await conn.fetchval(
                "SELECT company_id FROM event.lead_rules WHERE id = $1", made[name]
            )
            assert found == company, name
    finally:
        await conn.close()
