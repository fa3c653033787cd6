"""The console's probes' kit: an httpx client on the console's ASGI app (`client`) and the
CSRF token of a page (`csrf_of`), a real uvicorn serving the app, a real chromium driven by
Playwright, sign-in by pasting a minted token, and `shot()`, which stores a screenshot and
its page text under .tmp/screenshots/ and asserts the text holds no synthetic email,
phone, token, answer text or exported row, and that the page does not scroll sideways;
and what several probe modules share: the browser runs (`RUNS`) and their screenshot
names, an attendee registered through the admin API, an admin API client and a signed-in
console client of given scopes, a page's error codes and a form's submit."""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import re
import shutil
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from http.cookiejar import Cookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import asyncpg
import httpx
import uvicorn
from playwright._impl._api_structures import SetCookieParam
from playwright.async_api import Browser, BrowserContext, Page, Playwright, async_playwright

from events_svc.verbs.tokens import create_token
from tests.probes.helpers import BASE, Api

STUDIO = "http://test/studio"
SHOTS = Path(__file__).resolve().parents[3] / ".tmp" / "screenshots"
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
SIZES = {"desktop": DESKTOP, "phone": PHONE}
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    """Debian's chromium (EVENTS_CHROMIUM names another); a clear failure when missing."""
    path = os.environ.get("EVENTS_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise RuntimeError(
            "chromium is not installed: the console's browser probes need it "
            "(apt-get install -y --no-install-recommends chromium; `make test` does this)"
        )
    return path


@asynccontextmanager
async def launched() -> AsyncIterator[tuple[Playwright, Browser]]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True
        )
        try:
            yield pw, browser
        finally:
            await browser.close()


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """The app behind a real uvicorn on a free port of 127.0.0.1 (its lifespan already
    runs in the `app` fixture); yields the base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def browser_cookie(cookie: Cookie) -> SetCookieParam:
    """A cookie the console set over HTTP, as the browser would have stored it (its
    path, HttpOnly, Secure and SameSite as the answer gave them)."""
    rest = {k.lower(): v for k, v in cookie.__dict__.get("_rest", {}).items()}
    same_site = str(rest.get("samesite") or "Lax").capitalize()
    return {
        "name": cookie.name,
        "value": cookie.value or "",
        "domain": cookie.domain.lstrip("."),
        "path": cookie.path,
        "httpOnly": "httponly" in rest,
        "secure": bool(cookie.secure),
        "sameSite": "Strict" if same_site == "Strict" else "None" if same_site == "None" else "Lax",
    }


class Studio:
    """One test's console: the served app, the browser, the pool, the secrets to hide."""

    def __init__(self, base: str, browser: Browser, pool: asyncpg.Pool) -> None:
        self.base = base
        self.browser = browser
        self.pool = pool
        self.secrets: set[str] = set()
        self.contexts: list[BrowserContext] = []

    def url(self, path: str) -> str:
        return f"{self.base}/studio{path}"

    async def token(self, *scopes: str, company: Any = None) -> str:
        token, _ = await create_token(
            self.pool, "Console probe", list(scopes) or ["*"], company, datetime.now(UTC)
        )
        self.secrets.add(token)
        return token

    async def open(
        self, *scopes: str, size: str = "desktop", js: bool = True, token: str | None = None
    ) -> Page:
        """A new browser context at `size`, signed in with a token of `scopes`, on the page
        the sign-in lands on. The sign-in form is posted over HTTP (the very request the
        browser would make) and its session cookie handed to the context: the form itself
        is driven in the browser by `test_pages.test_sign_in_and_out_in_a_browser`, and
        each probe saves two page loads."""
        context = await self.browser.new_context(viewport=SIZES[size], java_script_enabled=js)
        self.contexts.append(context)
        secret = token or await self.token(*scopes)
        async with httpx.AsyncClient(base_url=self.url("")) as c:
            csrf = await csrf_of(c)
            signed = await c.post("/sign-in", data={"token": secret, "csrf_token": csrf})
            assert signed.status_code == 303, signed.text
            landing = signed.headers["location"]
            cookies = [browser_cookie(cookie) for cookie in c.cookies.jar]
        await context.add_cookies(cookies)
        page = await context.new_page()
        await page.goto(landing if landing.startswith("http") else self.base + landing)
        return page

    async def anonymous(self, size: str = "desktop", js: bool = True) -> Page:
        context = await self.browser.new_context(viewport=SIZES[size], java_script_enabled=js)
        self.contexts.append(context)
        return await context.new_page()

    async def forbidden(self) -> set[str]:
        """Every synthetic email, phone and answer text in the database (including those a
        correction replaced), every token this test minted and every value a probe added
        (an exported row)."""
        found = set(self.secrets)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT email AS v FROM event.registrations WHERE email <> '' "
                "UNION SELECT phone FROM event.registrations WHERE phone <> '' "
                "UNION SELECT value_text FROM event.registration_answers "
                "WHERE length(value_text) >= 4 "
                # values corrected away live on in the revision history
                "UNION SELECT side.v FROM event.registration_revisions r, "
                "jsonb_each(r.changes) AS c(field, change), "
                "LATERAL (VALUES (c.change->>'before'), (c.change->>'after')) AS side(v) "
                "WHERE c.field IN ('email', 'phone') AND side.v <> ''"
            )
        found.update(str(r["v"]) for r in rows if r["v"])
        return found

    async def shot(self, page: Page, name: str) -> str:
        """Store the screenshot and its page text; assert the text is safe and the page
        fits its width. Answers the text."""
        SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
        text = await page.inner_text("body")
        (SHOTS / f"{name}.txt").write_text(text)
        assert_safe_text(text, await self.forbidden(), name)
        await assert_fits(page, name)
        return text

    async def close(self) -> None:
        for context in self.contexts:
            await context.close()


# an address whose local part is not the mask's `x***`, and a phone number's digits
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+")
_PHONE = re.compile(r"\+\d[\d ]{6,}\d")


def assert_safe_text(text: str, forbidden: set[str], name: str) -> None:
    """Nothing protected in a page's text: none of the synthetic values (exactly), no
    email but a masked one (`a***@example.org`), no phone number, no token."""
    leaked = sorted(v for v in forbidden if v and v in text)
    assert not leaked, f"screenshot {name} shows {len(leaked)} protected value(s)"
    for found in _EMAIL.finditer(text):
        assert found.group(0).split("@")[0].endswith("***"), f"screenshot {name} shows an email"
    assert not _PHONE.search(text), f"screenshot {name} shows a phone number"
    assert not re.search(r"evt_[A-Za-z0-9_-]{20,}", text), f"screenshot {name} shows a token"
    assert "Traceback" not in text, f"screenshot {name} shows debug output"


async def assert_fits(page: Page, name: str) -> None:
    """No horizontal scrolling: the document is no wider than the viewport."""
    wide = await page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert wide <= 0, f"page {name} scrolls sideways by {wide}px"


def client(app: Any, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=STUDIO, **kw)


async def csrf_of(c: httpx.AsyncClient, path: str = "/sign-in") -> str:
    page = await c.get(path)
    marker = 'name="csrf_token" value="'
    start = page.text.index(marker) + len(marker)
    return page.text[start : page.text.index('"', start)]


def readable_url(url: str, note: str = "scan") -> str:
    """The address as anyone could read it: its signed note (a URL-safe, maybe compressed,
    base64 payload) decoded in place, so a probe can assert what the address discloses
    without mistaking a few base64 letters for a name."""
    parts = urlsplit(url)
    query = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        shown = value
        if key == note:
            compressed = value.startswith(".")
            raw = base64.urlsafe_b64decode(value.lstrip(".").split(".")[0] + "==")
            shown = (zlib.decompress(raw) if compressed else raw).decode()
        query.append(f"{key}={shown}")
    return urlunsplit(parts._replace(query="&".join(query)))


# --- shared by the probe modules -----------------------------------------------------------

# each browser flow at both sizes, with JavaScript on and off
RUNS = [("desktop", True), ("phone", True), ("desktop", False), ("phone", False)]
# a barcode no registration carries
UNKNOWN = "99999999999999"


def suffix(size: str, js: bool) -> str:
    return size if js else f"{size}-nojs"


def shot_name(area: str, size: str, js: bool) -> str:
    return f"{area}-{size}" + ("" if js else "-nojs")


SERIAL = itertools.count(1000)


async def attendee(admin: httpx.AsyncClient, event_id: str) -> dict[str, Any]:
    """An open registration with a synthetic email and phone of its own (never shown)."""
    k = next(SERIAL)
    person = {"name": "Ada Lovelace", "email": f"ada{k}@example.org", "phone": f"+44207946{k}"}
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **person})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def client_of(api: Api, *scopes: str) -> httpx.AsyncClient:
    """An admin API client with a token of `scopes`."""
    headers = await api.token(*scopes)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )


@asynccontextmanager
async def console_of(api: Api, *scopes: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A console client signed in with a token of `scopes`, and its CSRF token."""
    async with client(api.app) as c:
        token = (await api.token(*scopes))["Authorization"].removeprefix("Bearer ")
        csrf = await csrf_of(c, "/sign-in")
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        yield c, await csrf_of(c, "/sign-in")


def code_of(text: str) -> list[str]:
    """The codes a console page shows (error page status line or error summary)."""
    return re.findall(r"<code>([a-z_]+)</code>", text)


async def submit(page: Page, label: str) -> int:
    """Click the submit button named `label`; the status of the page it leads to."""
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name=label).click()
    response = await nav.value
    assert response is not None
    return response.status
