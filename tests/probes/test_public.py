"""The public capability surface: the codec, /ics, my-tickets, the intake, throttles."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import icalendar
import pytest
import vobject

from events_svc import create_app
from events_svc.capabilities import ICS, INTAKE, MY_TICKETS, CapabilityCodec
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, add_slot, event_body

SECRET = "first-secret-0123456789"
OLD = "older-secret-0123456789"


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(
        database_url=db_url,
        pool_min=1,
        pool_max=8,
        scheduler_enabled=False,
        capability_secrets=(SECRET, OLD),
        intake_public=True,
        rate_limit_ip="1000/minute",
        rate_limit_capability="1000/minute",
        rate_limit_email="1000/hour",
    )


async def published(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    ev = (await admin.post("/admin/events", json=event_body(**over))).json()
    await admin.post(
        f"/admin/events/{ev['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    return dict(ev)


async def ics_link(admin: httpx.AsyncClient, event_id: str, **body: Any) -> str:
    r = await admin.post(f"/admin/events/{event_id}/capabilities/ics", json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def parse_both(text: str) -> tuple[Any, Any]:
    cal = icalendar.Calendar.from_ical(text)
    other = vobject.readOne(text)
    return cal, other


async def test_ics_of_an_event_in_a_dst_timezone_parses_in_two_parsers(admin, public):
    ev = await published(
        admin,
        location="Main hall",
        event_url="https://example.org/e",
        date_begin="2027-07-10T09:00:00Z",
        date_end="2027-07-10T17:00:00Z",
        date_tz="Europe/Lisbon",
    )
    await admin.patch(f"/admin/events/{ev['id']}", json={"description": "Talks"})  # sequence 1
    r = await public.get(f"/public/ics/{await ics_link(admin, ev['id'])}")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/calendar; charset=utf-8"
    assert "event.ics" in r.headers["content-disposition"]
    assert r.headers["cache-control"] == "no-store" and r.headers["x-robots-tag"] == "noindex"
    cal, other = parse_both(r.text)
    assert str(cal["METHOD"]) == "PUBLISH" and str(cal["VERSION"]) == "2.0"
    vevent = cal.walk("VEVENT")[0]
    assert str(vevent["UID"]) == f"{ev['id']}@events-svc"
    assert int(vevent["SEQUENCE"]) == 1 and str(vevent["STATUS"]) == "CONFIRMED"
    assert vevent["DTSTART"].params["TZID"] == "Europe/Lisbon"
    assert vevent["DTSTART"].dt == datetime(2027, 7, 10, 9, 0, tzinfo=UTC)  # 10:00 WEST
    assert vevent["DTSTART"].dt.utcoffset() == timedelta(hours=1)
    assert str(vevent["LOCATION"]) == "Main hall" and str(vevent["URL"]) == "https://example.org/e"
    assert [tz["TZID"] for tz in cal.walk("VTIMEZONE")] == ["Europe/Lisbon"]
    assert other.vevent.uid.value == f"{ev['id']}@events-svc"
    assert other.vevent.dtstart.value.astimezone(UTC) == datetime(2027, 7, 10, 9, 0, tzinfo=UTC)
    assert other.vevent.dtend.value.astimezone(UTC) == datetime(2027, 7, 10, 17, 0, tzinfo=UTC)


async def test_ics_of_a_slot_scope_and_of_a_cancelled_event(admin, public):
    ev = await published(admin, is_multi_slots=True)
    slot = await add_slot(admin, ev["id"], 14)
    token = await ics_link(admin, ev["id"], slot_id=slot["id"])
    cal, other = parse_both((await public.get(f"/public/ics/{token}")).text)
    vevent = cal.walk("VEVENT")[0]
    assert str(vevent["UID"]) == f"{slot['id']}.{ev['id']}@events-svc"
    assert vevent["DTSTART"].dt == datetime(2027, 5, 10, 14, 0, tzinfo=UTC)
    assert other.vevent.dtend.value.astimezone(UTC) == datetime(2027, 5, 10, 15, 0, tzinfo=UTC)
    await admin.patch(f"/admin/events/{ev['id']}", json={"kanban_state": "cancel"})
    cal, other = parse_both((await public.get(f"/public/ics/{token}")).text)
    vevent = cal.walk("VEVENT")[0]
    assert str(vevent["STATUS"]) == "CANCELLED" and int(vevent["SEQUENCE"]) == 1
    assert other.vevent.status.value == "CANCELLED"


async def test_every_404_is_the_same_bytes(api: Api, admin, public):
    codec = CapabilityCodec((SECRET,))
    now = datetime.now(UTC)
    live = await published(admin)
    other = await published(admin, is_multi_slots=True)
    other_slot = await add_slot(admin, other["id"], 10)
    hidden = (await admin.post("/admin/events", json=event_body())).json()
    archived = await published(admin)
    await admin.patch(f"/admin/events/{archived['id']}", json={"active": False})
    good = await ics_link(admin, live["id"])
    assert (await public.get(f"/public/ics/{good}")).status_code == 200
    flipped = good[:-3] + ("A" if good[-3] != "A" else "B") + good[-2:]
    in_future = now + timedelta(days=1)
    tokens = [
        flipped,
        codec.mint(ICS, {"e": live["id"], "s": None}, now - timedelta(seconds=1)),  # expired
        codec.mint(MY_TICKETS, {"e": live["id"], "r": []}, None),  # another purpose
        codec.mint(INTAKE, {"e": live["id"]}, in_future),
        codec.mint(ICS, {"e": str(uuid.uuid4()), "s": None}, in_future),  # missing event
        codec.mint(ICS, {"e": hidden["id"], "s": None}, in_future),  # unpublished
        codec.mint(ICS, {"e": archived["id"], "s": None}, in_future),  # archived
        codec.mint(ICS, {"e": live["id"], "s": other_slot["id"]}, in_future),  # foreign slot
        CapabilityCodec(("removed-secret-0123456789",)).mint(ICS, {"e": live["id"]}, None),
        live["id"],
        "1",
        "2",
        str(uuid.uuid4()),
        "x" * 3000,
    ]
    bodies = set()
    for token in tokens:
        r = await public.get(f"/public/ics/{token}")
        assert r.status_code == 404, token
        bodies.add(r.content)
        r = await public.get(f"/public/my-tickets/{token}")
        assert r.status_code == 404
        bodies.add(r.content)
    assert bodies == {b'{"error":{"code":"event_not_published","detail":"Not found."}}'}
    async with api.pool.acquire() as conn:  # GET writes nothing
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM event.event_audit_log WHERE verb LIKE 'capability%'"
            )
            == 1
        )


async def test_rotation_keeps_old_links_until_the_secret_is_removed(settings, api, admin, public):
    ev = await published(admin)
    old_token = CapabilityCodec((OLD,)).mint(ICS, {"e": ev["id"], "s": None}, None)
    assert (await public.get(f"/public/ics/{old_token}")).status_code == 200  # OLD still listed
    rotated = create_app(dataclasses.replace(settings, capability_secrets=(SECRET,)))
    async with rotated.router.lifespan_context(rotated):
        transport = httpx.ASGITransport(app=rotated)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as c:
            assert (await c.get(f"/public/ics/{old_token}")).status_code == 404
            fresh = await ics_link(admin, ev["id"])  # signed with the first secret
            assert (await c.get(f"/public/ics/{fresh}")).status_code == 200


async def test_no_secret_means_503_everywhere(settings: Settings, api: Api):
    bare = create_app(dataclasses.replace(settings, capability_secrets=()))
    headers = await api.token("*")
    async with bare.router.lifespan_context(bare):
        transport = httpx.ASGITransport(app=bare)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            ev = (await c.post("/admin/events", json=event_body())).json()
            for method, path in [
                ("GET", "/public/ics/abc"),
                ("GET", "/public/my-tickets/abc"),
                ("POST", f"/intake/{ev['id']}"),
                ("POST", f"/admin/events/{ev['id']}/capabilities/ics"),
                ("POST", f"/admin/events/{ev['id']}/capabilities/intake"),
            ]:
                body = {"attendees": [{"name": "A", "email": "a@example.org"}]}
                r = await c.request(method, path, json=body if "intake/" in path else None)
                assert r.status_code == 503, path
                assert r.json()["error"]["code"] == "event_capability_secret_not_configured"
                assert SECRET not in r.text


async def test_minting_is_audited_without_the_token(api: Api, admin):
    ev = await published(admin)
    r = (await admin.post("/admin/registrations", json={"event_id": ev["id"]})).json()
    minted = await admin.post(
        f"/admin/events/{ev['id']}/capabilities/my-tickets", json={"registration_ids": [r["id"]]}
    )
    body = minted.json()
    assert body["expires_at"] is None and body["url"].endswith(body["token"])
    bad = await admin.post(
        f"/admin/events/{ev['id']}/capabilities/my-tickets",
        json={"registration_ids": [str(uuid.uuid4())]},
    )
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "registration_not_in_event"
    reader = await api.token("event:read")
    r = await api.client.post(f"/admin/events/{ev['id']}/capabilities/ics", headers=reader)
    assert r.status_code == 403 and r.json()["error"]["scope"] == "capability:mint"
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT summary::text AS s FROM event.event_audit_log WHERE verb = 'capability_minted'"
        )
    assert len(rows) == 1 and body["token"] not in rows[0]["s"] and MY_TICKETS in rows[0]["s"]


async def test_minting_a_tickets_link_needs_the_pii_scope_and_is_audited(api: Api, admin, public):
    """The attack of issue 26 item 6: a `capability:mint` token without `registration:pii`
    minted a my-tickets link and read the attendees' full names through it."""
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await published(admin, company_id=str(mine))
    reg = await admin.post(
        "/admin/registrations", json={"event_id": ev["id"], "name": "Ada Lovelace"}
    )
    url = f"/admin/events/{ev['id']}/capabilities/my-tickets"
    body = {"registration_ids": [reg.json()["id"]]}

    async def mint(*scopes: str, company: uuid.UUID = mine) -> httpx.Response:
        headers = await api.token(*scopes, company=company)
        return await api.client.post(url, json=body, headers=headers)

    refused = await mint("capability:mint")
    assert refused.status_code == 403
    assert refused.json()["error"] | {"detail": ""} == {
        "code": "missing_scope",
        "scope": "registration:pii",
        "detail": "",
    }
    assert "Ada" not in refused.text
    refused = await mint("registration:pii", "event:read")
    assert (refused.status_code, refused.json()["error"]["scope"]) == (403, "capability:mint")
    # another company's event answers as a missing one, even with both scopes
    foreign = await mint("capability:mint", "registration:pii", company=theirs)
    assert foreign.status_code == 404
    minted = await mint("capability:mint", "registration:pii")
    assert minted.status_code == 200, minted.text
    view = (await public.get(f"/public/my-tickets/{minted.json()['token']}")).json()
    assert [t["name"] for t in view["registrations"]] == ["Ada Lovelace"]
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT actor_id, company_id, event_id, summary FROM event.event_audit_log"
            " WHERE verb = 'capability_minted'"
        )
    assert len(rows) == 1  # the refused mints wrote nothing
    (row,) = rows
    assert row["company_id"] == mine and str(row["event_id"]) == ev["id"]
    summary = row["summary"]
    assert summary == {"purpose": MY_TICKETS, "registrations": 1, "ids": [reg.json()["id"]]}
    assert minted.json()["token"] not in json.dumps(summary) and "Ada" not in json.dumps(summary)


async def test_my_tickets_lists_live_registrations_with_calendar_links(admin, public):
    ev = await published(admin, location="Hall B")
    regs = [
        (
            await admin.post(
                "/admin/registrations", json={"event_id": ev["id"], "name": f"Guest {i}"}
            )
        ).json()
        for i in range(3)
    ]
    await admin.post(f"/admin/registrations/{regs[2]['id']}/archive")
    minted = await admin.post(
        f"/admin/events/{ev['id']}/capabilities/my-tickets",
        json={"registration_ids": [r["id"] for r in regs]},
    )
    view = (await public.get(f"/public/my-tickets/{minted.json()['token']}")).json()
    assert view["event"]["name"] == "PyCon Lisbon" and view["event"]["location"] == "Hall B"
    assert view["event"]["date_begin"].endswith("+01:00")  # in the event's zone (WEST)
    assert [t["name"] for t in view["registrations"]] == ["Guest 0", "Guest 1"]
    assert view["registrations"][0]["barcode"] == regs[0]["barcode"]
    ics = await public.get(view["registrations"][0]["ics_url"].split("/api/v1/event")[1])
    assert ics.status_code == 200 and "BEGIN:VCALENDAR" in ics.text


async def test_intake_registers_through_the_one_verb(api: Api, admin, public):
    ev = await published(admin, seats_max=10)
    body = {
        "attendees": [
            {"name": "Ada", "email": "ada@example.org"},
            {"name": "Bob", "email": "bob@example.org"},
        ]
    }
    r = await public.post(f"/intake/{ev['id']}", json=body)
    assert r.status_code == 201, r.text
    answer = r.json()
    assert answer["state"] == "open" and len(answer["registrations"]) == 2
    tickets = await public.get(answer["my_tickets_url"].split("/api/v1/event")[1])
    assert sorted(t["name"] for t in tickets.json()["registrations"]) == ["Ada", "Bob"]
    async with api.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, count(partner_id) AS partners FROM event.registrations"
        )
        actor = await conn.fetchval(
            "SELECT DISTINCT actor_id FROM event.event_audit_log"
            " WHERE verb = 'registration_created'"
        )
    assert (row["n"], row["partners"], actor) == (2, 0, "public-intake")


@pytest.mark.parametrize(
    "field",
    ["partner_id", "state", "sale_status", "sale_order_id", "active", "company_id", "barcode"],
)
async def test_intake_never_admits_authority_fields(admin, public, field):
    ev = await published(admin)
    attendee = {"name": "Eve", "email": "eve@example.org", field: "x"}
    r = await public.post(f"/intake/{ev['id']}", json={"attendees": [attendee]})
    assert r.status_code == 422 and r.json()["error"]["field"] == f"attendees.0.{field}"
    r = await public.post(
        f"/intake/{ev['id']}",
        json={
            "attendees": [attendee][:0] or [{"name": "Eve", "email": "eve@example.org"}],
            field: "x",
        },
    )
    assert r.status_code == 422 and r.json()["error"] == {
        "code": "unknown_field",
        "detail": f"Unknown field: {field}.",
        "field": field,
    }


async def test_intake_refuses_closed_events(admin, public):
    one = {"attendees": [{"name": "A", "email": "a@example.org"}]}
    hidden = (await admin.post("/admin/events", json=event_body())).json()
    cancelled = await published(admin)
    await admin.patch(f"/admin/events/{cancelled['id']}", json={"kanban_state": "cancel"})
    ended = await published(
        admin, date_begin="2020-01-01T00:00:00Z", date_end="2020-01-02T00:00:00Z"
    )
    for ev in (cancelled, ended):
        r = await public.post(f"/intake/{ev['id']}", json=one)
        assert r.status_code == 409 and r.json()["error"]["code"] == "event_registrations_closed"
    # unpublished, by id: the uniform 404 of an unknown id
    r = await public.post(f"/intake/{hidden['id']}", json=one)
    missing = await public.post(f"/intake/{uuid.uuid4()}", json=one)
    assert r.status_code == missing.status_code == 404 and r.json() == missing.json()
    link = await admin.post(f"/admin/events/{hidden['id']}/capabilities/intake", json={})
    r = await public.post(link.json()["url"].split("/api/v1/event")[1], json=one)
    assert r.status_code == 201  # a private link admits the unpublished event


async def test_intake_under_32_concurrent_requests_fills_exactly(api: Api, admin, public):
    ev = await published(admin, seats_max=5)
    bodies = [{"attendees": [{"name": f"P{i}", "email": f"p{i}@example.org"}]} for i in range(32)]
    rs = await asyncio.gather(*(public.post(f"/intake/{ev['id']}", json=b) for b in bodies))
    codes = sorted((r.status_code, r.json().get("error", {}).get("code")) for r in rs)
    assert codes.count((201, None)) == 5
    assert codes.count((409, "event_seats_exhausted")) == 27
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.registrations") == 5


async def test_throttles_per_ip_and_the_forwarded_header(settings: Settings, api: Api, admin):
    ev = await published(admin)
    tight = dataclasses.replace(settings, rate_limit_ip="3/minute")

    async def statuses(app: Any, client: tuple[str, int], xff: str | None = None) -> list[int]:
        transport = httpx.ASGITransport(app=app, client=client)
        headers = {"X-Forwarded-For": xff} if xff else {}
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c,
        ):
            rs = [await c.get(f"/public/ics/{ev['id']}") for _ in range(4)]
        if rs[-1].status_code == 429:
            assert int(rs[-1].headers["retry-after"]) >= 1
            assert rs[-1].json()["error"]["code"] == "rate_limited"
        return [r.status_code for r in rs]

    app = create_app(tight)
    assert await statuses(app, ("10.0.0.1", 1)) == [404, 404, 404, 429]
    assert await statuses(app, ("10.0.0.2", 1)) == [404, 404, 404, 429]  # another IP: own window
    # untrusted: the forwarded header is ignored (10.0.0.1 is already over its limit)
    assert await statuses(app, ("10.0.0.1", 1), xff="192.0.2.9") == [429, 429, 429, 429]
    proxies = (ipaddress.ip_network("10.0.0.0/8"),)
    trusted = create_app(dataclasses.replace(tight, trusted_proxy=True, trusted_proxy_ips=proxies))
    # a listed peer: the RIGHTMOST hop is the client; a forged left-hand hop changes nothing
    assert await statuses(trusted, ("10.0.0.1", 1), xff="203.0.113.5, 192.0.2.7") == [
        404,
        404,
        404,
        429,
    ]
    assert await statuses(trusted, ("10.0.0.1", 1), xff="198.51.100.1, 192.0.2.7") == [
        429,
        429,
        429,
        429,
    ]
    assert await statuses(trusted, ("10.0.0.1", 1), xff="192.0.2.8") == [404, 404, 404, 429]
    # a peer that is not listed is its own client, whatever the header says
    assert await statuses(trusted, ("172.16.0.1", 1), xff="192.0.2.99") == [404, 404, 404, 429]
    assert await statuses(trusted, ("172.16.0.1", 1), xff="192.0.2.98") == [429, 429, 429, 429]


async def test_throttles_per_link_and_per_intake_email(settings: Settings, admin):
    ev = await published(admin, seats_max=0)
    tight = dataclasses.replace(
        settings, rate_limit_capability="2/minute", rate_limit_email="2/hour"
    )
    app = create_app(tight)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as c,
    ):
        link = await ics_link(admin, ev["id"])
        codes = [(await c.get(f"/public/ics/{link}")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        other = await ics_link(admin, ev["id"], ttl_seconds=3600)  # another link, own window
        assert (await c.get(f"/public/ics/{other}")).status_code == 200
        emails = ["Same@Example.org", "same@example.org", "SAME@example.org"]
        codes = []
        for i, email in enumerate(emails):
            private = await admin.post(f"/admin/events/{ev['id']}/capabilities/intake", json={})
            path = private.json()["url"].split("/api/v1/event")[1]
            body = {"attendees": [{"name": f"S{i}", "email": email.strip()}]}
            codes.append((await c.post(path, json=body)).status_code)
        assert codes == [201, 201, 429]  # one normalised email, whatever the link


def test_links_are_signed_with_hmac_sha256_and_sha1_links_do_not_open():
    import base64

    from itsdangerous import URLSafeSerializer

    secret = "sha256-secret-0123456789"
    codec = CapabilityCodec((secret,))
    token = codec.mint(ICS, {"e": "x"}, None)
    signature = token.rsplit(".", 1)[1]
    assert len(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))) == 32
    old = URLSafeSerializer(secret, salt=ICS).dumps({"e": "x"})  # itsdangerous' SHA-1 default
    assert codec.open(ICS, old, datetime.now(UTC)) is None
    assert codec.open(ICS, token, datetime.now(UTC)) == {"e": "x"}
