"""The attendee's tickets: the PDF read back with pypdf and its QR codes decoded from the
rasterised pages; the page for a browser and the JSON for anyone else; the desk admits
the barcode read from the PDF."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from axe_playwright_python.async_playwright import Axe
from PIL import Image
from pypdf import PdfReader

from events_svc.settings import Settings
from tests.probes.console.kit import served
from tests.probes.helpers import BASE, Api, event_body
from tests.probes.tickets.readback import pdf_qr_texts, qr_texts

SECRET = "tickets-secret-0123456789"
NAMES = ("Zoë Çelik-Ångström", "Ζωή Παπαδοπούλου", "Анна Каренина")
A6 = (297.6, 419.5)


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The probes' settings with a capability secret: links can be minted and opened."""
    return dataclasses.replace(settings, capability_secrets=(SECRET,))


async def published(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    ev = (await admin.post("/admin/events", json=event_body(**over))).json()
    published = await admin.post(
        f"/admin/events/{ev['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert published.status_code == 200, published.text
    return dict(ev)


async def attendee(admin: httpx.AsyncClient, event_id: str, name: str, **over: Any) -> dict:
    body = {"event_id": event_id, "name": name, **over}
    r = await admin.post("/admin/registrations", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def link(admin: httpx.AsyncClient, event_id: str, *registrations: dict) -> str:
    r = await admin.post(
        f"/admin/events/{event_id}/capabilities/my-tickets",
        json={"registration_ids": [x["id"] for x in registrations]},
    )
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


async def cancel(admin: httpx.AsyncClient, registration: dict) -> None:
    r = await admin.post(
        f"/admin/registrations/{registration['id']}/cancel", json={"reason": "a probe"}
    )
    assert r.status_code == 200, r.text


async def test_one_a6_page_per_ticket_with_every_script_and_a_qr_of_the_barcode(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, name="Café Ωmega — Конференция")
    ticket = await admin.post("/admin/tickets", json={"event_id": event["id"], "name": "VIP"})
    people = [
        await attendee(admin, event["id"], n, event_ticket_id=ticket.json()["id"]) for n in NAMES
    ]
    gone = await attendee(admin, event["id"], "Cancelled Person")
    await cancel(admin, gone)
    token = await link(admin, event["id"], *people, gone)

    r = await public.get(f"/public/my-tickets/{token}/tickets.pdf")
    assert r.status_code == 200 and r.headers["content-type"] == "application/pdf"
    assert r.headers["cache-control"] == "no-store"
    reader = PdfReader(io.BytesIO(r.content))
    assert len(reader.pages) == 3  # the cancelled registration has no ticket
    for page, person, name in zip(reader.pages, people, NAMES, strict=True):
        box = page.mediabox
        assert (round(float(box.width), 1), round(float(box.height), 1)) == A6
        text = page.extract_text()
        assert name in text and person["barcode"] in text  # Latin, Greek, Cyrillic
        assert "Café Ωmega — Конференция" in text and "VIP" in text
    assert "Cancelled Person" not in "".join(p.extract_text() for p in reader.pages)
    fonts = [f.get_object() for f in reader.pages[0]["/Resources"]["/Font"].values()]
    assert {str(f["/BaseFont"]).split("+")[-1] for f in fonts} == {"DejaVuSans", "DejaVuSans-Bold"}
    assert all("/FontFile2" in f["/FontDescriptor"] for f in fonts)  # embedded, not assumed
    decoded = await asyncio.to_thread(pdf_qr_texts, r.content)
    assert decoded == [[p["barcode"]] for p in people]  # exactly the barcode, one a page


async def test_the_desk_admits_the_barcode_read_from_the_pdf(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    now = datetime.now(UTC)
    event = await published(
        admin,
        date_begin=(now - timedelta(hours=1)).isoformat(),
        date_end=(now + timedelta(hours=5)).isoformat(),
    )
    person = await attendee(admin, event["id"], "Grace Hopper")
    pdf = await public.get(
        f"/public/my-tickets/{await link(admin, event['id'], person)}/tickets.pdf"
    )
    [[barcode]] = await asyncio.to_thread(pdf_qr_texts, pdf.content)
    desk = await api.token("desk:scan")
    scan = await admin.post(
        "/admin/desk/scan", json={"event_id": event["id"], "barcode": barcode}, headers=desk
    )
    assert scan.status_code == 200 and scan.json()["outcome"] == "confirmed_registration"
    assert scan.json()["registration"]["id"] == person["id"]


async def test_json_for_clients_html_for_browsers(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, name="Lisbon <Meetup> & Co")
    open_one = await attendee(admin, event["id"], "Ada <b>Lovelace</b>")
    draft = await attendee(admin, event["id"], "Draft Person")
    await admin.post(f"/admin/registrations/{draft['id']}/set-draft")
    token = await link(admin, event["id"], open_one, draft)
    path = f"/public/my-tickets/{token}"

    as_json = await public.get(path)
    assert as_json.headers["content-type"].startswith("application/json")
    view = as_json.json()
    assert view["ics_url"].startswith(f"{BASE}/public/ics/")
    assert view["tickets_pdf_url"] == f"{BASE}{path}/tickets.pdf"
    assert (await public.get(view["ics_url"])).headers["content-type"].startswith("text/calendar")
    forced = await public.get(path, params={"format": "json"}, headers={"Accept": "text/html"})
    assert forced.json() == view | {"ics_url": forced.json()["ics_url"]}

    refused_html = await public.get(path, headers={"Accept": "text/html;q=0, application/json"})
    assert refused_html.headers["content-type"].startswith("application/json")
    odd = await public.get(path, params={"format": "pdf"})  # not json: negotiated as usual
    assert odd.status_code == 200 and odd.headers["vary"] == "Accept"
    page = await public.get(path, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    )
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-robots-tag"] == "noindex"
    html = page.text
    assert (
        '<html lang="en">' in html
        and "<title>Your tickets · Lisbon &lt;Meetup&gt; &amp; Co" in html
    )
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert "Ada &lt;b&gt;Lovelace&lt;/b&gt;" in html and "<b>Lovelace" not in html  # escaped
    assert html.count("<svg") == 1  # the open registration's QR; none for the draft
    assert f'aria-label="QR code of ticket {open_one["barcode"]}"' in html
    assert open_one["barcode"] in html and draft["barcode"] not in html
    assert "Not confirmed yet" in html
    span = "Mon 10 May 2027 10:00 \u2013 Wed 12 May 2027 19:00 (Europe/Lisbon)"
    assert span in html  # the event's dates in its own zone
    assert page.headers["vary"] == "Accept" and "Add to calendar" in html
    assert f'href="{view["tickets_pdf_url"]}"' in html and "<script" not in html


async def test_a_link_with_every_registration_cancelled(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin)
    person = await attendee(admin, event["id"], "Alan Turing")
    await cancel(admin, person)
    token = await link(admin, event["id"], person)
    page = await public.get(f"/public/my-tickets/{token}", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "There is no valid ticket on this link" in page.text
    assert "Download tickets (PDF)" not in page.text and "<svg" not in page.text
    pdf = await public.get(f"/public/my-tickets/{token}/tickets.pdf")
    assert pdf.status_code == 404 and pdf.json()["error"]["code"] == "no_active_tickets"


async def test_a_bad_link_answers_the_uniform_404_for_the_pdf_too(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin)
    token = await link(admin, event["id"], await attendee(admin, event["id"], "Eve"))
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    archived = await published(admin)
    gone = await link(admin, archived["id"], await attendee(admin, archived["id"], "Eve"))
    await admin.patch(f"/admin/events/{archived['id']}", json={"active": False})
    bodies = set()
    for bad in (flipped, gone, str(uuid.uuid4()), "x" * 3000):
        for path in (f"/public/my-tickets/{bad}/tickets.pdf", f"/public/my-tickets/{bad}"):
            r = await public.get(path, headers={"Accept": "text/html"})
            assert r.status_code == 404
            bodies.add(r.content)
    assert bodies == {b'{"error":{"code":"event_not_published","detail":"Not found."}}'}


@pytest.mark.parametrize("size", [(390, 844), (1440, 900)])
async def test_the_page_in_a_browser_reads_scans_and_fetches_nothing(
    app: Any, admin: httpx.AsyncClient, browser: Any, size: tuple[int, int]
):
    event = await published(
        admin, name="A conference with a rather long name that has to wrap on a phone"
    )
    person = await attendee(admin, event["id"], "Ζωή Παπαδοπούλου-Αλεξανδροπούλου")
    token = await link(admin, event["id"], person)
    width, height = size
    async with served(app) as base:
        context = await browser.new_context(viewport={"width": width, "height": height})
        try:
            page = await context.new_page()
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            url = f"{base}/api/v1/event/public/my-tickets/{token}"
            answer = await page.goto(url)
            assert answer is not None and answer.status == 200
            assert requests == [url]  # nothing else: no font, no image, no script
            wide = await page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert wide <= 0, f"the page scrolls sideways by {wide}px at {width}px"
            qr = page.locator("svg.qr")
            await qr.scroll_into_view_if_needed()
            assert await qr.is_visible()
            box = await qr.bounding_box()
            assert box is not None and box["width"] >= 120  # large enough to scan
            shot = await qr.screenshot()
            report = await Axe().run(page)  # labels, contrast, names of images, lang, title
            assert report.response["testEngine"]["name"] == "axe-core"  # it did run
            broken = [v["id"] for v in report.response["violations"]]
            assert broken == [], report.generate_report()
        finally:
            await context.close()
    assert qr_texts(Image.open(io.BytesIO(shot))) == [person["barcode"]]


async def test_an_unpublished_event_reached_by_a_private_link_offers_no_dead_calendar(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = (await admin.post("/admin/events", json=event_body())).json()  # not published
    token = await link(admin, event["id"], await attendee(admin, event["id"], "Ada"))
    view = (await public.get(f"/public/my-tickets/{token}")).json()
    assert view["ics_url"] is None and view["tickets_pdf_url"].endswith("/tickets.pdf")
    page = await public.get(f"/public/my-tickets/{token}", headers={"Accept": "text/html"})
    assert page.status_code == 200 and "Add to calendar" not in page.text
    assert (await public.get(view["tickets_pdf_url"])).status_code == 200


async def test_the_page_and_the_pdf_share_the_links_throttle(
    settings: Settings, admin: httpx.AsyncClient
):
    from events_svc.app import create_app

    event = await published(admin)
    token = await link(admin, event["id"], await attendee(admin, event["id"], "Ada"))
    tight = create_app(dataclasses.replace(settings, rate_limit_capability="3/minute"))
    async with (
        tight.router.lifespan_context(tight),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=tight), base_url=BASE) as c,
    ):
        paths = [f"/public/my-tickets/{token}", f"/public/my-tickets/{token}/tickets.pdf"] * 2
        codes = [(await c.get(p)).status_code for p in paths]
    assert codes == [200, 200, 200, 429]  # one window for the link, whichever route
