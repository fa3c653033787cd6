"""The template store under attack: templates belong to a company, and checking one never
stalls the service.

Two companies' tokens (A and B) try what issue 26 reproduced: A edits, deletes, lists and
reads B's templates, and points its own lines (of events, of shared types, of the
dispatcher's shared mapping) at B's; a template of long `+` chains is saved while
`/healthz` is polled. The passes compile a template once per revision, in a worker
thread, before they lock anything.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import migrate
from events_svc.adapters import standalone
from events_svc.app import create_app
from events_svc.ports import Ports, Rendered, RenderRequest
from events_svc.settings import Settings
from events_svc.templating import MAX_NODES, MAX_TREE_DEPTH, check
from tests.probes.helpers import (
    BASE,
    BEGIN,
    Api,
    event_body,
    make_event,
    migrate_before,
    ports,
    run,
)

A, B = uuid.uuid4(), uuid.uuid4()
HELLO = "Hello {{ registration.name }}"
# the body of issue 26: 9.9 KB of `{{ 1+1+...+1 }}`, 15 s to check on the event loop
PLUS_CHAINS = ("{{ " + "+".join(["1"] * 150) + " }}\n") * 32


@asynccontextmanager
async def client(api: Api, *scopes: str, company: uuid.UUID | None) -> AsyncIterator[Any]:
    headers = await api.token(*scopes, company=company)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    ) as c:
        yield c


async def new_template(c: httpx.AsyncClient, body: str = HELLO, **over: Any) -> dict[str, Any]:
    r = await c.post("/admin/templates", json={"name": "T", "body": body, **over})
    assert r.status_code == 201, r.text
    return dict(r.json())


def line(event_id: str, template_id: str) -> dict[str, Any]:
    return {"event_id": event_id, "interval_unit": "days", "template_ref": template_id}


async def mail_lines(api: Api) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return await conn.fetch("SELECT id, event_id, template_ref FROM event.mails ORDER BY id")


# --- templates belong to a company ---------------------------------------------------------


async def test_a_company_cannot_patch_or_delete_another_companys_template(api: Api):
    async with (
        client(api, "*", company=A) as a,
        client(api, "*", company=B) as b,
    ):
        theirs = await new_template(b)
        ev = await make_event(b)
        assert (await b.post("/admin/mails", json=line(ev["id"], theirs["id"]))).status_code == 201
        missing = await a.patch(f"/admin/templates/{uuid.uuid4()}", json={"body": "x"})
        assert missing.status_code == 404
        r = await a.patch(f"/admin/templates/{theirs['id']}", json={"body": "Pay here {{ 1 }}"})
        assert (r.status_code, r.json()) == (404, missing.json())  # exactly like a missing one
        gone = await a.delete(f"/admin/templates/{uuid.uuid4()}")
        r = await a.delete(f"/admin/templates/{theirs['id']}")
        assert (r.status_code, r.json()) == (404, gone.json())
        kept = (await b.get(f"/admin/templates/{theirs['id']}")).json()
        assert (kept["body"], kept["company_id"]) == (HELLO, str(B))
        assert len(await mail_lines(api)) == 1  # B's line is still there


async def test_a_company_reads_only_its_own_and_the_platform_templates(api: Api, admin):
    platform = await new_template(admin, name="Platform")
    async with (
        client(api, "*", company=A) as a,
        client(api, "template:write", company=B) as b,
        client(api, "event:read", company=A) as reader,
    ):
        mine = await new_template(a, name="Mine")
        theirs = await new_template(b, name="Theirs")
        listed = (await reader.get("/admin/templates")).json()["items"]
        assert {t["id"] for t in listed} == {platform["id"], mine["id"]}
        assert (await reader.get(f"/admin/templates/{platform['id']}")).status_code == 200
        missing = await reader.get(f"/admin/templates/{uuid.uuid4()}")
        r = await reader.get(f"/admin/templates/{theirs['id']}")
        assert (r.status_code, r.json()) == (404, missing.json())
    everything = (await admin.get("/admin/templates")).json()["items"]
    assert {t["id"] for t in everything} == {platform["id"], mine["id"], theirs["id"]}


async def test_a_template_carries_its_company_read_only(api: Api, admin):
    assert (await new_template(admin))["company_id"] is None  # a platform template
    async with client(api, "*", company=A) as a:
        mine = await new_template(a)
        assert mine["company_id"] == str(A)
        r = await a.post("/admin/templates", json={"name": "T", "body": "x", "company_id": str(B)})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "unknown_field")
        r = await a.patch(f"/admin/templates/{mine['id']}", json={"company_id": None})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "unknown_field")


async def test_only_a_platform_operator_writes_a_platform_template(api: Api, admin):
    platform = await new_template(admin)
    url = f"/admin/templates/{platform['id']}"
    async with client(api, "*", company=A) as a:
        r = await a.patch(url, json={"body": "Mine now"})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
        r = await a.delete(url)
        assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
        assert (await a.get(url)).json()["body"] == HELLO
    r = await admin.patch(url, json={"body": "Hi {{ registration.name }}"})
    assert r.status_code == 200, r.text
    assert (await admin.delete(url)).status_code == 200


async def test_an_events_mail_line_uses_only_its_companys_or_a_platform_template(api: Api, admin):
    platform = await new_template(admin)
    async with (
        client(api, "*", company=A) as a,
        client(api, "*", company=B) as b,
    ):
        theirs = await new_template(b)
        mine = await new_template(a)
        ev = await make_event(a)
        r = await a.post("/admin/mails", json=line(ev["id"], theirs["id"]))
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
        assert r.json()["error"]["field"] == "template_ref"
        assert HELLO not in r.text  # nothing of the template but the id A sent
        ok = await a.post("/admin/mails", json=line(ev["id"], mine["id"]))
        assert ok.status_code == 201, ok.text
        assert (
            await a.post("/admin/mails", json=line(ev["id"], platform["id"]))
        ).status_code == 201
        r = await a.patch(f"/admin/mails/{ok.json()['id']}", json={"template_ref": theirs["id"]})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
        # the event's company decides, whoever writes: a platform operator cannot either
        r = await admin.post("/admin/mails", json=line(ev["id"], theirs["id"]))
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
        # a shared event (no company) sends to everyone's attendees: platform templates only
        shared = await make_event(admin)
        r = await a.post("/admin/mails", json=line(shared["id"], mine["id"]))
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
    assert [r["template_ref"] for r in await mail_lines(api)].count(uuid.UUID(theirs["id"])) == 0


async def test_a_types_mail_line_uses_only_the_actors_or_a_platform_template(api: Api, admin):
    platform = await new_template(admin)
    kind = (await admin.post("/admin/types", json={"name": "Conference"})).json()
    url = f"/admin/types/{kind['id']}/mails"
    async with (
        client(api, "*", company=A) as a,
        client(api, "*", company=B) as b,
    ):
        theirs = await new_template(b)
        r = await a.post(url, json={"template_ref": theirs["id"]})
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
        r = await admin.post(url, json={"template_ref": theirs["id"]})  # types are shared
        assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
        assert (await a.post(url, json={"template_ref": platform["id"]})).status_code == 201
        mine = await new_template(a)
        assert (await a.post(url, json={"template_ref": mine["id"]})).status_code == 201


async def test_a_type_line_of_another_companys_template_is_not_copied_onto_an_event(
    api: Api, admin
):
    platform = await new_template(admin)
    kind = (await admin.post("/admin/types", json={"name": "Conference"})).json()
    url = f"/admin/types/{kind['id']}/mails"
    async with (
        client(api, "*", company=A) as a,
        client(api, "*", company=B) as b,
    ):
        mine = await new_template(a)
        for tpl in (mine, platform):
            assert (await a.post(url, json={"template_ref": tpl["id"]})).status_code == 201
        theirs = await b.post("/admin/events", json=event_body(event_type_id=kind["id"]))
        ours = await a.post("/admin/events", json=event_body(event_type_id=kind["id"]))
        assert theirs.status_code == ours.status_code == 201
        b_lines = (await b.get("/admin/mails", params={"event_id": theirs.json()["id"]})).json()
        assert [m["template_ref"] for m in b_lines["items"]] == [platform["id"]]
        a_lines = (await a.get("/admin/mails", params={"event_id": ours.json()["id"]})).json()
        assert {m["template_ref"] for m in a_lines["items"]} == {mine["id"], platform["id"]}
    async with api.pool.acquire() as conn:
        summary = await conn.fetchval(
            "SELECT summary FROM event.event_audit_log WHERE verb = 'event_created'"
            " AND event_id = $1",
            uuid.UUID(theirs.json()["id"]),
        )
    assert (summary["mails"], summary["mails_skipped"]) == (1, 1)


async def test_the_trigger_mapping_takes_only_a_platform_template(api: Api, admin):
    url = "/admin/trigger-templates/event_cancelled"
    async with client(api, "*", company=A) as a:
        mine = await new_template(a)
    r = await admin.put(url, json={"template_id": mine["id"]})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
    assert r.json()["error"]["field"] == "template_id"
    platform = await new_template(admin)
    r = await admin.put(url, json={"template_id": platform["id"]})
    assert (r.status_code, r.json()["template_id"]) == (200, platform["id"])


async def test_deleting_a_template_touches_only_what_the_actor_sees(api: Api, admin):
    async with (
        client(api, "*", company=A) as a,
        client(api, "*", company=B) as b,
    ):
        mine = await new_template(a)
        ours, theirs = await make_event(a), await make_event(b)
        assert (await a.post("/admin/mails", json=line(ours["id"], mine["id"]))).status_code == 201
        async with api.pool.acquire() as conn:
            # rows no verb writes any more: B's line naming A's template (written before
            # templates had a company), and a dispatcher purpose mapped to it
            await conn.execute(
                "INSERT INTO event.mails (event_id, template_ref) VALUES ($1, $2)",
                uuid.UUID(theirs["id"]),
                uuid.UUID(mine["id"]),
            )
            await conn.execute(
                "INSERT INTO event.trigger_templates (purpose, template_id, updated_at,"
                " updated_by) VALUES ('event_reminder', $1, now(), 'probe')",
                uuid.UUID(mine["id"]),
            )
        r = await a.delete(f"/admin/templates/{mine['id']}")
        assert r.status_code == 200, r.text
        assert r.json() == {
            "mails_deleted": 1,
            "type_lines_deleted": 0,
            "trigger_purposes_unmapped": [],
            "waitlist_offer_templates_unset": 0,
        }
    left = await mail_lines(api)
    assert [str(m["event_id"]) for m in left] == [theirs["id"]]  # B's line is B's business
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.trigger_templates") == 1


async def test_existing_templates_take_the_company_of_the_events_using_them(
    empty_db_url: str, tmp_path: Path
):
    """Migration 0023 on a database written before it: a template used by the lines of
    one company's events is that company's; used by several companies (or by a shared
    event), or mapped by the dispatcher, it is a platform template; unused, its creator's
    (as its creation audit row says), else a platform template."""
    folder = tmp_path / "migrations"
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrate_before(conn, folder, "0023")
        events = {
            name: await conn.fetchval(
                "INSERT INTO event.events (name, date_begin, date_end, company_id)"
                " VALUES ($1, now(), now(), $2) RETURNING id",
                name,
                company,
            )
            for name, company in (("a1", A), ("a2", A), ("b", B), ("shared", None))
        }
        uses = {
            "only_a": ["a1", "a2"],
            "a_and_b": ["a1", "b"],
            "a_and_shared": ["a2", "shared"],
            "unused": [],
            "unused_made_by_b": [],
            "mapped": ["b"],
        }
        ids = {}
        for name, used_by in uses.items():
            ids[name] = await conn.fetchval(
                "INSERT INTO event.message_templates (name, body) VALUES ($1, 'Hi') RETURNING id",
                name,
            )
            for event in used_by:
                await conn.execute(
                    "INSERT INTO event.mails (event_id, template_ref) VALUES ($1, $2)",
                    events[event],
                    ids[name],
                )
        await conn.execute(
            "INSERT INTO event.event_audit_log (actor_id, actor_kind, company_id, verb,"
            " object_kind, object_id) VALUES ('t', 'token', $1, 'template_created',"
            " 'template', $2)",
            B,
            ids["unused_made_by_b"],
        )
        await conn.execute(
            "INSERT INTO event.trigger_templates (purpose, template_id, updated_at, updated_by)"
            " VALUES ('event_reminder', $1, now(), 'probe')",
            ids["mapped"],
        )
        shutil.copy(migrate.default_dir() / "0023_template_company.sql", folder)
        assert await migrate.apply(conn, folder) == ["0023_template_company.sql"]
        owners = {
            r["name"]: r["company_id"]
            for r in await conn.fetch("SELECT name, company_id FROM event.template_view")
        }
    finally:
        await conn.close()
    assert owners == {
        "only_a": A,
        "a_and_b": None,
        "a_and_shared": None,
        "unused": None,
        "unused_made_by_b": B,
        "mapped": None,
    }


class HostRenderer:
    """A host's renderer with only the two required members: its templates are its own
    business (no `template_company`, no `prepare`)."""

    known = uuid.uuid4()

    async def render(self, conn: Any, request: RenderRequest) -> list[Rendered]:
        return [Rendered(subject="S", body="B") for _ in request.contexts]

    async def template_kind(self, conn: Any, template_ref: uuid.UUID) -> str | None:
        return "mail" if template_ref == self.known else None


async def test_a_host_renderer_without_companies_still_serves_lines(
    settings: Settings, pool: asyncpg.Pool
):
    host = HostRenderer()
    app = create_app(settings, Ports(template_renderer=host), pool=pool)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        try:
            async with client(api, "*", company=A) as a:
                ev = await make_event(a)
                r = await a.post("/admin/mails", json=line(ev["id"], str(host.known)))
                assert r.status_code == 201, r.text
                r = await a.post("/admin/mails", json=line(ev["id"], str(uuid.uuid4())))
                assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_found")
        finally:
            await api.client.aclose()


# --- checking a template never stalls the service ------------------------------------------


async def while_polling_healthz(c: httpx.AsyncClient, work: Any) -> tuple[Any, float, float, int]:
    """Run `work` while `/healthz` is asked again and again; (its result, its seconds, the
    longest wait for a /healthz answer, how many answered)."""
    done = asyncio.Event()
    gaps: list[float] = []

    async def poll() -> None:
        last = time.monotonic()
        while not done.is_set():
            assert (await c.get("/healthz")).status_code == 200
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            await asyncio.sleep(0.005)

    poller = asyncio.create_task(poll())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    try:
        result = await work
    finally:
        took = time.monotonic() - started
        done.set()
        await poller
    return result, took, max(gaps), len(gaps)


async def test_the_long_plus_chain_template_is_answered_at_once_while_healthz_answers(
    admin,
):
    assert 9_500 < len(PLUS_CHAINS) < 10_000
    r, took, gap, answers = await while_polling_healthz(
        admin, admin.post("/admin/templates", json={"name": "Sum", "body": PLUS_CHAINS})
    )
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_too_complex")
    assert r.json()["error"]["field"] == "body"
    assert r.json()["error"]["limit"] in ("nodes", "depth")
    # on the event loop it took 15 s and /healthz waited as long; off it, /healthz answers
    # throughout (the bound is the one the other template probes use: under the suite's
    # load, on two cores, a gap of a few hundred milliseconds is the machine's, not ours)
    assert took < 5.0 and gap < 0.5 and answers >= 2


async def test_a_slow_check_never_holds_the_event_loop(admin, monkeypatch):
    """Whatever a check costs, it runs in a template worker thread: here each text takes
    a blocking second, and /healthz keeps answering all along."""
    real, threads = check.check_template, set()

    def slow(source: str, *, field: str) -> None:
        threads.add(threading.current_thread().name)
        time.sleep(1.0)
        real(source, field=field)

    monkeypatch.setattr(check, "check_template", slow)
    r, took, gap, answers = await while_polling_healthz(
        admin, admin.post("/admin/templates", json={"name": "T", "subject": "Hi", "body": HELLO})
    )
    assert r.status_code == 201, r.text
    assert took >= 2.0 and gap < 0.5 and answers >= 10
    assert threads and all(name.startswith("template-check") for name in threads)


async def test_hostile_bodies_at_the_size_limit_are_refused_while_healthz_answers(admin):
    bodies = [
        ("{{ " + "+".join(["1"] * 40) + " }}\n") * 1150,  # 99 KB of short chains
        "{{ registration.name }}" * 4300,  # names: shallow, but many
        "{{ " + "(" * 2000 + "1" + ")" * 2000 + " }}",  # deep enough to blow a recursion
    ]
    for body in bodies:
        assert len(body) <= 100_000
    posts = [admin.post("/admin/templates", json={"name": "T", "body": b}) for b in bodies]
    answers, took, gap, _ = await while_polling_healthz(admin, asyncio.gather(*posts))
    codes = [
        (r.status_code, r.json()["error"]["code"], r.json()["error"]["limit"]) for r in answers
    ]
    assert codes == [
        (422, "template_too_complex", "nodes"),
        (422, "template_too_complex", "nodes"),
        (422, "template_too_complex", "depth"),
    ]
    assert answers[0].json()["error"]["max"] == MAX_NODES
    assert answers[2].json()["error"]["max"] == MAX_TREE_DEPTH
    assert took < 5.0 and gap < 0.5


async def test_the_checks_still_refuse_what_they_refused(admin):
    r = await admin.post("/admin/templates", json={"name": "T", "body": "Hi\n{{ event.name }"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_invalid")
    assert (r.json()["error"]["field"], r.json()["error"]["line"]) == ("body", 2)
    r = await admin.post("/admin/templates", json={"name": "T", "body": "{{ secret.key }}"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_variable_unknown")
    assert r.json()["error"]["variable"] == "secret"
    tpl = await new_template(admin)
    r = await admin.patch(f"/admin/templates/{tpl['id']}", json={"subject": "{{ user }}"})
    assert (r.status_code, r.json()["error"]["field"]) == (422, "subject")
    r = await admin.patch(f"/admin/templates/{tpl['id']}", json={"body": PLUS_CHAINS})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_too_complex")
    assert (await admin.get(f"/admin/templates/{tpl['id']}")).json()["body"] == HELLO


# --- the passes compile before they lock, once per revision --------------------------------


class Compiles:
    """Counts the store renderer's compiles and checks, as each one runs, that it is in a
    template worker thread while no scheduler row (or dispatch receipt) is locked."""

    def __init__(self, pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pool, self.count, self.threads, self.locked = pool, 0, set(), []
        real_compile, real_method = standalone._compile, standalone.StoreRenderer._compile

        def counted(*args: Any) -> Any:
            self.count += 1
            self.threads.add(threading.current_thread().name)
            return real_compile(*args)

        async def watched(renderer: Any, conn: Any, key: Any) -> Any:
            self.locked.append(await self.rows_locked())
            return await real_method(renderer, conn, key)

        monkeypatch.setattr(standalone, "_compile", counted)
        monkeypatch.setattr(standalone.StoreRenderer, "_compile", watched)

    async def rows_locked(self) -> int:
        """How many scheduler rows and receipts another transaction holds right now."""
        async with self.pool.acquire() as conn, conn.transaction():
            mails = await conn.fetch("SELECT id FROM event.mails FOR UPDATE SKIP LOCKED")
            receipts = await conn.fetch(
                "SELECT trigger_id FROM event.trigger_dispatch_receipts FOR UPDATE SKIP LOCKED"
            )
            total = await conn.fetchval(
                "SELECT (SELECT count(*) FROM event.mails)"
                " + (SELECT count(*) FROM event.trigger_dispatch_receipts)"
            )
        return int(total) - len(mails) - len(receipts)


async def guests(admin: httpx.AsyncClient, event_id: str, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        body = {"event_id": event_id, "name": f"Guest {i}", "email": f"g{i}@example.org"}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201


async def test_a_pass_compiles_a_template_once_per_revision_before_locking_its_line(
    api: Api, admin, monkeypatch
):
    compiles = Compiles(api.pool, monkeypatch)
    ev = await make_event(admin)
    tpl = await new_template(admin)
    assert (await admin.post("/admin/mails", json=line(ev["id"], tpl["id"]))).status_code == 201
    await guests(admin, ev["id"], 6)
    p = ports(api.pool)
    assert (await run(api, BEGIN - timedelta(hours=1), batch=2, p=p)).sent == 6
    assert compiles.count == 1  # three batches, one compile
    # an edit is a new revision: compiled once again, and only then
    r = await admin.patch(f"/admin/templates/{tpl['id']}", json={"body": "Hi {{ 1 + 1 }}"})
    assert r.status_code == 200, r.text
    await guests(admin, ev["id"], 4, start=6)
    assert (await run(api, BEGIN - timedelta(minutes=30), batch=2, p=p)).sent == 4
    assert compiles.count == 2
    assert compiles.locked == [0, 0]  # no scheduler row was locked while compiling
    assert all(name.startswith("template-check") for name in compiles.threads)
    async with api.pool.acquire() as conn:
        bodies = await conn.fetch("SELECT DISTINCT body FROM event.outbox_messages")
    assert sorted(b["body"] for b in bodies) == [
        *(f"Hello Guest {i}" for i in range(6)),
        "Hi 2",
    ]


async def test_the_dispatcher_compiles_its_template_before_claiming_receipts(
    api: Api, admin, monkeypatch
):
    compiles = Compiles(api.pool, monkeypatch)
    ev = await make_event(admin)
    await guests(admin, ev["id"], 5)
    tpl = await new_template(admin)
    r = await admin.put(
        "/admin/trigger-templates/event_rescheduled", json={"template_id": tpl["id"]}
    )
    assert r.status_code == 200, r.text
    r = await admin.post(
        f"/admin/events/{ev['id']}/operations",
        json={
            "kind": "reschedule",
            "params": {
                "date_begin": "2027-06-01T08:00:00+00:00",
                "date_end": "2027-06-02T16:00:00+00:00",
            },
        },
    )
    assert r.status_code == 201, r.text
    op = r.json()
    r = await admin.post(
        f"/admin/operations/{op['id']}/start", headers={"If-Match": str(op["revision"])}
    )
    assert r.status_code == 202, r.text
    while r.json()["state"] != "completed":
        r = await admin.post(f"/admin/operations/{op['id']}/resume")
        assert r.status_code == 200, r.text
    from events_svc.verbs.dispatch import run_dispatch_pass
    from events_svc.verbs.mail import PassOptions

    options = PassOptions(batch=2, cap=1000, default_sender="events@example.org")
    summary = await run_dispatch_pass(api.pool, ports(api.pool), options, datetime.now(UTC))
    assert summary.sent == 5
    assert compiles.count == 1 and compiles.locked == [0]
    assert all(name.startswith("template-check") for name in compiles.threads)


async def test_a_stored_template_over_the_limits_fails_its_line_quickly(api: Api, admin):
    """A template stored before the limits existed is refused by the renderer, fast, as
    the line's render_failed; the pass goes on."""
    ev = await make_event(admin)
    tpl = await new_template(admin)
    assert (await admin.post("/admin/mails", json=line(ev["id"], tpl["id"]))).status_code == 201
    await guests(admin, ev["id"], 1)
    async with api.pool.acquire() as conn:
        await conn.execute(
            "UPDATE event.message_templates SET body = $2, revision = revision + 1 WHERE id = $1",
            uuid.UUID(tpl["id"]),
            PLUS_CHAINS,
        )
    started = time.monotonic()
    summary = await run(api, BEGIN - timedelta(hours=1))
    assert time.monotonic() - started < 5.0
    assert (summary.sent, summary.failures) == (0, {"render_failed": 1})
    view = (await admin.get("/admin/mails", params={"event_id": ev["id"]})).json()["items"][0]
    assert view["error_kind"] == "render_failed"
    assert "TemplateTooComplex" in view["error_detail"]


async def test_an_event_keeps_its_company_while_its_lines_use_that_companys_templates(
    api: Api, admin
):
    """Moving an event to another company, or making it shared, would hand its lines (and
    the company's texts, which it still edits) to other attendees: refused until the lines
    use templates the new company may use."""
    platform = await new_template(admin)
    async with client(api, "*", company=A) as a:
        mine = await new_template(a)
        ev = await make_event(a)
        made = await a.post("/admin/mails", json=line(ev["id"], mine["id"]))
        assert made.status_code == 201, made.text
        for who, company in ((a, None), (admin, str(B))):
            r = await who.patch(f"/admin/events/{ev['id']}", json={"company_id": company})
            assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_in_company")
            assert r.json()["error"]["field"] == "company_id"
        assert (await a.get(f"/admin/events/{ev['id']}")).json()["company_id"] == str(A)
        moved = await a.patch(
            f"/admin/mails/{made.json()['id']}", json={"template_ref": platform["id"]}
        )
        assert moved.status_code == 200, moved.text
        r = await a.patch(f"/admin/events/{ev['id']}", json={"company_id": None})
        assert r.status_code == 200, r.text
        assert r.json()["company_id"] is None
