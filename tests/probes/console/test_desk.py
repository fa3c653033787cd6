"""The console's desk scan page in a real browser at 1440x900 and 390x844, with JavaScript
on and off: every desk outcome in its banner (confirmed, already registered, cancelled,
unconfirmed, an ended event, another event's ticket, an unknown barcode), the barcode field
emptied and focused after each scan, an address whose signed note discloses no attendee and
shows nothing to another session, another event or a tampered note, the validation
refusals, and a desk-only token typing the event id — each compared with the same scan
through the admin API (same outcomes, same refusal codes)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from playwright.async_api import Page

from tests.probes.console.kit import RUNS, UNKNOWN, attendee, readable_url, suffix
from tests.probes.helpers import api_status, cancel, make_event

# --- set-up through the admin API --------------------------------------------------------


async def desk_cases(admin: httpx.AsyncClient, pool: Any, desk: str, other: str) -> list[str]:
    """Barcodes to scan at the desk of `desk`, in order, one per outcome of the frozen
    branch order (a registration twice: confirmed, then already registered)."""
    fresh = await attendee(admin, desk)
    cancelled = await attendee(admin, desk)
    await cancel(admin, cancelled["id"])
    draft = await attendee(admin, desk)
    assert (await admin.post(f"/admin/registrations/{draft['id']}/set-draft")).status_code == 200
    elsewhere = await attendee(admin, other)
    ended = await make_event(admin, name="Finished meetup")
    late = await attendee(admin, ended["id"])
    await pool.execute(
        "UPDATE event.events SET date_begin = now() - interval '2 days',"
        " date_end = now() - interval '1 hour' WHERE id = $1",
        uuid.UUID(ended["id"]),
    )
    codes = (fresh, fresh, cancelled, draft, late, elsewhere)
    return [c["barcode"] for c in codes] + [UNKNOWN]


# the outcome of each of `desk_cases`' barcodes, with the banner kind it shows
EXPECTED = [
    ("confirmed_registration", "good"),
    ("already_registered", "warn"),
    ("canceled_registration", "bad"),
    ("unconfirmed_registration", "warn"),
    ("not_ongoing_event", "bad"),
    ("need_manual_confirmation", "warn"),
    ("invalid_ticket", "bad"),
]


# --- the desk ------------------------------------------------------------------------------


async def scan_in(page: Page, barcode: str) -> None:
    """Type a barcode and press Enter, as a scanner does; wait for the 303's page."""
    await page.fill("#field-barcode", barcode)
    async with page.expect_navigation():
        await page.press("#field-barcode", "Enter")


async def focused(page: Page) -> str:
    return str(await page.evaluate("() => document.activeElement && document.activeElement.id"))


@pytest.mark.parametrize(("size", "js"), RUNS)
async def test_desk_scans_show_every_outcome_like_the_api(studio, admin, pool, size, js):
    ev = await make_event(admin, name="Desk day")
    other = await make_event(admin, name="Other day")
    ours = await desk_cases(admin, pool, ev["id"], other["id"])
    twins = await desk_cases(admin, pool, ev["id"], other["id"])
    page = await studio.open("desk:scan", "event:read", size=size, js=js)
    await page.goto(studio.url(f"/desk?event_id={ev['id']}"))
    assert await page.input_value("#field-event_id") == ev["id"]  # preselected
    assert await focused(page) == "field-barcode"  # autofocus, with or without JS
    seen = []
    for barcode, (expected, kind) in zip(ours, EXPECTED, strict=True):
        await scan_in(page, barcode)
        banner = page.locator("#desk-outcome")
        code = await banner.locator(".code").inner_text()
        seen.append(code)
        assert await banner.get_attribute("role") == "status"
        assert f"banner--{kind}" in (await banner.get_attribute("class") or "")
        assert await page.input_value("#field-barcode") == ""
        assert await focused(page) == "field-barcode"
        shown = readable_url(page.url)  # a signed note only: masked, no barcode
        assert "Ada" not in shown and barcode not in shown and "outcome" in shown
        assert "scan=" in page.url and "registration=" not in page.url
        if js or expected == "confirmed_registration":
            text = await studio.shot(page, f"desk-{code}-{suffix(size, js)}")
            assert "Ada Lovelace" not in text  # the name is masked after the redirect
            if expected == "confirmed_registration":
                assert "Checked in" in text and "A*** L***" in text
    assert seen == [outcome for outcome, _ in EXPECTED]
    # the note is bound to this session: another operator's browser, or a tampered note,
    # shows no outcome and no attendee
    stranger = await studio.open("desk:scan", size=size, js=js)
    await stranger.goto(page.url)
    assert await stranger.locator("#desk-outcome").count() == 0
    last = page.url
    await page.goto(last.replace(ev["id"], other["id"]))  # another desk's event
    assert await page.locator("#desk-outcome").count() == 0
    await page.goto(last.replace("scan=", "scan=x"))
    assert await page.locator("#desk-outcome").count() == 0
    # parity: the twin registrations scanned through the API give the same outcomes
    api_seen = []
    for barcode in twins:
        r = await admin.post("/admin/desk/scan", json={"event_id": ev["id"], "barcode": barcode})
        assert r.status_code == 200, r.text
        api_seen.append(r.json()["outcome"])
    assert api_seen == seen
    await refused_scans(studio, page, admin, ev["id"], suffix(size, js))


async def refused_scans(studio: Any, page: Page, admin: Any, event_id: str, name: str) -> None:
    """An empty or too long barcode: the API's validation refusal in the error summary,
    linked to the field, the event kept."""
    for barcode in ("", "7" * 65):
        await scan_in(page, barcode)
        summary = page.locator("#error-summary")
        assert "validation_failed" in await summary.inner_text()
        assert await summary.locator('a[href="#field-barcode"]').count() == 1
        assert await page.input_value("#field-event_id") == event_id
        status, code = await api_status(
            admin, "POST", "/admin/desk/scan", json={"event_id": event_id, "barcode": barcode}
        )
        assert (status, code) == (422, "validation_failed")
    await studio.shot(page, f"desk-refused-{name}")


async def test_a_desk_only_token_types_the_event_id(studio, admin):
    ev = await make_event(admin)
    guest = await attendee(admin, ev["id"])
    page = await studio.open("desk:scan", size="phone")
    await page.goto(studio.url("/desk"))
    assert await page.get_attribute("#field-event_id", "type") == "text"  # no event list
    await page.fill("#field-event_id", ev["id"])
    await scan_in(page, guest["barcode"])
    assert await page.locator("#desk-outcome .code").inner_text() == "confirmed_registration"
    assert await page.input_value("#field-event_id") == ev["id"]  # kept for the next scan
