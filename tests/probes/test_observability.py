"""Request ids, the JSON access log, and /metrics moving with real traffic."""

from __future__ import annotations

import json
import logging
import re

import httpx

from events_svc.observability import JsonFormatter
from tests.probes.helpers import Api, event_body, scheduler, template


async def test_request_ids_are_echoed_or_minted(api: Api):
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")
    r = await c.get("/healthz", headers={"X-Request-ID": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = await c.get("/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["x-request-id"])
    assert re.fullmatch(r"[0-9a-f]{32}", (await c.get("/healthz")).headers["x-request-id"])
    await c.aclose()


async def test_one_json_line_per_request_without_secrets(api: Api, admin, caplog):
    caplog.set_level(logging.INFO, logger="events_svc.access")
    ev = (await admin.post("/admin/events", json=event_body())).json()
    token = "evt_" + "x" * 40
    await admin.post(
        "/admin/registrations",
        json={"event_id": ev["id"], "name": "Zed Secret", "email": "zed@example.org"},
    )
    await api.client.get(f"/public/ics/{token}")
    formatter = JsonFormatter()
    lines = [
        json.loads(formatter.format(r)) for r in caplog.records if r.name == "events_svc.access"
    ]
    routes = [(line["method"], line["route"], line["status"]) for line in lines]
    assert ("POST", "/admin/registrations", 201) in routes  # the template, not the path
    assert ("GET", "/public/ics/{capability}", 503) in routes
    assert all("duration_ms" in line and line["request_id"] for line in lines)
    text = caplog.text + json.dumps(lines)
    for secret in (token, "zed@example.org", "Zed Secret", ev["id"]):
        assert secret not in text


async def test_metrics_move_with_traffic(api: Api, admin):
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")

    async def scrape() -> str:
        r = await c.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        return r.text

    def value(text: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    ev = (await admin.post("/admin/events", json=event_body(seats_max=1))).json()
    before = await scrape()
    await admin.post("/admin/registrations", json={"event_id": ev["id"], "email": "a@ex.org"})
    await admin.post("/admin/registrations", json={"event_id": ev["id"]})
    tpl = await template(admin)
    await scheduler(
        admin, ev["id"], tpl, interval_kind="after_sub", interval_unit="now", interval_nbr=0
    )
    after = await scrape()
    created = 'events_registrations_total{outcome="created"}'
    refused = 'events_registrations_total{outcome="event_seats_exhausted"}'
    assert value(after, created) == value(before, created) + 1
    assert value(after, refused) == value(before, refused) + 1
    assert value(after, "events_scheduler_lag_seconds") > 0  # due, not yet sent
    assert 'events_db_pool_connections{state="max"} 4.0' in after
    assert "events_http_request_duration_seconds_bucket" in after
    r = await admin.post("/admin/schedulers/run")
    assert r.json()["sent"] == 1
    final = await scrape()
    assert (
        value(final, "events_mails_queued_total") == value(after, "events_mails_queued_total") + 1
    )
    assert value(final, "events_scheduler_passes_total") >= 1
    assert value(final, "events_scheduler_lag_seconds") == 0
    await c.aclose()
