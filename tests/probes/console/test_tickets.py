"""The console's ways to the attendee's documents: the registration page opens the
tickets page (a minted, audited link), the event page prints badges through the same
verb as GET /admin/events/{id}/badges.pdf."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import httpx
import pytest
from pypdf import PdfReader

from events_svc.settings import Settings
from tests.probes.console.kit import code_of, console_of
from tests.probes.helpers import Api, event_body


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(settings, capability_secrets=("console-tickets-secret-0123",))


async def _event(admin: httpx.AsyncClient, **over: Any) -> tuple[dict, list[dict]]:
    event = (await admin.post("/admin/events", json=event_body(**over))).json()
    people = [
        (await admin.post("/admin/registrations", json={"event_id": event["id"], "name": n})).json()
        for n in ("Ada Lovelace", "Анна Каренина", "Grace Hopper")
    ]
    return event, people


async def test_the_registration_page_opens_the_attendees_tickets_page(
    api: Api, admin: httpx.AsyncClient
):
    event, people = await _event(admin)
    await admin.post(
        f"/admin/events/{event['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    scopes = ("registration:read", "capability:mint", "registration:pii")
    async with console_of(api, *scopes) as (c, csrf):
        page = await c.get(f"/registrations/{people[0]['id']}")
        assert "Open the tickets page" in page.text
        opened = await c.post(
            f"/registrations/{people[0]['id']}/tickets-page", data={"csrf_token": csrf}
        )
        assert opened.status_code == 303
        target = opened.headers["location"]
        assert "/public/my-tickets/" in target
    tickets = await api.client.get(target, headers={"Accept": "text/html"})
    assert tickets.status_code == 200 and people[0]["barcode"] in tickets.text
    async with console_of(api, "registration:read") as (c, csrf):
        page = await c.get(f"/registrations/{people[0]['id']}")
        assert "Open the tickets page" not in page.text
        refused = await c.post(
            f"/registrations/{people[0]['id']}/tickets-page", data={"csrf_token": csrf}
        )
        assert refused.status_code == 403 and "capability:mint" in refused.text


async def test_the_event_page_prints_badges_with_its_filters(api: Api, admin: httpx.AsyncClient):
    event, people = await _event(admin, badge_format="four_per_sheet")
    await admin.post(f"/admin/registrations/{people[2]['id']}/set-draft")
    async with console_of(api, "event:read", "registration:pii") as (c, _):
        page = await c.get(f"/events/{event['id']}")
        assert "Print badges (PDF)" in page.text and "four badges a sheet" in page.text
        pdf = await c.get(
            f"/events/{event['id']}/badges.pdf", params=[("state", "open"), ("state", "done")]
        )
        assert pdf.status_code == 200 and pdf.headers["content-type"] == "application/pdf"
        pages = PdfReader(io.BytesIO(pdf.content)).pages
        text = " ".join(" ".join(p.extract_text() for p in pages).split())
        assert "Анна Каренина" in text and "Grace Hopper" not in text  # the draft is left out
        refused = await c.get(
            f"/events/{event['id']}/badges.pdf", params={"event_ticket_id": people[0]["id"]}
        )
        assert refused.status_code == 422 and "ticket_not_in_event" in code_of(refused.text)
    async with console_of(api, "event:read") as (c, _):
        page = await c.get(f"/events/{event['id']}")
        assert "Print badges" not in page.text
        assert (await c.get(f"/events/{event['id']}/badges.pdf")).status_code == 403
