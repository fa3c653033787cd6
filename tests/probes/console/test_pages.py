"""Probes over the whole console: sign-in in a real browser at both sizes (JavaScript on
and off), the error states (denied, unavailable, not found), every route refused without
a session or a CSRF token, the page headers on every answer, and a host's own actor."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException

from events_svc import create_app
from events_svc.actors import Actor
from events_svc.console.session import COOKIE
from events_svc.settings import Settings
from tests.probes.console.kit import SHOTS, client, csrf_of

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
    assert "database_unavailable" in text and "Nothing was changed" in text


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


async def test_every_form_refuses_a_missing_or_foreign_csrf_token(
    app: Any, api: Any, pool: Any
) -> None:
    """Signed in with every scope, each console POST without the session's CSRF token, or
    with another session's, is 403 csrf_failed, and nothing is written."""
    token = (await api.token("*"))["Authorization"].removeprefix("Bearer ")
    posts = [path for method, path in console_routes(app) if method == "POST"]
    assert len(posts) >= 20, posts
    before = await pool.fetchval("SELECT count(*) FROM event.event_audit_log")
    async with client(app) as c, client(app) as other:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        foreign = await csrf_of(other)
        for path in posts:
            if path.startswith("/sign-"):
                continue
            for sent in ({}, {"csrf_token": foreign}):
                answer = await c.post(concrete(path), data={"reason": "x", **sent})
                assert answer.status_code == 403, (path, answer.status_code)
                assert "csrf_failed" in answer.text, path
    assert await pool.fetchval("SELECT count(*) FROM event.event_audit_log") == before


async def test_a_nul_in_any_query_is_a_422_page(app: Any, api: Any) -> None:
    token = (await api.token("*"))["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        for path in ("/events?q=%00", "/registrations?q=a%00", "/desk?event_id=%00"):
            answer = await c.get(path)
            assert answer.status_code == 422, (path, answer.status_code)
            assert "validation_failed" in answer.text


async def test_console_use_records_the_token_as_used(app: Any, api: Any, pool: Any) -> None:
    """A token used only through the console does not look unused (last_used_at)."""
    token = (await api.token("event:read"))["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        await pool.execute("UPDATE event.api_tokens SET last_used_at = NULL")
        assert (await c.get("/events")).status_code == 200
    assert await pool.fetchval("SELECT count(last_used_at) FROM event.api_tokens") == 1


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
        user = request.headers.get("x-host-user")
        if user == "teapot":  # a host refusing with its own HTTPException keeps its status
            raise StarletteHTTPException(418, "The host refuses.", headers={"Retry-After": "5"})
        if user is None:  # the host sends a stranger to its own sign-in page
            raise StarletteHTTPException(307, headers={"Location": "/host/login"})
        if user != "ops":
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
            teapot = await c.get("/events", headers={"x-host-user": "teapot"})
            assert teapot.status_code == 418 and "http_error" in teapot.text
            assert teapot.headers["retry-after"] == "5"
            assert COOKIE in listed.headers["set-cookie"]  # the CSRF secret's session
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test/studio"
        ) as stranger:
            sent = await stranger.get("/events")
            assert sent.status_code == 307 and sent.headers["location"] == "/host/login"
            refused = await stranger.get("/events", headers={"x-host-user": "someone"})
            assert refused.status_code == 401


async def _populated(admin: Any) -> tuple[str, str]:
    """An event with two tickets, attendees (one with a phone) and a draft hold; the ids of
    the event and of one registration."""
    from tests.probes.helpers import add_ticket, make_event, register

    event = await make_event(admin, name="PyCon Lisbon", seats_max=120, location="Lisbon")
    standard = await add_ticket(admin, event["id"], name="Standard", seats_max=8)
    await add_ticket(admin, event["id"], name="Speaker", seats_max=4)
    first = await register(admin, event["id"], "Ada")
    for name in ("Grace", "Linus", "Barbara", "Edsger", "Margaret"):
        body = {"event_id": event["id"], "name": name, "event_ticket_id": standard["id"]}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    body = {"event_id": event["id"], "name": "Ken Thompson", "phone": "+44 20 7946 0958"}
    assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    assert (await admin.post(f"/admin/events/{event['id']}/publish")).status_code == 200
    return str(event["id"]), first


def _pages(event_id: str, registration_id: str) -> list[tuple[str, str]]:
    return [
        ("events", "/events"),
        ("event", f"/events/{event_id}"),
        ("schedulers", f"/events/{event_id}/schedulers"),
        ("attendance", f"/events/{event_id}/attendance"),
        ("export", f"/events/{event_id}/export"),
        ("operations", f"/events/{event_id}/operations"),
        ("registrations", f"/registrations?event_id={event_id}"),
        ("registration", f"/registrations/{registration_id}"),
        ("desk", f"/desk?event_id={event_id}"),
        ("outbox", f"/outbox?event_id={event_id}"),
        ("templates", "/templates"),
    ]


# the form controls a page shows without a label (a <label for>, a wrapping label, or an
# aria-label); buttons name themselves by their text
UNLABELLED = """() => Array.from(document.querySelectorAll(
    "input:not([type=hidden]):not([type=submit]), select, textarea"))
  .filter(el => el.labels.length === 0 && !el.getAttribute("aria-label"))
  .map(el => el.name || el.id)"""


async def test_every_page_reflows_at_200_percent_zoom(studio: Any, admin: Any) -> None:
    """200% zoom of a 1440x900 window is a 720x450 CSS viewport at twice the pixels: no page
    scrolls sideways there (nor at 390 px, which every `shot` checks), and every form
    control of every page has a label."""
    event_id, registration_id = await _populated(admin)
    token = await studio.token("*")
    context = await studio.browser.new_context(
        viewport={"width": 720, "height": 450}, device_scale_factor=2
    )
    studio.contexts.append(context)
    page = await context.new_page()
    await page.goto(studio.url("/sign-in"))
    await page.fill("#field-token", token)
    await page.click("button[type=submit]")
    for name, path in _pages(event_id, registration_id):
        response = await page.goto(studio.url(path))
        assert response is not None and response.status == 200, (path, response)
        await studio.shot(page, f"zoom200-{name}")
        unlabelled = await page.evaluate(UNLABELLED)
        assert unlabelled == [], (path, unlabelled)


async def test_the_readme_screenshot(studio: Any, admin: Any) -> None:
    """The console as the README shows it (docs/console-1440x900.png is a copy of this
    capture): an event's detail with its seat gauges, at 1440x900."""
    event_id, _ = await _populated(admin)
    page = await studio.open("*", size="desktop")
    await page.goto(studio.url(f"/events/{event_id}"))
    await studio.shot(page, "readme-event-detail")
    await page.screenshot(path=str(SHOTS / "readme-console-1440x900.png"))
