"""Webhook endpoints through the admin API: the secret shown once, rotation, the closed
list of event types, `include_pii` behind `registration:pii`, the company fence, and the
egress guard at write (private addresses not allowed: the probes' default settings)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import errors
from tests.probes.helpers import Api, api_status, company_client, make_event

HOOK = "https://hooks.example.com/in"
PUBLIC = "93.184.216.34"  # a public address: the injected resolver's answer


def body(**over: Any) -> dict[str, Any]:
    return {"url": HOOK, "event_types": ["registration.created"], **over}


@pytest.fixture
def names(app: Any) -> dict[str, list[str]]:
    """The guard's resolver, answering from this mapping (a name not in it: no answer)."""
    answers: dict[str, list[str]] = {"hooks.example.com": [PUBLIC]}

    async def resolve(host: str, port: int) -> list[str]:
        if host not in answers:
            raise OSError("no such name")
        return answers[host]

    app.state.events.egress.resolver = resolve
    return answers


async def create(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    r = await admin.post("/admin/webhooks", json=body(**over))
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_create_shows_the_secret_once_and_no_read_or_audit_row_carries_it(
    admin: httpx.AsyncClient, pool: asyncpg.Pool, names: dict[str, list[str]]
):
    created = await create(admin, description="CRM", event_types=["ping", "ping"])
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(secret) == len("whsec_") + 44
    assert created["event_types"] == ["ping"]  # duplicates dropped
    assert created["active"] and created["disabled_reason"] is None
    one = (await admin.get(f"/admin/webhooks/{created['id']}")).json()
    listed = (await admin.get("/admin/webhooks")).json()
    assert "secret" not in one and secret not in str(listed)
    assert [e["id"] for e in listed["items"]] == [created["id"]]
    rotated = await admin.post(f"/admin/webhooks/{created['id']}/rotate-secret")
    assert rotated.status_code == 200
    fresh = rotated.json()["secret"]
    assert fresh != secret and fresh.startswith("whsec_")
    assert (await admin.get(f"/admin/webhooks/{created['id']}")).json()["rotation_ends_at"]
    async with pool.acquire() as conn:
        audit = await conn.fetch("SELECT verb, summary::text AS s FROM event.event_audit_log")
        stored = await conn.fetchrow("SELECT secret, previous_secret FROM event.webhook_endpoints")
    assert {r["verb"] for r in audit} >= {"webhook_endpoint_created", "webhook_secret_rotated"}
    assert not any(secret[6:] in r["s"] or fresh[6:] in r["s"] for r in audit)
    assert (stored["secret"], stored["previous_secret"]) == (fresh, secret)
    again = await admin.post(f"/admin/webhooks/{created['id']}/rotate-secret")
    third = again.json()["secret"]
    async with pool.acquire() as conn:  # inside the 24 hours: only the last two sign
        stored = await conn.fetchrow("SELECT secret, previous_secret FROM event.webhook_endpoints")
    assert (stored["secret"], stored["previous_secret"]) == (third, fresh)


async def test_patch_delete_and_the_closed_list_of_event_types(
    admin: httpx.AsyncClient, names: dict[str, list[str]]
):
    created = await create(admin)
    path = f"/admin/webhooks/{created['id']}"
    r = await admin.patch(path, json={"event_types": ["event.updated", "waitlist.offered"]})
    assert r.status_code == 200 and r.json()["event_types"] == ["event.updated", "waitlist.offered"]
    r = await admin.patch(path, json={"event_types": ["registration.deleted"]})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["code"] == "unknown_event_type"
    assert error["event_types"] == list(errors.EVENT_TYPES)
    assert "registration.deleted" not in r.text  # the value is not echoed
    assert (await api_status(admin, "PATCH", path, json={"url": None})) == (
        422,
        "validation_failed",
    )
    assert (await api_status(admin, "POST", "/admin/webhooks", json=body(event_types=[]))) == (
        422,
        "validation_failed",
    )
    assert (await api_status(admin, "POST", "/admin/webhooks", json=body(secret="x")))[1] == (
        "unknown_field"
    )
    assert (await admin.delete(path)).status_code == 204
    assert (await api_status(admin, "GET", path)) == (404, "not_found")


async def test_one_event_only_and_include_pii_needs_the_pii_scope(
    api: Api, admin: httpx.AsyncClient, names: dict[str, list[str]]
):
    event = await make_event(admin)
    scoped = await create(admin, event_id=event["id"])
    assert scoped["event_id"] == event["id"]
    missing = str(uuid.uuid4())
    assert (await api_status(admin, "POST", "/admin/webhooks", json=body(event_id=missing))) == (
        404,
        "not_found",
    )
    headers = await api.token("webhook:write")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=str(admin.base_url), headers=headers
    ) as plain:
        assert (
            await api_status(plain, "POST", "/admin/webhooks", json=body(include_pii=True))
        ) == (
            403,
            "missing_scope",
        )
        own = (await plain.post("/admin/webhooks", json=body())).json()
        patch = await api_status(
            plain, "PATCH", f"/admin/webhooks/{own['id']}", json={"include_pii": True}
        )
        assert patch == (403, "missing_scope")
        assert (await api_status(plain, "GET", "/admin/events")) == (403, "missing_scope")
    pii = await create(admin, include_pii=True)
    assert pii["include_pii"] is True
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=str(admin.base_url), headers=headers
    ) as plain:  # without registration:pii, a PII endpoint cannot be pointed elsewhere
        for method, path, kw in [
            ("PATCH", f"/admin/webhooks/{pii['id']}", {"json": {"url": HOOK + "/other"}}),
            ("POST", f"/admin/webhooks/{pii['id']}/rotate-secret", {}),
        ]:
            assert await api_status(plain, method, path, **kw) == (403, "missing_scope")
    reader = await api.token("event:read")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=str(admin.base_url), headers=reader
    ) as other:
        assert (await api_status(other, "GET", "/admin/webhooks")) == (403, "missing_scope")


async def test_another_company_endpoint_answers_like_a_missing_one(
    api: Api, names: dict[str, list[str]]
):
    one, two = uuid.uuid4(), uuid.uuid4()
    a, b = await company_client(api, one), await company_client(api, two)
    try:
        theirs = await create(a)
        for method, path in [
            ("GET", f"/admin/webhooks/{theirs['id']}"),
            ("PATCH", f"/admin/webhooks/{theirs['id']}"),
            ("DELETE", f"/admin/webhooks/{theirs['id']}"),
            ("POST", f"/admin/webhooks/{theirs['id']}/rotate-secret"),
            ("POST", f"/admin/webhooks/{theirs['id']}/ping"),
            ("GET", f"/admin/webhooks/{theirs['id']}/deliveries"),
        ]:
            kw = {"json": {"description": "x"}} if method == "PATCH" else {}
            assert await api_status(b, method, path, **kw) == (404, "not_found"), path
        assert (await b.get("/admin/webhooks")).json()["items"] == []
        ping = (await a.post(f"/admin/webhooks/{theirs['id']}/ping")).json()
        redeliver = f"/admin/webhook-deliveries/{ping['id']}/redeliver"
        assert await api_status(b, "POST", redeliver) == (404, "not_found")
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://100.64.0.7/hook",
        "http://224.0.0.1/hook",
        "http://0.0.0.0/hook",
        "http://192.168.1.20/hook",
        "http://[fe80::1]/hook",
        "http://[fd00::1]/hook",
        "http://[fec0::1]/hook",  # site-local (deprecated)
        "http://192.88.99.1/hook",  # the 6to4 relay anycast
        "http://[2002:a00:1::1]/hook",  # 6to4 of 10.0.0.1
        "http://[2002:5db8:d822::1]/hook",  # 6to4 of a public address: all 6to4 refused
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook",  # Teredo
        "http://[2001::1]/hook",  # Teredo
        "http://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
        "http://[64:ff9b::169.254.169.254]/hook",  # NAT64 of the metadata address
        "http://[64:ff9b::7f00:1]/hook",  # NAT64 of 127.0.0.1
        "http://[64:ff9b:1::c0a8:114]/hook",  # local-use NAT64 of 192.168.1.20
        # local-use NAT64 of 10.0.0.1 in a /48 form, its last 32 bits a public address
        "http://[64:ff9b:1:a00:0:100:5db8:d822]/hook",
        "http://[::a00:1]/hook",  # IPv4-compatible 10.0.0.1
        "http://[::93.184.216.34]/hook",  # IPv4-compatible: refused whatever it carries
        "https://intranet.example.com/hook",  # resolves to a private address
        "https://nat64.example.com/hook",  # resolves to NAT64 of a private address
        "https://sixtofour.example.com/hook",  # resolves to 6to4
        "https://mixed.example.com/hook",  # one public, one private address
        "https://user:pw@hooks.example.com/in",
        "ftp://hooks.example.com/in",
        "https:///no-host",
        "http://hooks.example.com:99999/in",
        # read one way by the URL splitter and another (or not at all) by the HTTP client
        "http://hooks.exa\x7fmple.com/in",
        "http://hooks example.com/in",
        "https://xn--ls8h.example.com/in",
    ],
)
async def test_the_guard_refuses_what_is_not_public(
    admin: httpx.AsyncClient, names: dict[str, list[str]], url: str
):
    names["intranet.example.com"] = ["10.1.2.3"]
    names["mixed.example.com"] = [PUBLIC, "192.168.0.9"]
    names["nat64.example.com"] = ["64:ff9b::a00:5"]
    names["sixtofour.example.com"] = ["2002:5db8:d822::1"]
    assert await api_status(admin, "POST", "/admin/webhooks", json=body(url=url)) == (
        422,
        "webhook_url_not_allowed",
    )
    created = await create(admin)
    patched = await api_status(
        admin, "PATCH", f"/admin/webhooks/{created['id']}", json={"url": url}
    )
    assert patched == (422, "webhook_url_not_allowed")


async def test_public_addresses_and_names_not_yet_resolvable_are_accepted(
    admin: httpx.AsyncClient, names: dict[str, list[str]]
):
    assert (await create(admin, url=f"https://{PUBLIC}/in"))["url"] == f"https://{PUBLIC}/in"
    assert (await create(admin, url="http://[2606:4700::1111]/in"))["active"]
    # NAT64 (an IPv6-only host's DNS64 answer) and IPv4-mapped: judged as the IPv4 carried
    for carried in ("64:ff9b::5db8:d822", "64:ff9b:1::5db8:d822", "::ffff:93.184.216.34"):
        assert (await create(admin, url=f"http://[{carried}]/in"))["active"], carried
    names["dns64.example.com"] = ["64:ff9b::5db8:d822"]
    assert (await create(admin, url="https://dns64.example.com/in"))["active"]
    # no answer yet: accepted, and every delivery checks again before it connects
    assert (await create(admin, url="https://not-yet.example.net/in"))["active"]
