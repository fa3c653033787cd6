"""The event page's "Public page" section: the address of a visible event's public page
(which opens), and "Create a private link", which mints through the API's own verb
(`mint_intake`: `capability:mint`, audited) a link that opens even an unpublished
event's page, shown in the answer to the form only. Over httpx on the real app, and in a
browser at phone size with JavaScript on and off."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import datetime
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import create_app
from events_svc.capabilities import INTAKE
from events_svc.documents import when
from events_svc.settings import Settings
from tests.probes.console.kit import Studio, client, code_of, console_of, csrf_of
from tests.probes.helpers import Api, make_event

HTML = {"Accept": "text/html"}
PUBLIC_ID = re.compile(r'<a href="([^"]+)" id="public-page-url">')
PRIVATE_ID = re.compile(r'<a href="([^"]+)" id="private-link-url">')
BUTTON = "Create a private link</button>"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, capability_secrets=("console-public-links-0123",))


async def published(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    event = await make_event(admin, **over)
    done = await admin.post(
        f"/admin/events/{event['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert done.status_code == 200, done.text
    return event


async def mints(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT actor_id, event_id, summary FROM event.event_audit_log"
                " WHERE verb = 'capability_minted' ORDER BY id"
            )
        )


async def test_a_published_events_page_shows_its_public_link_and_it_opens(
    api: Api, admin: httpx.AsyncClient
) -> None:
    shown = await published(admin, name="Open Day")
    hidden = await make_event(admin, name="Quiet Day")
    async with console_of(api, "event:read") as (c, _):
        page = await c.get(f"/events/{shown['id']}")
        assert page.status_code == 200
        links = PUBLIC_ID.findall(page.text)
        assert links == [f"http://test/api/v1/event/public/events/{shown['id']}"]
        other = await c.get(f"/events/{hidden['id']}")
        assert PUBLIC_ID.findall(other.text) == []
        assert "/public/events/" not in other.text
        assert "its public page opens only through a private link" in other.text
    opened = await api.client.get(links[0], headers=HTML)
    assert opened.status_code == 200 and "Open Day" in opened.text
    # the unpublished event's page does not open by id: there is no link to give
    closed = await api.client.get(f"/public/events/{hidden['id']}", headers=HTML)
    assert closed.status_code == 404


async def test_the_public_link_uses_the_public_base_url_when_set(
    settings: Settings, pool: asyncpg.Pool, admin: httpx.AsyncClient
) -> None:
    event = await published(admin)
    hosted = create_app(
        dataclasses.replace(settings, public_base_url="https://events.example.org/")
    )
    async with hosted.router.lifespan_context(hosted):
        other = Api(hosted, pool)
        async with console_of(other, "event:read") as (c, _):
            page = await c.get(f"/events/{event['id']}")
        await other.client.aclose()
    assert PUBLIC_ID.findall(page.text) == [
        f"https://events.example.org/api/v1/event/public/events/{event['id']}"
    ]


async def test_a_private_link_opens_the_unpublished_events_page_and_is_audited(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin, name="Board Retreat")
    async with console_of(api, "event:read", "capability:mint") as (c, csrf):
        before = await c.get(f"/events/{event['id']}")
        assert BUTTON in before.text and PRIVATE_ID.findall(before.text) == []
        made = await c.post(f"/events/{event['id']}/private-link", data={"csrf_token": csrf})
        assert made.status_code == 200  # the answer itself: no address holds the link
        assert "location" not in made.headers
        (url,) = PRIVATE_ID.findall(made.text)
        token = url.rsplit("/", 1)[1]
        assert url == f"http://test/api/v1/event/public/events/{token}"
        assert token not in made.headers.get("set-cookie", "")
        assert "Anyone holding it can register, even while the event is unpublished." in made.text
        (row,) = await mints(pool)
        assert str(row["event_id"]) == event["id"]
        assert row["summary"]["purpose"] == INTAKE and token not in str(row["summary"])
        expires = datetime.fromisoformat(row["summary"]["expires_at"])
        assert f"valid until {when(expires, event['date_tz'])}" in made.text
        # coming back to the page shows it without the link
        again = await c.get(f"/events/{event['id']}")
        assert token not in again.text and PRIVATE_ID.findall(again.text) == []
    opened = await api.client.get(url, headers=HTML)
    assert opened.status_code == 200 and "Board Retreat" in opened.text
    by_id = await api.client.get(f"/public/events/{event['id']}", headers=HTML)
    assert by_id.status_code == 404


async def test_without_capability_mint_there_is_no_button_and_the_post_is_refused(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    async with console_of(api, "event:read", "event:write") as (c, csrf):
        page = await c.get(f"/events/{event['id']}")
        assert BUTTON not in page.text
        assert "Creating a private link needs the capability:mint scope." in page.text
        refused = await c.post(f"/events/{event['id']}/private-link", data={"csrf_token": csrf})
    assert refused.status_code == 403
    assert code_of(refused.text) == ["missing_scope"] and "capability:mint" in refused.text
    assert PRIVATE_ID.findall(refused.text) == [] and await mints(pool) == []


async def test_a_private_link_form_without_its_csrf_token_is_refused(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    async with console_of(api, "event:read", "capability:mint") as (c, _):
        missing = await c.post(f"/events/{event['id']}/private-link")
        wrong = await c.post(f"/events/{event['id']}/private-link", data={"csrf_token": "x" * 43})
    for answer in (missing, wrong):
        assert answer.status_code == 403 and "csrf_failed" in code_of(answer.text)
    assert await mints(pool) == []


async def test_another_companys_event_answers_404_and_mints_nothing(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin, company_id=str(uuid.uuid4()))
    headers = await api.token("event:read", "capability:mint", company=uuid.uuid4())
    async with client(api.app) as c:
        token = headers["Authorization"].removeprefix("Bearer ")
        form = {"token": token, "csrf_token": await csrf_of(c)}
        assert (await c.post("/sign-in", data=form)).status_code == 303
        csrf = await csrf_of(c)
        refused = await c.post(f"/events/{event['id']}/private-link", data={"csrf_token": csrf})
    assert refused.status_code == 404 and await mints(pool) == []


async def test_without_a_capability_secret_no_link_can_be_made(
    settings: Settings, pool: asyncpg.Pool, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin)
    bare = create_app(dataclasses.replace(settings, capability_secrets=()))
    async with bare.router.lifespan_context(bare):
        other = Api(bare, pool)
        async with console_of(other, "event:read", "capability:mint") as (c, csrf):
            page = await c.get(f"/events/{event['id']}")
            assert BUTTON not in page.text
            assert "No capability secret is set" in page.text
            refused = await c.post(f"/events/{event['id']}/private-link", data={"csrf_token": csrf})
        await other.client.aclose()
    assert refused.status_code == 409  # said on the event page, as the tickets button does
    assert code_of(refused.text) == ["event_capability_secret_not_configured"]
    assert await mints(pool) == []


@pytest.mark.parametrize("js", [True, False])
async def test_a_private_link_at_phone_size(
    studio: Studio, admin: httpx.AsyncClient, js: bool
) -> None:
    event = await make_event(admin, name="Phone Day")
    page = await studio.open("event:read", "capability:mint", size="phone", js=js)
    await page.goto(studio.url(f"/events/{event['id']}"))
    section = page.locator("section.public-page")
    assert "opens only through a private link" in await section.inner_text()
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name="Create a private link").click()
    answer = await nav.value
    assert answer is not None and answer.status == 200
    link = page.locator("#private-link-url")
    url = await link.get_attribute("href")
    assert url and url == await link.inner_text()
    assert url.startswith(f"{studio.base}/api/v1/event/public/events/")
    suffix = "phone" if js else "phone-nojs"
    await studio.shot(page, f"events-private-link-{suffix}")
    opened = await page.goto(url)
    assert opened is not None and opened.status == 200
    assert "Phone Day" in await page.inner_text("body")
