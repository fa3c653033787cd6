"""Actors: bearer tokens, scopes, revocation, the company fence, a host's own auth."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import httpx
from fastapi import FastAPI, Request

from events_svc import create_app
from events_svc.actors import Actor
from events_svc.errors import Unauthenticated
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token, revoke_token
from tests.probes.helpers import Api, event_body


async def test_admin_routes_need_a_valid_bearer_token(api: Api):
    r = await api.client.get("/admin/events")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"
    assert r.headers["www-authenticate"] == "Bearer"
    r = await api.client.get("/admin/events", headers={"Authorization": "Bearer evt_nope"})
    assert r.status_code == 401
    r = await api.client.get("/admin/events", headers={"Authorization": "Basic abc"})
    assert r.status_code == 401


async def test_missing_scope_is_403_naming_the_scope(api: Api):
    reader = await api.token("event:read")
    assert (await api.client.get("/admin/events", headers=reader)).status_code == 200
    r = await api.client.post("/admin/events", json=event_body(), headers=reader)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "missing_scope"
    assert r.json()["error"]["scope"] == "event:write"
    writer = await api.token("event:read", "event:write")
    ev = (await api.client.post("/admin/events", json=event_body(), headers=writer)).json()
    r = await api.client.delete(f"/admin/events/{ev['id']}", headers=writer)
    assert r.status_code == 403 and r.json()["error"]["scope"] == "event:delete"


async def test_a_revoked_token_stops_working(api: Api):
    token, row = await create_token(api.pool, "ci", ["*"], None, datetime.now(UTC))
    headers = {"Authorization": f"Bearer {token}"}
    assert (await api.client.get("/admin/events", headers=headers)).status_code == 200
    await revoke_token(api.pool, row["id"], datetime.now(UTC))
    r = await api.client.get("/admin/events", headers=headers)
    assert r.status_code == 401
    async with api.pool.acquire() as conn:
        stored = await conn.fetchrow("SELECT * FROM event.api_tokens WHERE id = $1", row["id"])
    assert token not in str(dict(stored)) and stored["last_used_at"] is not None


async def test_unknown_scopes_are_refused_at_mint(api: Api):
    try:
        await create_token(api.pool, "x", ["event:everything"], None, datetime.now(UTC))
    except Exception as exc:
        assert getattr(exc, "code", "") == "validation_failed"
    else:
        raise AssertionError("an unknown scope was accepted")


async def test_company_fence_hides_other_companies_behind_404(api: Api):
    acme, globex = uuid.uuid4(), uuid.uuid4()
    a = await api.token("*", company=acme)
    g = await api.token("*", company=globex)
    operator = await api.token("*")
    mine = (await api.client.post("/admin/events", json=event_body(name="Acme"), headers=a)).json()
    assert mine["company_id"] == str(acme)  # defaults to the actor's company
    shared = await api.client.post(
        "/admin/events", json=event_body(name="Shared", company_id=None), headers=a
    )
    assert shared.json()["company_id"] is None
    r = await api.client.post("/admin/events", json=event_body(company_id=str(globex)), headers=a)
    assert r.status_code == 422 and r.json()["error"]["code"] == "company_not_allowed"
    for method, path in (("GET", ""), ("PATCH", ""), ("POST", "/publish"), ("DELETE", "")):
        kwargs = {"json": {"name": "x"}} if method == "PATCH" else {}
        r = await api.client.request(
            method, f"/admin/events/{mine['id']}{path}", headers=g, **kwargs
        )
        assert r.status_code == 404, (method, path)
    names = [e["name"] for e in (await api.client.get("/admin/events", headers=g)).json()["items"]]
    assert names == ["Shared"]
    r = await api.client.post(
        "/admin/tickets", json={"event_id": mine["id"], "name": "T"}, headers=g
    )
    assert r.status_code == 404
    everyone = (await api.client.get("/admin/events", headers=operator)).json()["items"]
    assert sorted(e["name"] for e in everyone) == ["Acme", "Shared"]


async def test_a_host_mounts_the_app_with_its_own_auth(settings: Settings, pool):
    async def host_actor(request: Request) -> Actor:
        if request.headers.get("x-host-user") != "alice":
            raise Unauthenticated()
        return Actor(id="host:alice", kind="host", scopes=frozenset({"*"}))

    events_app = create_app(settings, actor_dependency=host_actor)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with events_app.router.lifespan_context(events_app):
            yield

    host = FastAPI(lifespan=lifespan)

    @host.get("/")
    async def home() -> dict[str, str]:
        return {"host": "ok"}

    host.mount("/events", events_app)
    async with host.router.lifespan_context(host):
        transport = httpx.ASGITransport(app=host)
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as c:
            assert (await c.get("/")).json() == {"host": "ok"}
            path = "/events/api/v1/event/admin/events"
            assert (await c.get(path)).status_code == 401
            r = await c.post(path, json=event_body(), headers={"X-Host-User": "alice"})
            assert r.status_code == 201
            async with pool.acquire() as conn:
                actor = await conn.fetchval("SELECT actor_id FROM event.event_audit_log")
            assert actor == "host:alice"
            assert (await c.get("/events/readyz")).status_code == 200


def test_token_cli_prints_the_token_once_and_revokes(db_url: str):
    env = {**os.environ, "EVENTS_DATABASE_URL": db_url}
    cli = [sys.executable, "-m", "events_svc"]
    out = subprocess.run(
        [*cli, "token", "create", "--name", "deploy", "--scopes", "event:read,event:write"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    token = out.strip().splitlines()[-1]
    assert token.startswith("evt_") and len(token) > 40
    token_id = out.split()[2]
    listing = subprocess.run(
        [*cli, "token", "list"], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert token_id in listing and "live" in listing and token not in listing
    subprocess.run(
        [*cli, "token", "revoke", token_id], env=env, check=True, timeout=60, capture_output=True
    )
    listing = subprocess.run(
        [*cli, "token", "list"], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "revoked" in listing
    bad = subprocess.run(
        [*cli, "token", "create", "--name", "x", "--scopes", "nope"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and "validation_failed" in bad.stderr


async def test_the_cli_revoke_ends_the_tokens_console_sessions(api: Api, db_url: str):
    """`events-svc token revoke` (the verb `revoke_token`) ends the console sessions made
    from the token in its own transaction: the operator's cookie opens nothing after."""
    from tests.probes.console.kit import client, csrf_of

    token, row = await create_token(api.pool, "operator", ["event:read"], None, datetime.now(UTC))
    async with client(api.app) as c:
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": await csrf_of(c)})
        assert signed.status_code == 303
        assert (await c.get("/events")).status_code == 200
        env = {**os.environ, "EVENTS_DATABASE_URL": db_url}
        out = subprocess.run(
            [sys.executable, "-m", "events_svc", "token", "revoke", str(row["id"])],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "console sessions ended: 1" in out and token not in out
        after = await c.get("/events")
    assert after.status_code == 303 and "/sign-in" in after.headers["location"]
    ended = await api.pool.fetchval("SELECT ended_at FROM event.console_sessions")
    assert ended is not None
