"""The console's security: the session cookie's flags, a forged cookie or one signed with
another secret refused, CSRF on every form, the page headers on every answer, sign-in
and sign-out, and the token never kept in the cookie."""

from __future__ import annotations

from typing import Any

import httpx

from events_svc.console.session import COOKIE, IDLE_S, Session, SessionCodec
from tests.probes.console.kit import client, csrf_of


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
    assert "Secure" not in cookie  # plain HTTP here; over HTTPS the flag is set (below)


async def test_the_cookie_is_secure_over_https(app: Any) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://test/studio"
    ) as c:
        page = await c.get("/sign-in")
    assert "; Secure" in page.headers["set-cookie"]


async def test_sign_in_keeps_the_token_id_never_the_token(app: Any, api: Any) -> None:
    headers = await api.token("event:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        assert signed.headers["location"] == "/studio/events?done=signed_in"
        raw = c.cookies[COOKIE]
        assert token not in raw and token[4:20] not in raw
        # the CSRF secret rotated at sign-in
        assert await csrf_of(c, "/sign-in") != csrf


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
        Session(token_id=str(token_id), csrf="c" * 43)
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


async def test_a_session_idle_for_8_hours_is_over(app: Any, api: Any, pool: Any) -> None:
    """The cookie's signature carries when it was issued: one issued 8 h and a minute ago
    is no session; one issued 8 h less a minute ago still is, and comes back renewed."""
    import time
    from unittest.mock import patch

    import itsdangerous.timed

    await api.token("event:read")
    token_id = await pool.fetchval("SELECT id FROM event.api_tokens LIMIT 1")
    secret = await pool.fetchval("SELECT secret FROM event.console_secret")
    codec = SessionCodec([secret])
    session = Session(token_id=str(token_id), csrf="c" * 43)
    for age, signed_in in ((IDLE_S + 60, False), (IDLE_S - 60, True)):
        with patch.object(itsdangerous.timed.time, "time", return_value=time.time() - age):
            cookie = codec.dump(session)
        async with client(app, cookies={COOKIE: cookie}) as c:
            answer = await c.get("/events")
        assert (answer.status_code == 200) is signed_in, (age, answer.status_code)
        if signed_in:  # renewed: still a session when the old cookie has long expired
            later = time.time() + IDLE_S - 60
            with patch.object(itsdangerous.timed.time, "time", return_value=later):
                renewed = codec.load(answer.cookies[COOKIE])
                assert codec.load(cookie) is None
            assert renewed is not None and renewed.token_id == str(token_id)
