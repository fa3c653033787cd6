"""A person registers in a real chromium at a phone's size and a desktop's, by clicking and
typing only: the page, two attendees, a mistake answered beside its field, the tickets page
whose QR codes decode to the new barcodes. Nothing is fetched from anywhere else, nothing
scrolls sideways, and axe-core finds no serious or critical violation on any of the pages.
The screenshots land in .tmp/screenshots/ (the README shows the phone's)."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from axe_playwright_python.async_playwright import Axe
from PIL import Image
from playwright.async_api import Page

from tests.probes.console.kit import served
from tests.probes.helpers import add_ticket
from tests.probes.pages.kit import published, question
from tests.probes.tickets.readback import qr_texts

SHOTS = Path(__file__).resolve().parents[3] / ".tmp" / "screenshots"
SIZES = {"phone": {"width": 390, "height": 844}, "desktop": {"width": 1440, "height": 900}}


async def checked(page: Page, name: str) -> None:
    """No sideways scroll, no serious or critical axe violation; screenshots kept (the
    whole page, and what the screen shows: `-view`)."""
    wide = await page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert wide <= 0, f"{name} scrolls sideways by {wide}px"
    report = await Axe().run(page)
    assert report.response["testEngine"]["name"] == "axe-core"  # it did run
    grave = [
        (v["id"], v["impact"])
        for v in report.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert grave == [], report.generate_report()
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    await page.screenshot(path=str(SHOTS / f"{name}-view.png"))


async def submit(page: Page, label: str) -> int:
    async with page.expect_navigation() as nav:
        await page.get_by_role("button", name=label, exact=True).click()
    response = await nav.value
    assert response is not None
    return response.status


@pytest.mark.parametrize("size", ["phone", "desktop"])
async def test_a_person_registers_two_attendees_in_a_browser(
    app: Any, admin: httpx.AsyncClient, browser: Any, pool: asyncpg.Pool, size: str
):
    event = await published(
        admin,
        name="Lisbon Python Day — a conference whose name has to wrap on a phone",
        description="Talks, workshops and a long lunch.\nDoors open at 09:00.",
        location="Centro de Congressos de Lisboa, Praça das Indústrias",
    )
    await add_ticket(admin, event["id"], name="Standard", seats_max=200, limit_max_per_order=4)
    await add_ticket(admin, event["id"], name="Supporter", seats_max=5, limit_max_per_order=2)
    await question(
        admin, event["id"], "Lunch", "simple_choice", mandatory=True, answers=("Vegetarian", "Any")
    )
    await question(admin, event["id"], "How did you hear of us?", once_per_order=True)
    async with served(app) as base:
        context = await browser.new_context(viewport=SIZES[size])
        try:
            page = await context.new_page()
            requests: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            answer = await page.goto(f"{base}/api/v1/event/public/events/{event['id']}")
            assert answer is not None and answer.status == 200
            await checked(page, f"event-page-{size}")

            await page.get_by_label("Standard — available").check()
            await page.get_by_label("Number of attendees").select_option("2")
            assert await submit(page, "Update the form") == 200
            await checked(page, f"event-form-{size}")

            await page.get_by_label("Full name").nth(0).fill("Zoë Çelik")
            await page.get_by_label("Email").nth(0).fill("zoe.celik@example")  # a mistake
            await page.get_by_label("Full name").nth(1).fill("Ζωή Παπαδοπούλου")
            await page.get_by_label("Email").nth(1).fill("zoi@example.org")
            await page.get_by_role("group", name="Lunch").nth(0).get_by_label("Any").check()
            assert await submit(page, "Register") == 422
            error = page.locator("#attendee-1-email-error")
            assert await error.inner_text() == "Enter an email address, like name@example.org."
            await error.scroll_into_view_if_needed()
            await checked(page, f"event-form-error-{size}")
            assert await page.get_by_label("Full name").nth(1).input_value() == "Ζωή Παπαδοπούλου"

            await page.get_by_label("Email").nth(0).fill("zoe.celik@example.org")
            await page.get_by_role("group", name="Lunch").nth(1).get_by_label("Vegetarian").check()
            await page.get_by_label("How did you hear of us?").fill("A colleague")
            assert await submit(page, "Register") == 200  # after the 303
            assert "/public/my-tickets/" in page.url
            await checked(page, f"event-tickets-{size}")
            codes = page.locator("svg.qr")
            assert await codes.count() == 2
            shots = []
            for n in range(2):
                await codes.nth(n).scroll_into_view_if_needed()
                shots.append(await codes.nth(n).screenshot())
        finally:
            await context.close()
    assert all(url.startswith(base) for url in requests), requests
    async with pool.acquire() as conn:
        barcodes = await conn.fetch(
            "SELECT name, barcode FROM event.registrations WHERE event_id = $1",
            uuid.UUID(event["id"]),
        )
    assert sorted(b["name"] for b in barcodes) == ["Zoë Çelik", "Ζωή Παπαδοπούλου"]
    decoded = [qr_texts(Image.open(io.BytesIO(shot))) for shot in shots]
    assert sorted(d for [d] in decoded) == sorted(b["barcode"] for b in barcodes)
