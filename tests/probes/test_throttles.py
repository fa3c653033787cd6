"""The public throttles as an attacker meets them: no window that every client shares can
be filled by one client. Clients are told apart by their socket address (the ASGI
transport's `client`); the windows are the real `limits` ones, in memory."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from events_svc import create_app
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, event_body

SECRET = "throttle-secret-0123456789"

Clients = Callable[[str], httpx.AsyncClient]


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The service's own default windows (120/minute per IP, 60/minute per link, 10/hour
    per email, 1200/minute accepted per event), the intake on."""
    return dataclasses.replace(
        settings, pool_max=8, capability_secrets=(SECRET,), intake_public=True
    )


@asynccontextmanager
async def serving(settings: Settings, **limits: str) -> AsyncIterator[Clients]:
    """An app with these windows; `clients(ip)` is a client connecting from `ip`."""
    app = create_app(dataclasses.replace(settings, **limits))
    opened: list[httpx.AsyncClient] = []

    def clients(ip: str) -> httpx.AsyncClient:
        transport = httpx.ASGITransport(app=app, client=(ip, 40000))
        opened.append(httpx.AsyncClient(transport=transport, base_url=BASE))
        return opened[-1]

    async with app.router.lifespan_context(app):
        try:
            yield clients
        finally:
            for c in opened:
                await c.aclose()


async def published(admin: httpx.AsyncClient, **over: Any) -> str:
    ev = (await admin.post("/admin/events", json=event_body(**over))).json()
    r = await admin.post(
        f"/admin/events/{ev['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert r.status_code == 200, r.text
    return str(ev["id"])


def one(name: str, email: str | None = None) -> dict[str, Any]:
    return {"attendees": [{"name": name, "email": email or f"{name.lower()}@example.org"}]}


async def registrations(api: Api) -> int:
    async with api.pool.acquire() as conn:
        n: int = await conn.fetchval("SELECT count(*) FROM event.registrations")
    return n


async def test_one_address_refused_200_times_cannot_close_an_events_intake(
    settings: Settings, api: Api, admin: httpx.AsyncClient
):
    """The attack of issue 26 item 5: the event id's window was shared by every client and
    counted refusals, so 60 bad requests closed the intake for everyone for a minute."""
    event_id = await published(admin)
    path = f"/intake/{event_id}"
    async with serving(settings) as clients:
        attacker = clients("198.51.100.66")
        refused = [
            {**one("Eve"), "event_ticket_id": str(uuid.uuid4())},  # an unknown ticket
            {"attendees": []},  # a body the model refuses
            {**one("Eve"), "partner_id": str(uuid.uuid4())},  # an authority field
            None,  # not JSON at all
        ]
        codes = []
        for i in range(200):
            body = refused[i % len(refused)]
            if body is None:
                r = await attacker.post(
                    path, content=b"{not json", headers={"content-type": "application/json"}
                )
            else:
                r = await attacker.post(path, json=body)
            codes.append(r.status_code)
        # every request counted against the attacker's own address, malformed ones too
        assert 429 not in codes[:120] and set(codes[:120]) == {422}
        assert codes[120:] == [429] * 80
        # ... and nobody else's: another address registers at once
        r = await clients("203.0.113.7").post(path, json=one("Ada"))
        assert r.status_code == 201, r.text
        r = await clients("203.0.113.8").post(path, json=one("Bob"))
        assert r.status_code == 201, r.text
    assert await registrations(api) == 2


async def test_the_events_ceiling_counts_accepted_registrations_only(
    settings: Settings, api: Api, admin: httpx.AsyncClient
):
    event_id = await published(admin)
    path = f"/intake/{event_id}"
    async with serving(settings, rate_limit_event_intake="4/minute") as clients:
        for i in range(60):  # refused, from many addresses: none of them is counted
            unknown = {**one("Eve"), "event_ticket_id": str(uuid.uuid4())}
            r = await clients(f"198.51.100.{i}").post(path, json=unknown)
            assert r.status_code == 422
        ada = await clients("203.0.113.1").post(path, json=one("Ada"))
        pair = {"attendees": [*one("Bob")["attendees"], *one("Cy")["attendees"]]}
        both = await clients("203.0.113.2").post(path, json=pair)
        assert (ada.status_code, both.status_code) == (201, 201)  # 3 of 4 accepted
        # two more would pass the ceiling: refused BEFORE anything is written
        over = await clients("203.0.113.3").post(
            path, json={"attendees": [*one("Dee")["attendees"], *one("Eli")["attendees"]]}
        )
        assert over.status_code == 429 and over.json()["error"]["code"] == "rate_limited"
        assert 1 <= int(over.headers["retry-after"]) <= 60
        assert await registrations(api) == 3
        last = await clients("203.0.113.4").post(path, json=one("Fay"))
        assert last.status_code == 201  # exactly the 4th
        late = await clients("203.0.113.5").post(path, json=one("Gus"))
        assert late.status_code == 429
        # the ceiling is the intake by event id's: a private link of the event still works
        link = await admin.post(f"/admin/events/{event_id}/capabilities/intake", json={})
        private = link.json()["url"].split("/api/v1/event")[1]
        r = await clients("203.0.113.6").post(private, json=one("Hal"))
        assert r.status_code == 201, r.text
    assert await registrations(api) == 5


async def test_refused_requests_do_not_fill_an_emails_window(
    settings: Settings, api: Api, admin: httpx.AsyncClient
):
    """Someone who knows an address cannot lock its owner out with refused requests: the
    email window counts registrations accepted for it."""
    event_id = await published(admin)
    path = f"/intake/{event_id}"
    async with serving(settings, rate_limit_email="2/hour") as clients:
        attacker = clients("198.51.100.66")
        for _ in range(20):
            body = {**one("Ada", "ada@example.org"), "event_ticket_id": str(uuid.uuid4())}
            assert (await attacker.post(path, json=body)).status_code == 422
        owner = clients("203.0.113.1")
        codes = [
            (await owner.post(path, json=one("Ada", email))).status_code
            for email in ("ada@example.org", "ADA@example.org", "Ada@Example.org")
        ]
        assert codes == [201, 201, 429]  # accepted ones count, one normalised address
        # the same address twice in one request costs two
        pair = {"attendees": [one("Bo", "bo@example.org")["attendees"][0]] * 3}
        r = await owner.post(path, json=pair)
        assert r.status_code == 429
    assert await registrations(api) == 2


async def test_one_client_hammering_a_calendar_link_leaves_it_open_for_the_others(
    settings: Settings, admin: httpx.AsyncClient
):
    """A calendar link opens a published event's calendar (public data) and is shared, like
    an "add to calendar" button: its window is per client."""
    event_id = await published(admin)
    minted = await admin.post(f"/admin/events/{event_id}/capabilities/ics", json={})
    ics = f"/public/ics/{minted.json()['token']}"
    async with serving(settings, rate_limit_capability="3/minute") as clients:
        hammer = clients("198.51.100.66")
        assert [(await hammer.get(ics)).status_code for _ in range(5)] == [200] * 3 + [429] * 2
        others = [(await clients(f"203.0.113.{i}").get(ics)).status_code for i in range(5)]
        assert others == [200] * 5


async def test_a_personal_link_keeps_one_window_whoever_sends(
    settings: Settings, admin: httpx.AsyncClient
):
    """A my-tickets link or a private intake link is one person's: every request on it
    counts, refused ones too, from any address."""
    event_id = await published(admin)
    reg = (await admin.post("/admin/registrations", json={"event_id": event_id})).json()
    minted = await admin.post(
        f"/admin/events/{event_id}/capabilities/my-tickets", json={"registration_ids": [reg["id"]]}
    )
    tickets = f"/public/my-tickets/{minted.json()['token']}"
    link = await admin.post(f"/admin/events/{event_id}/capabilities/intake", json={})
    private = link.json()["url"].split("/api/v1/event")[1]
    async with serving(settings, rate_limit_capability="2/minute") as clients:
        first, second = clients("198.51.100.1"), clients("198.51.100.2")
        assert (await first.get(tickets)).status_code == 200
        assert (await second.get(tickets)).status_code == 200
        assert (await clients("198.51.100.3").get(tickets)).status_code == 429
        bad = {**one("Eve"), "event_ticket_id": str(uuid.uuid4())}
        assert (await first.post(private, json=bad)).status_code == 422
        assert (await second.post(private, json={"attendees": []})).status_code == 422
        r = await clients("198.51.100.3").post(private, json=one("Ada"))
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
