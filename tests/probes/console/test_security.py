"""The console's security: the session cookie's flags (`Secure` by the setting, not the
scheme), a forged cookie or one signed with another secret refused, CSRF on every form,
the page headers on every answer, and the server-side session: one row per sign-in,
ended by sign-out (a copied cookie is refused), by revoking its token, and after 12 h
idle; never the token or the session key in clear."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import httpx

from events_svc import create_app
from events_svc.console.session import COOKIE, IDLE_S, Session, SessionCodec
from events_svc.settings import Settings
from events_svc.verbs.tokens import (
    CONSOLE_IDLE,
    SESSION_RETENTION,
    create_token,
    revoke_token,
    start_console_session,
)
from tests.probes.console.kit import client, code_of, console_of, csrf_of
from tests.probes.helpers import make_event, register


async def test_sign_in_page_carries_the_headers_and_a_strict_cookie(app: Any) -> None:
    async with client(app) as c:
        page = await c.get("/sign-in")
    assert page.status_code == 200
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-robots-tag"] == "noindex"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    cookie = page.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/studio" in cookie
    assert f"Max-Age={IDLE_S}" in cookie
    assert "Secure" not in cookie  # the service listens on loopback here (below)


async def test_a_wrong_token_is_refused_on_the_form(app: Any) -> None:
    async with client(app) as c:
        csrf = await csrf_of(c)
        answer = await c.post("/sign-in", data={"token": "evt_nope", "csrf_token": csrf})
    assert answer.status_code == 401
    assert 'href="#field-token"' in answer.text  # the error summary links the field
    assert "evt_nope" not in answer.text


async def test_csrf_missing_or_wrong_is_refused(app: Any, api: Any) -> None:
    headers = await api.token("event:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        await c.get("/sign-in")
        missing = await c.post("/sign-in", data={"token": token})
        wrong = await c.post("/sign-in", data={"token": token, "csrf_token": "x" * 43})
    for answer in (missing, wrong):
        assert answer.status_code == 403
        assert "csrf_failed" in answer.text
        assert COOKIE in answer.headers["set-cookie"]


async def test_csrf_of_another_session_is_refused(app: Any, api: Any) -> None:
    headers = await api.token("event:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as theirs, client(app) as ours:
        their_csrf = await csrf_of(theirs)
        await ours.get("/sign-in")
        answer = await ours.post("/sign-in", data={"token": token, "csrf_token": their_csrf})
    assert answer.status_code == 403


async def test_forged_and_foreign_cookies_are_no_session(app: Any, api: Any) -> None:
    headers = await api.token("*")
    token_id = (await api.pool.fetchval("SELECT id FROM event.api_tokens LIMIT 1")) or ""
    del headers
    foreign = SessionCodec(["another-secret-of-32-characters!!"]).dump(
        Session(key=str(token_id), csrf="c" * 43)
    )
    for value in (foreign, "eyJ0Ijoi.forged.signature", "x" * 5000):
        async with client(app, cookies={COOKIE: value}) as c:
            answer = await c.get("/events")
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/studio/sign-in")


async def test_a_revoked_token_ends_the_session(app: Any, api: Any, admin: Any) -> None:
    headers = await api.token("event:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        token_id = await api.pool.fetchval(
            "SELECT id FROM event.api_tokens WHERE name = 'probe' ORDER BY created_at DESC LIMIT 1"
        )
        await api.pool.execute(
            "UPDATE event.api_tokens SET revoked_at = now() WHERE id = $1", token_id
        )
        answer = await c.get("/events")
    assert answer.status_code == 303
    assert "/sign-in" in answer.headers["location"]


async def test_sign_out_needs_its_csrf_and_clears_the_session(app: Any, api: Any) -> None:
    headers = await api.token("event:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        fresh = await csrf_of(c)
        refused = await c.post("/sign-out", data={})
        assert refused.status_code == 403
        out = await c.post("/sign-out", data={"csrf_token": fresh})
        assert out.status_code == 303
        after = await c.get("/events")
    assert after.status_code == 303
    assert "/sign-in" in after.headers["location"]


async def test_a_console_404_is_a_page_with_the_headers(app: Any) -> None:
    async with client(app) as c:
        answer = await c.get("/no-such-page")
    assert answer.status_code == 404
    assert "not_found" in answer.text
    assert answer.headers["cache-control"] == "no-store"
    assert "default-src 'self'" in answer.headers["content-security-policy"]


# --- the server-side session ----------------------------------------------------------


def token_of(headers: dict[str, str]) -> str:
    return headers["Authorization"].removeprefix("Bearer ")


async def signed_in(c: httpx.AsyncClient, token: str) -> str:
    """Sign `c` in with `token`; the cookie it now holds (to copy into another client)."""
    csrf = await csrf_of(c)
    answer = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
    assert answer.status_code == 303, answer.status_code
    assert (await c.get("/events")).status_code == 200
    return c.cookies[COOKIE]


async def opens(app: Any, cookie: str) -> bool:
    """Whether a browser holding only `cookie` reaches a signed-in page."""
    async with client(app, cookies={COOKIE: cookie}) as c:
        answer = await c.get("/events")
    if answer.status_code == 303:
        assert answer.headers["location"].startswith("/studio/sign-in")
        return False
    assert answer.status_code == 200, answer.status_code
    return True


async def codec_of(pool: Any) -> SessionCodec:
    return SessionCodec([await pool.fetchval("SELECT secret FROM event.console_secret")])


def clock_of(app: Any, start: datetime) -> Callable[[timedelta], None]:
    """Drive the service's clock (the console shares the API's context): `move(d)` puts
    it at `start + d`."""
    ctx = app.state.events
    now = [start]
    ctx.clock = lambda: now[0]

    def move(offset: timedelta) -> None:
        now[0] = start + offset

    return move


async def test_the_cookie_carries_a_session_key_never_the_token(app: Any, api: Any) -> None:
    """The cookie names a session row by a random key; the row keeps only the key's
    sha256 and the token's id; neither the token nor the key is stored in clear."""
    token = token_of(await api.token("event:read"))
    async with client(app) as c:
        csrf = await csrf_of(c)
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        assert signed.headers["location"] == "/studio/events?done=signed_in"
        raw = c.cookies[COOKIE]
        assert token not in raw and token[4:20] not in raw
        # the CSRF secret rotated at sign-in
        assert await csrf_of(c, "/sign-in") != csrf
    session = (await codec_of(api.pool)).load(raw)
    assert session is not None and session.key is not None
    rows = await api.pool.fetch("SELECT * FROM event.console_sessions")
    assert len(rows) == 1
    row = dict(rows[0])
    assert row["key_hash"] == hashlib.sha256(session.key.encode()).digest()
    assert row["ended_at"] is None
    assert row["token_id"] == await api.pool.fetchval("SELECT id FROM event.api_tokens")
    assert session.key not in str(row) and token not in str(row)


async def test_a_validly_signed_cookie_without_its_row_is_no_session(
    app: Any, api: Any, pool: Any
) -> None:
    """A signature alone opens nothing any more: a cookie signed with the console's own
    secret (who holds the secret, e.g. a database read) but naming no session row, or a
    live token's id as the old stateless cookie did, is the sign-in page."""
    await api.token("*")
    token_id = await pool.fetchval("SELECT id FROM event.api_tokens")
    codec = await codec_of(pool)
    for key in ("k" * 43, str(token_id)):
        assert not await opens(app, codec.dump(Session(key=key, csrf="c" * 43)))


async def test_a_copied_cookie_is_refused_after_sign_out(app: Any, api: Any, pool: Any) -> None:
    """The attack: copy the operator's cookie, wait for sign-out, replay the copy."""
    token = token_of(await api.token("event:read"))
    async with client(app) as c:
        copied = await signed_in(c, token)
        assert await opens(app, copied)  # the copy works while the session lives
        out = await c.post("/sign-out", data={"csrf_token": await csrf_of(c)})
        assert out.status_code == 303
        assert out.headers["location"] == "/studio/sign-in?done=signed_out"
        assert (await c.get("/events")).status_code == 303
    assert not await opens(app, copied)
    ended = await pool.fetchval("SELECT ended_at FROM event.console_sessions")
    assert ended is not None
    # the token itself still works: only that session ended
    assert (
        await api.client.get("/admin/events", headers={"Authorization": f"Bearer {token}"})
    ).status_code == 200


async def test_a_dead_sessions_cookie_forgets_its_key(app: Any, api: Any) -> None:
    """A refused cookie comes back without the dead key (same CSRF secret), so the
    browser stops sending it."""
    token = token_of(await api.token("event:read"))
    codec = await codec_of(api.pool)
    async with client(app) as c:
        copied = await signed_in(c, token)
        await c.post("/sign-out", data={"csrf_token": await csrf_of(c)})
    async with client(app, cookies={COOKIE: copied}) as c:
        answer = await c.get("/events")
    assert answer.status_code == 303
    before, after = codec.load(copied), codec.load(answer.cookies[COOKIE])
    assert before is not None and after is not None
    assert after.key is None and after.csrf == before.csrf


async def test_signing_in_again_ends_the_browsers_previous_session(app: Any, api: Any) -> None:
    first = token_of(await api.token("event:read"))
    second = token_of(await api.token("event:read", "registration:read"))
    async with client(app) as c:
        copied = await signed_in(c, first)
        now = await signed_in(c, second)
    assert not await opens(app, copied)
    assert await opens(app, now)


async def test_revoking_the_token_ends_its_console_sessions(app: Any, api: Any, pool: Any) -> None:
    """Company A's token is revoked: both of its sessions (two browsers) end in the
    revocation's transaction; company B's session of its own token goes on."""
    acme, globex = UUID(int=1), UUID(int=2)
    a_token, a_row = await create_token(pool, "acme", ["event:read"], acme, datetime.now(UTC))
    b_token = token_of(await api.token("event:read", company=globex))
    async with client(app) as one, client(app) as two, client(app) as theirs:
        a_one, a_two = await signed_in(one, a_token), await signed_in(two, a_token)
        b_cookie = await signed_in(theirs, b_token)
    revoked = await revoke_token(pool, a_row["id"], datetime.now(UTC))
    assert revoked["console_sessions_ended"] == 2
    live = await pool.fetch("SELECT token_id FROM event.console_sessions WHERE ended_at IS NULL")
    assert [r["token_id"] for r in live] != [] and a_row["id"] not in {r["token_id"] for r in live}
    assert not await opens(app, a_one) and not await opens(app, a_two)
    assert await opens(app, b_cookie)
    # revoking again is idempotent and ends nothing more
    again = await revoke_token(pool, a_row["id"], datetime.now(UTC))
    assert again["console_sessions_ended"] == 0 and again["revoked_at"] == revoked["revoked_at"]


async def test_a_sign_in_racing_the_revocation_leaves_no_live_session(pool: Any) -> None:
    """Sign-ins and the token's revocation at once, on their own connections: every
    session made from the token is ended, whichever committed first."""
    token, row = await create_token(pool, "race", ["event:read"], None, datetime.now(UTC))
    now = datetime.now(UTC)
    results = await asyncio.gather(
        *(start_console_session(pool, token, now) for _ in range(3)),
        revoke_token(pool, row["id"], now),
        *(start_console_session(pool, token, now) for _ in range(3)),
    )
    made = [r for r in results if isinstance(r, str)]
    count = await pool.fetchval("SELECT count(*) FROM event.console_sessions")
    assert count == len(made)
    live = await pool.fetchval("SELECT count(*) FROM event.console_sessions WHERE ended_at IS NULL")
    assert live == 0
    assert await start_console_session(pool, token, now) is None


async def test_a_session_idle_for_12_hours_is_over_and_less_is_renewed(
    app: Any, api: Any, pool: Any
) -> None:
    """Time moves by the service's clock: a request 12 h less a minute after the last
    one renews the session (last_seen_at), so another 12 h less a minute later it still
    opens; 12 h and a minute of silence end it, and it stays over."""
    move = clock_of(app, datetime.now(UTC))
    token = token_of(await api.token("event:read"))
    async with client(app) as c:
        cookie = await signed_in(c, token)
    almost = CONSOLE_IDLE - timedelta(minutes=1)
    move(almost)
    assert await opens(app, cookie)
    seen = await pool.fetchval("SELECT last_seen_at FROM event.console_sessions")
    assert seen == app.state.events.clock()
    move(almost * 2)
    assert await opens(app, cookie)  # renewed at `almost`: idle less than 12 h
    move(almost * 2 + CONSOLE_IDLE + timedelta(minutes=1))
    assert not await opens(app, cookie)
    move(almost * 2 + CONSOLE_IDLE * 3)
    assert not await opens(app, cookie)


async def test_a_session_idle_exactly_12_hours_is_over(app: Any, api: Any) -> None:
    move = clock_of(app, datetime.now(UTC))
    token = token_of(await api.token("event:read"))
    async with client(app) as c:
        cookie = await signed_in(c, token)
    move(CONSOLE_IDLE)
    assert not await opens(app, cookie)


async def test_last_seen_is_written_at_most_once_a_minute(app: Any, api: Any, pool: Any) -> None:
    start = datetime.now(UTC)
    move = clock_of(app, start)
    token = token_of(await api.token("event:read"))
    async with client(app) as c:
        await signed_in(c, token)
        for offset, expected in ((30, 0), (59, 0), (61, 61), (90, 61), (122, 122)):
            move(timedelta(seconds=offset))
            assert (await c.get("/events")).status_code == 200
            seen = await pool.fetchval("SELECT last_seen_at FROM event.console_sessions")
            assert seen == start + timedelta(seconds=expected), offset


async def test_sessions_unseen_for_30_days_are_deleted_at_a_later_sign_in(
    app: Any, api: Any, pool: Any
) -> None:
    """Ended and idle rows stay (who was signed in when) until unseen for 30 days; the
    next sign-in deletes them; a live session is never touched."""
    token = token_of(await api.token("event:read"))
    async with client(app) as old, client(app) as recent, client(app) as live:
        await signed_in(old, token)
        await signed_in(recent, token)
        live_cookie = await signed_in(live, token)
        await recent.post("/sign-out", data={"csrf_token": await csrf_of(recent)})
    rows = await pool.fetch("SELECT id FROM event.console_sessions ORDER BY created_at")
    old_id, recent_id, live_id = (r["id"] for r in rows)
    now = datetime.now(UTC)
    await pool.execute(
        "UPDATE event.console_sessions SET created_at = $2, last_seen_at = $2 WHERE id = $1",
        old_id,
        now - SESSION_RETENTION - timedelta(minutes=1),
    )
    await pool.execute(
        "UPDATE event.console_sessions SET created_at = $2, last_seen_at = $2 WHERE id = $1",
        recent_id,
        now - SESSION_RETENTION + timedelta(hours=1),
    )
    async with client(app) as c:
        await signed_in(c, token)
    left = {r["id"] for r in await pool.fetch("SELECT id FROM event.console_sessions")}
    assert old_id not in left and {recent_id, live_id} <= left and len(left) == 3
    assert await opens(app, live_cookie)


# --- Secure: the setting decides, not the request's scheme -----------------------------


@asynccontextmanager
async def console_under(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The service built with `settings`, a console client on it over plain http (what
    the service sees behind a TLS-terminating proxy)."""
    application = create_app(settings)
    async with application.router.lifespan_context(application), client(application) as c:
        yield c


async def test_the_cookie_is_secure_by_the_setting_behind_a_plain_http_proxy(
    settings: Settings,
) -> None:
    """Behind a proxy that ends TLS and speaks http to the service, the scheme says http:
    EVENTS_CONSOLE_SECURE_COOKIE=true still sets Secure, and so does listening on a
    non-loopback address by default."""
    env = {"EVENTS_CONSOLE_SECURE_COOKIE": "true"}
    on = replace(settings, console_secure_cookie=Settings.from_env(env).console_secure_cookie)
    public = replace(settings, host="0.0.0.0")
    for chosen in (on, public):
        async with console_under(chosen) as c:
            page = await c.get("/sign-in", headers={"X-Forwarded-Proto": "https"})
        assert page.status_code == 200
        assert "; Secure" in page.headers["set-cookie"], chosen.host


async def test_the_cookie_is_not_secure_on_loopback_by_default_or_when_set_off(
    settings: Settings,
) -> None:
    """`make run` on 127.0.0.1 over plain http keeps working (no Secure); set off, the
    flag stays off even for a request that came over https: the setting alone decides."""
    assert settings.host == "127.0.0.1" and settings.console_secure_cookie is None
    off = replace(
        settings,
        host="0.0.0.0",
        console_secure_cookie=Settings.from_env(
            {"EVENTS_CONSOLE_SECURE_COOKIE": "false"}
        ).console_secure_cookie,
    )
    async with console_under(settings) as c:
        assert "Secure" not in (await c.get("/sign-in")).headers["set-cookie"]
    application = create_app(off)
    async with (
        application.router.lifespan_context(application),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=application), base_url="https://test/studio"
        ) as c,
    ):
        assert "Secure" not in (await c.get("/sign-in")).headers["set-cookie"]


async def test_in_a_browser_a_copied_cookie_stops_working_at_sign_out(studio: Any) -> None:
    """The attack in chromium against a real uvicorn: the operator's cookie is copied
    into a second browser; the operator signs out with the button; the second browser's
    next page is the sign-in page."""
    page = await studio.open("event:read")
    assert "/studio/events" in page.url
    cookies = [c for c in await page.context.cookies() if c["name"] == COOKIE]
    assert len(cookies) == 1 and cookies[0]["httpOnly"] and not cookies[0]["secure"]
    thief = await studio.anonymous()
    await thief.context.add_cookies(cookies)
    await thief.goto(studio.url("/events"))
    assert "/studio/events" in thief.url  # the copy works while the session lives
    async with page.expect_navigation():
        await page.get_by_role("button", name="Sign out").click()
    assert "/studio/sign-in" in page.url
    await thief.goto(studio.url("/events"))
    assert "/studio/sign-in" in thief.url
    await studio.shot(thief, "security-copied-cookie-after-sign-out")


async def test_a_cookie_not_reissued_for_12_hours_fails_to_verify(app: Any, api: Any) -> None:
    """Besides its row, the cookie's own signature carries when it was issued: a live
    session's cookie signed 12 h and a minute ago is no session, one signed 12 h less a
    minute ago is."""
    import time
    from unittest.mock import patch

    import itsdangerous.timed

    token = token_of(await api.token("event:read"))
    codec = await codec_of(api.pool)
    async with client(app) as c:
        session = codec.load(await signed_in(c, token))
    assert session is not None
    for age, live in ((IDLE_S + 60, False), (IDLE_S - 60, True)):
        with patch.object(itsdangerous.timed.time, "time", return_value=time.time() - age):
            cookie = codec.dump(session)
        assert await opens(app, cookie) is live, age


async def test_the_correction_form_refuses_control_characters_beside_the_field(
    api: Any, admin: httpx.AsyncClient
) -> None:
    """A name with a control character is refused by the console's correction form as by
    the API (the model they share), shown again without it, and nothing is written."""
    event = await make_event(admin)
    rid = await register(admin, event["id"], "Grace")
    async with console_of(api, "*") as (c, csrf):
        refused = await c.post(
            f"/registrations/{rid}/correct",
            data={"csrf_token": csrf, "reason": "typo", "name": "Grace\x1b[2JHopper"},
        )
        assert refused.status_code == 422, refused.text[:500]
        assert "invalid_characters" in code_of(refused.text)
        assert "\x1b" not in refused.text and 'value="Grace[2JHopper"' in refused.text
    row = await api.pool.fetchrow(
        "SELECT name, version FROM event.registrations WHERE id = $1", UUID(rid)
    )
    assert (row["name"], row["version"]) == ("Grace", 1)
