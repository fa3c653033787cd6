"""Probes over the whole console: sign-in in a real browser at both sizes (JavaScript on
and off), the error states (denied, unavailable, not found), every route refused without
a session or a CSRF token, the page headers on every answer, and a host's own actor."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts

from events_svc import create_app
from events_svc.actors import Actor
from events_svc.console.session import COOKIE
from events_svc.settings import Settings
from tests.probes.test_studio_security import client, csrf_of

SIZES = ("desktop", "phone")


def console_routes(app: Any) -> list[tuple[str, str]]:
    """(method, path) of every console page, from the mounted sub-app itself."""
    mounted = next(r for r in app.routes if getattr(r, "path", "") == "/studio")
    found = []
    for context in iter_route_contexts(mounted.app.routes):
        route = context.route
        for method in sorted(getattr(route, "methods", None) or ()):
            if method != "HEAD":
                found.append((method, route.path))
    return found


def concrete(path: str) -> str:
    """A route's path with every parameter filled by an id that names nothing."""
    parts = []
    for part in path.split("/"):
        parts.append(str(uuid.uuid4()) if part.startswith("{") else part)
    return "/".join(parts)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("js", [True, False])
async def test_sign_in_and_out_in_a_browser(studio: Any, size: str, js: bool) -> None:
    page = await studio.anonymous(size=size, js=js)
    await page.goto(studio.url("/events"))
    assert "/studio/sign-in" in page.url  # no session: the sign-in page, remembering where
    suffix = f"{size}{'' if js else '-nojs'}"
    await studio.shot(page, f"sign-in-{suffix}")
    await page.fill("#field-token", "evt_not-a-token")
    await page.click("button[type=submit]")
    assert "The token is unknown or revoked." in await page.inner_text("#error-summary")
    await studio.shot(page, f"sign-in-refused-{suffix}")
    await page.fill("#field-token", await studio.token("event:read"))
    await page.click("button[type=submit]")
    assert page.url.endswith("/studio/events?done=signed_in")
    assert "You are signed in." in await page.inner_text("main")
    await page.click("text=Sign out")
    assert "/studio/sign-in" in page.url
    assert "You are signed out." in await page.inner_text("main")


@pytest.mark.parametrize("size", SIZES)
async def test_the_denied_page_names_the_missing_scope(studio: Any, size: str) -> None:
    page = await studio.open("registration:read", size=size)
    response = await page.goto(studio.url("/events"))
    assert response is not None and response.status == 403
    text = await studio.shot(page, f"error-denied-{size}")
    assert "event:read" in text and "missing_scope" in text


@pytest.mark.parametrize("size", SIZES)
async def test_the_unavailable_page_when_the_database_is_away(
    studio: Any, app: Any, size: str
) -> None:
    page = await studio.open("event:read", size=size)
    ctx = app.state.events
    pool, ctx.pool = ctx.pool, None
    try:
        response = await page.goto(studio.url("/events"))
    finally:
        ctx.pool = pool
    assert response is not None and response.status == 503
    text = await studio.shot(page, f"error-unavailable-{size}")
    assert "database_unavailable" in text or "Unavailable" in text


@pytest.mark.parametrize("size", SIZES)
async def test_the_not_found_page(studio: Any, size: str) -> None:
    page = await studio.open("*", size=size)
    response = await page.goto(studio.url(f"/events/{uuid.uuid4()}"))
    assert response is not None and response.status == 404
    text = await studio.shot(page, f"error-not-found-{size}")
    assert "not_found" in text
    response = await page.goto(studio.url("/registrations/not-an-id"))
    assert response is not None and response.status == 404


async def test_every_page_needs_a_session_and_every_form_its_csrf(app: Any, pool: Any) -> None:
    routes = console_routes(app)
    assert len(routes) > 20, routes
    before = await pool.fetchval("SELECT count(*) FROM event.event_audit_log")
    async with client(app) as c:
        for method, path in routes:
            if path.startswith("/sign-") or path == "/":
                continue
            answer = await c.request(method, concrete(path), data={"reason": "x"})
            if method == "GET":
                assert answer.status_code == 303, (method, path, answer.status_code)
                assert "/studio/sign-in" in answer.headers["location"]
            else:  # a form without the CSRF token is refused before anything runs
                assert answer.status_code in (303, 403), (method, path, answer.status_code)
    assert await pool.fetchval("SELECT count(*) FROM event.event_audit_log") == before


async def test_every_page_is_private_and_framed(app: Any, api: Any) -> None:
    """no-store, noindex and the CSP on every answer of every route, signed in or not."""
    token = (await api.token("*"))["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        csrf = await csrf_of(c, "/sign-in")
        checked = 0
        for method, path in [*console_routes(app), ("GET", "/static/studio.css")]:
            if path == "/sign-out":
                continue
            answer = await c.request(method, concrete(path), data={"csrf_token": csrf})
            assert answer.status_code < 500, (method, path, answer.status_code)
            assert answer.headers["cache-control"] == "no-store", path
            assert answer.headers["x-robots-tag"] == "noindex", path
            assert "default-src 'self'" in answer.headers["content-security-policy"], path
            assert answer.headers["x-frame-options"] == "DENY", path
            checked += 1
    assert checked > 20


async def test_a_host_actor_drives_the_console_without_sign_in(
    settings: Settings, pool: Any
) -> None:
    """A host composing the app with its own actor dependency: the console uses it (no
    token, no sign-in), its scopes decide, and forms still need the CSRF token."""

    async def host_actor(request: Any) -> Actor:
        if request.headers.get("x-host-user") != "ops":
            from events_svc import errors

            raise errors.Unauthenticated("The host did not sign this user in.")
        return Actor(id="host:ops", kind="host", scopes=frozenset({"event:read"}), name="Ops")

    app = create_app(settings, actor_dependency=host_actor)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://test/studio",
            headers={"x-host-user": "ops"},
        ) as c:
            listed = await c.get("/events")
            assert listed.status_code == 200
            assert "Ops" in listed.text and "Sign out" not in listed.text
            denied = await c.get("/registrations")
            assert denied.status_code == 403 and "registration:read" in denied.text
            assert COOKIE in listed.headers["set-cookie"]  # the CSRF secret's session
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test/studio"
        ) as stranger:
            refused = await stranger.get("/events")
            assert refused.status_code == 401
