"""Badges read back: pypdf for the pages, their sizes and the names; pdftoppm and
zxing-cpp for the QR codes; the filters, the bound, the fence, the scope and the audit."""

from __future__ import annotations

import asyncio
import io
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from pypdf import PdfReader

from tests.probes.helpers import Api, api_status, company_client, event_body
from tests.probes.tickets.readback import pdf_qr_texts

A6 = (297.6, 419.5)
A4 = (595.3, 841.9)
NAMES = (
    "Zoë Çelik-Ångström",
    "Ζωή Παπαδοπούλου",
    "Анна Каренина",
    "Maximiliana Wilhelmina Theodora von und zu Hohenzollern-Sigmaringen-Hechingen",
    "Bo",
)


async def event_with(admin: httpx.AsyncClient, badge_format: str) -> tuple[str, list[dict]]:
    event = (await admin.post("/admin/events", json=event_body(badge_format=badge_format))).json()
    people = []
    for name in NAMES:
        r = await admin.post(
            "/admin/registrations",
            json={"event_id": event["id"], "name": name, "company_name": "ACME Ltd"},
        )
        assert r.status_code == 201, r.text
        people.append(r.json())
    return event["id"], people


def sizes(reader: PdfReader) -> set[tuple[float, float]]:
    return {
        (round(float(p.mediabox.width), 1), round(float(p.mediabox.height), 1))
        for p in reader.pages
    }


@pytest.mark.parametrize(
    ("badge_format", "pages", "size", "per_page"),
    [("A6", 5, A6, 1), ("A4_french_fold", 5, A4, 1), ("four_per_sheet", 2, A4, 4)],
)
async def test_each_format_prints_every_badge_readable_and_scannable(
    admin: httpx.AsyncClient, badge_format: str, pages: int, size: tuple, per_page: int
):
    event_id, people = await event_with(admin, badge_format)
    r = await admin.get(f"/admin/events/{event_id}/badges.pdf")
    assert r.status_code == 200 and r.headers["content-type"] == "application/pdf"
    assert r.headers["x-badge-count"] == "5"
    reader = PdfReader(io.BytesIO(r.content))
    assert len(reader.pages) == pages and sizes(reader) == {size}
    text = " ".join(" ".join(p.extract_text() for p in reader.pages).split())
    for name in NAMES[:3]:  # Latin, Greek, Cyrillic, as letters
        assert name in text
    assert "ACME Ltd" in text
    assert "Hohenzollern" in text  # the long name is on the badge, wrapped or shrunk
    decoded = await asyncio.to_thread(pdf_qr_texts, r.content)
    assert [len(codes) for codes in decoded] == [per_page] * (5 // per_page) + (
        [5 % per_page] if 5 % per_page else []
    )
    assert sorted(c for codes in decoded for c in codes) == sorted(p["barcode"] for p in people)


async def test_filters_the_bound_and_the_refusals(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
):
    event_id, people = await event_with(admin, "A6")
    await admin.post(f"/admin/registrations/{people[0]['id']}/cancel", json={"reason": "gone"})
    ticket = (await admin.post("/admin/tickets", json={"event_id": event_id, "name": "VIP"})).json()
    other_id, others = await event_with(admin, "A6")
    url = f"/admin/events/{event_id}/badges.pdf"

    async def count(**params: Any) -> int:
        r = await admin.get(url, params=params)
        assert r.status_code == 200, r.text
        return len(PdfReader(io.BytesIO(r.content)).pages)

    assert await count() == 4  # open and done by default: the cancelled one is left out
    assert await count(state="cancel") == 1
    assert await count(state="open,cancel") == 5
    assert await count(registration_id=[people[1]["id"], people[2]["id"]]) == 2
    empty = await admin.get(url, params={"event_ticket_id": ticket["id"]})
    assert empty.status_code == 200 and empty.headers["x-badge-count"] == "0"
    [notice] = PdfReader(io.BytesIO(empty.content)).pages  # a valid PDF saying why
    assert "No badge matches" in notice.extract_text()
    other_ticket = (
        await admin.post("/admin/tickets", json={"event_id": other_id, "name": "X"})
    ).json()
    refusals = [
        ({"state": "lost"}, "validation_failed"),
        ({"event_ticket_id": other_ticket["id"]}, "ticket_not_in_event"),
        ({"event_ticket_id": str(uuid.uuid4())}, "ticket_not_in_event"),
        ({"event_slot_id": str(uuid.uuid4())}, "slot_not_in_event"),
        ({"registration_id": [others[0]["id"]]}, "registration_not_in_event"),
    ]
    for params, code in refusals:
        assert await api_status(admin, "GET", url, params=params) == (422, code), params
    # the bound: more than 5 000 badges are refused before a byte is sent
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, name, state, barcode)"
            " SELECT $1, 'Guest ' || g, 'open', '77' || lpad(g::text, 12, '0')"
            " FROM generate_series(1, 5000) g",
            uuid.UUID(event_id),
        )
    big = await admin.get(url)
    assert big.status_code == 422
    assert big.json()["error"]["code"] == "too_many_badges"
    assert (big.json()["error"]["count"], big.json()["error"]["limit"]) == (5004, 5000)
    # audited like an export: format, filters and count, never a name
    async with pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT summary::text AS summary FROM event.event_audit_log"
            " WHERE verb = 'badges_printed' AND event_id = $1",
            uuid.UUID(event_id),
        )
    assert len(rows) == 5 and all('"format": "A6"' in r["summary"] for r in rows)
    assert not any(name in r["summary"] for r in rows for name in NAMES)


async def test_badges_need_the_pii_scope_and_are_fenced(api: Api, admin: httpx.AsyncClient):
    event_id, _ = await event_with(admin, "A6")
    reader = await api.token("registration:read", "event:read")
    assert await api_status(
        admin, "GET", f"/admin/events/{event_id}/badges.pdf", headers=reader
    ) == (403, "missing_scope")
    stranger = await company_client(api, uuid.uuid4())
    try:
        mine = await company_client(api, uuid.uuid4())
        try:
            theirs = (await mine.post("/admin/events", json=event_body())).json()["id"]
        finally:
            await mine.aclose()
        foreign = await api_status(stranger, "GET", f"/admin/events/{theirs}/badges.pdf")
        unknown = await api_status(stranger, "GET", f"/admin/events/{uuid.uuid4()}/badges.pdf")
    finally:
        await stranger.aclose()
    assert foreign == unknown == (404, "not_found")


async def test_paging_by_name_prints_each_badge_once_whatever_the_letters(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
):
    """More badges than one page of rows, names whose lower case differs between Python
    and PostgreSQL (final sigma, dotted capital I) at the page boundaries."""
    event = (
        await admin.post("/admin/events", json=event_body(badge_format="four_per_sheet"))
    ).json()
    names = [f"Aaron {i:03d}" for i in range(199)] + ["\u0130lker Y\u0131lmaz", "ΟΔΥΣΣΕΥΣ"]
    names += ["Isabel Allende", "Ivan Petrov"] + [f"Zed {i:03d}" for i in range(230)]
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO event.registrations (event_id, name, state, barcode)"
            " VALUES ($1, $2, 'open', $3)",
            [(uuid.UUID(event["id"]), n, f"66{i:012d}") for i, n in enumerate(names)],
        )
    r = await admin.get(f"/admin/events/{event['id']}/badges.pdf")
    assert r.status_code == 200 and r.headers["x-badge-count"] == str(len(names))
    text = "\n".join(p.extract_text() for p in PdfReader(io.BytesIO(r.content)).pages)
    for i in range(len(names)):
        assert text.count(f"66{i:012d}") == 1, names[i]
