"""The console's registrations pages in a real browser, each beside the admin API: the
masked list and the audited reveal, the correction (parity, stale, missing reason),
cancel and reactivate (parity, seats exhausted), a denied scope, and keyboard-only use of
the correction form. Every flow runs at desktop and phone size; form flows also without
JavaScript."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from playwright.async_api import Page

from tests.probes.console.kit import Studio, client, csrf_of
from tests.probes.helpers import api_status, cancel, correct, make_event, register, seed

SIZES = [("desktop", True), ("phone", True)]
FORMS = [("desktop", True), ("phone", True), ("desktop", False), ("phone", False)]
EDITOR = (
    "registration:read",
    "registration:correct",
    "registration:lifecycle",
    "event:read",
)


def tag(size: str, js: bool) -> str:
    return size if js else f"{size}-nojs"


async def attendee(admin: httpx.AsyncClient, event_id: str, name: str, email: str) -> str:
    body = {"event_id": event_id, "name": name, "email": email, "phone": "+351 912 345 678"}
    r = await admin.post("/admin/registrations", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def full_view(admin: httpx.AsyncClient, rid: str) -> dict[str, Any]:
    r = await admin.get(f"/admin/registrations/{rid}", params={"pii": "full"})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def history(admin: httpx.AsyncClient, rid: str) -> list[dict[str, Any]]:
    r = await admin.get(f"/admin/registrations/{rid}/revisions")
    assert r.status_code == 200, r.text
    return [
        {k: v for k, v in item.items() if k not in ("id", "actor", "at")}
        for item in r.json()["items"]
    ]


async def pii_reads(pool: asyncpg.Pool) -> list[tuple[str, str, Any, Any]]:
    rows = await pool.fetch(
        "SELECT verb, object_kind, object_id, summary FROM event.event_audit_log"
        " WHERE verb LIKE '%pii_read' ORDER BY id"
    )
    return [(r["verb"], r["object_kind"], r["object_id"], r["summary"]) for r in rows]


async def submit(page: Page, selector: str) -> int:
    """Click a submit button and answer the status of the POST it sent."""
    async with page.expect_response(lambda r: r.request.method == "POST") as info:
        await page.click(selector)
    await page.wait_for_load_state()
    return (await info.value).status


async def test_the_list_is_masked_and_the_reveal_is_audited_like_the_api(
    studio: Studio, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    rid = await attendee(admin, event["id"], "Grace Hopper", "grace@example.org")
    await register(admin, event["id"], "Ada")
    for size, js in FORMS:
        page = await studio.open(
            "registration:read", "registration:pii", "event:read", size=size, js=js
        )
        await page.goto(studio.url(f"/registrations?event_id={event['id']}"))
        html = await page.content()
        assert "g***@example.org" in html and "grace@example.org" not in html
        assert "***78" in html and "+351 912 345 678" not in html
        # only the masked list is photographed: the probe forbids a full email in a shot
        await studio.shot(page, f"registrations-list-{tag(size, js)}")

        before = len(await pii_reads(pool))
        assert await submit(page, "form[action$='/registrations/reveal'] button") == 200
        html = await page.content()
        assert "grace@example.org" in html and "this read is audited" in html
        assert page.url.endswith("/studio/registrations/reveal")  # no bookmarkable full view
        reads = (await pii_reads(pool))[before:]
        assert reads == [("registration_pii_read", "registration", None, {"rows": 2})]
        await page.click("text=Hide")
        assert "grace@example.org" not in await page.content()

        await page.goto(studio.url(f"/registrations/{rid}"))
        assert "grace@example.org" not in await page.content()
        assert await submit(page, "form[action$='/reveal'] button") == 200
        assert "grace@example.org" in await page.content()
        detail_read = (await pii_reads(pool))[-1]
        assert detail_read[:3] == ("registration_pii_read", "registration", uuid.UUID(rid))

    # the API's pii=full writes the same audit rows
    before = len(await pii_reads(pool))
    listed = await admin.get(
        "/admin/registrations", params={"event_id": event["id"], "pii": "full"}
    )
    assert listed.status_code == 200
    await full_view(admin, rid)
    api_reads = (await pii_reads(pool))[before:]
    assert api_reads[0] == ("registration_pii_read", "registration", None, {"rows": 2})
    assert api_reads[1][:3] == ("registration_pii_read", "registration", uuid.UUID(rid))
    assert api_reads[1] == detail_read


async def test_the_list_asks_for_an_event_and_pages_with_a_cursor(
    studio: Studio, admin: httpx.AsyncClient, api: Any
) -> None:
    event = await make_event(admin, name="Paged conf")
    await seed(api, event["id"], 55)
    for size, js in SIZES:
        page = await studio.open("registration:read", "event:read", size=size, js=js)
        await page.goto(studio.url("/registrations"))
        assert "Choose an event" in await page.inner_text("main")
        await page.select_option("#field-event_id", event["id"])
        await page.click("form.filters button")
        await page.wait_for_load_state()
        assert await page.locator("table.reg-table tbody tr").count() == 50
        await studio.shot(page, f"registrations-paged-{size}")
        await page.click("text=Next page")
        await page.wait_for_load_state()
        assert await page.locator("table.reg-table tbody tr").count() == 5
        await page.fill("#field-q", "G7")
        await page.click("form.filters button")
        await page.wait_for_load_state()
        assert await page.locator("table.reg-table tbody tr").count() == 1  # G7 only (no G70)


async def test_a_correction_through_the_console_matches_the_api(
    studio: Studio, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin)
    for size, js in FORMS:
        mine = await attendee(admin, event["id"], "Grace", f"g.{size}{js}@example.org")
        theirs = await attendee(admin, event["id"], "Grace", f"t.{size}{js}@example.org")
        page = await studio.open(*EDITOR, size=size, js=js)
        await page.goto(studio.url(f"/registrations/{mine}"))
        await studio.shot(page, f"registrations-detail-{tag(size, js)}")
        await page.fill("#field-name", "Grace Hopper")
        await page.fill("#field-company_name", "Navy")
        await page.fill("#field-date_closed", "2027-05-12 18:00")
        await page.fill("#field-reason", "spelling")
        assert await submit(page, "form[action$='/correct'] button") == 303
        assert "The correction is saved." in await page.inner_text("main")
        await studio.shot(page, f"registrations-corrected-{tag(size, js)}")
        r = await correct(
            admin,
            theirs,
            reason="spelling",
            name="Grace Hopper",
            company_name="Navy",
            date_closed="2027-05-12T18:00:00+00:00",
        )
        assert r.status_code == 200, r.text
        a, b = await full_view(admin, mine), await full_view(admin, theirs)
        for key in ("name", "company_name", "date_closed", "version", "state"):
            assert a[key] == b[key], key
        assert a["version"] == 2
        assert await history(admin, mine) == await history(admin, theirs)
        assert "G*** H***" in await page.inner_text("main")


async def test_removing_values_through_the_console_matches_the_api(
    studio: Studio, admin: httpx.AsyncClient
) -> None:
    """A ticked removal empties the field exactly as a PATCH with null does; a typed value
    and a tick on one field are refused (422 validation_failed, linked to the field)."""
    event = await make_event(admin)
    mine = await attendee(admin, event["id"], "Grace", "rm.mine@example.org")
    theirs = await attendee(admin, event["id"], "Grace", "rm.theirs@example.org")
    page = await studio.open(*EDITOR, size="desktop", js=False)
    await page.goto(studio.url(f"/registrations/{mine}"))
    await page.fill("#field-email", "x@example.org")
    await page.check("#field-clear_email")
    await page.check("#field-clear_phone")
    assert await submit(page, "form[action$='/correct'] button") == 422  # no reason
    assert await page.is_checked("#field-clear_email")  # the ticks survive a refusal
    assert await page.is_checked("#field-clear_phone")
    await page.fill("#field-reason", "asked to be forgotten")
    assert await submit(page, "form[action$='/correct'] button") == 422  # email: both
    summary = await page.inner_text("#error-summary")
    assert "validation_failed" in summary
    assert await page.get_attribute("#error-summary a", "href") == "#field-email"
    assert await page.is_checked("#field-clear_phone")
    await page.fill("#field-email", "")
    await page.uncheck("#field-clear_email")
    assert await submit(page, "form[action$='/correct'] button") == 303
    r = await correct(admin, theirs, reason="asked to be forgotten", phone=None)
    assert r.status_code == 200, r.text
    a, b = await full_view(admin, mine), await full_view(admin, theirs)
    assert a["phone"] == b["phone"] == ""
    assert a["email"] == "rm.mine@example.org" and a["version"] == b["version"] == 2
    assert await history(admin, mine) == await history(admin, theirs)


async def test_a_stale_correction_shows_changed_since_you_opened_it_like_the_api(
    studio: Studio, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin)
    for size, js in FORMS:
        rid = await register(admin, event["id"], "Ada")
        page = await studio.open(*EDITOR, size=size, js=js)
        await page.goto(studio.url(f"/registrations/{rid}"))
        assert (await correct(admin, rid, name="Ada Lovelace")).status_code == 200
        await page.fill("#field-company_name", "Analytical")
        await page.fill("#field-reason", "company")
        assert await submit(page, "form[action$='/correct'] button") == 412
        text = await page.inner_text("main")
        assert "changed since you opened it" in text and "stale_revision" in text
        await studio.shot(page, f"registrations-stale-{tag(size, js)}")
        old = await admin.patch(
            f"/admin/registrations/{rid}",
            json={"reason": "company", "company_name": "Analytical"},
            headers={"If-Match": "1"},
        )
        assert old.status_code == 412 and old.json()["error"]["code"] == "stale_revision"
        # the page now carries the current version: the same change goes through
        await page.fill("#field-company_name", "Analytical")
        await page.fill("#field-reason", "company")
        assert await submit(page, "form[action$='/correct'] button") == 303
        assert (await full_view(admin, rid))["version"] == 3


async def test_a_correction_without_a_reason_links_the_reason_field(
    studio: Studio, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin)
    rid = await register(admin, event["id"], "Ada")
    for size, js in FORMS:
        page = await studio.open(*EDITOR, size=size, js=js)
        await page.goto(studio.url(f"/registrations/{rid}"))
        await page.fill("#field-name", "Ada King")
        assert await submit(page, "form[action$='/correct'] button") == 422
        link = page.locator("#error-summary a")
        assert await link.get_attribute("href") == "#field-reason"
        assert await page.locator("#field-reason").count() == 1
        assert await page.input_value("#field-name") == "Ada King"  # kept to fix and resend
        await studio.shot(page, f"registrations-reason-{tag(size, js)}")
    api = await admin.patch(
        f"/admin/registrations/{rid}", json={"name": "Ada King"}, headers={"If-Match": "1"}
    )
    assert api.status_code == 422 and api.json()["error"]["field"] == "reason"
    assert (await full_view(admin, rid))["version"] == 1


async def lifecycle(page: Page, studio: Studio, rid: str, action: str, reason: str) -> int:
    await page.goto(studio.url(f"/registrations/{rid}"))
    await page.fill("#field-lifecycle_reason", reason)
    return await submit(page, f"form[action$='/{action}'] button")


async def test_cancel_and_reactivate_through_the_console_match_the_api(
    studio: Studio, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin, seats_max=50)
    for size, js in FORMS:
        full = await make_event(admin, name="Tiny", seats_max=1)
        mine = await register(admin, event["id"], "Mine")
        theirs = await register(admin, event["id"], "Theirs")
        page = await studio.open(*EDITOR, size=size, js=js)
        assert await lifecycle(page, studio, mine, "cancel", "asked to") == 303
        assert "The registration is cancelled." in await page.inner_text("main")
        await studio.shot(page, f"registrations-cancelled-{tag(size, js)}")
        assert (await cancel(admin, theirs, reason="asked to")).status_code == 200
        assert await lifecycle(page, studio, mine, "reactivate", "came back") == 303
        assert "The registration is active again." in await page.inner_text("main")
        again = await admin.post(
            f"/admin/registrations/{theirs}/reactivate", json={"reason": "came back"}
        )
        assert again.status_code == 200, again.text
        a, b = await full_view(admin, mine), await full_view(admin, theirs)
        assert (a["state"], a["version"]) == (b["state"], b["version"]) == ("open", 3)
        assert await history(admin, mine) == await history(admin, theirs)

        # reactivation refused with the API's code when the seats are gone
        first = await register(admin, full["id"], "First")
        assert (await cancel(admin, first)).status_code == 200
        await register(admin, full["id"], "Second")
        assert await lifecycle(page, studio, first, "reactivate", "back") == 409
        assert "event_seats_exhausted" in await page.inner_text("main")
        await studio.shot(page, f"registrations-exhausted-{tag(size, js)}")
        status = await api_status(
            admin, "POST", f"/admin/registrations/{first}/reactivate", json={"reason": "back"}
        )
        assert status == (409, "event_seats_exhausted")


async def test_a_token_without_the_scope_sees_no_form_and_its_post_is_refused(
    studio: Studio, admin: httpx.AsyncClient, api: Any
) -> None:
    event = await make_event(admin)
    rid = await register(admin, event["id"], "Ada")
    reader = await api.token("registration:read")
    for size, js in SIZES:
        page = await studio.open("registration:read", size=size, js=js)
        await page.goto(studio.url(f"/registrations/{rid}"))
        assert await page.locator("#field-name").count() == 0
        assert await page.locator("#field-lifecycle_reason").count() == 0
        await studio.shot(page, f"registrations-readonly-{size}")
        csrf = await page.get_attribute("input[name=csrf_token]", "value")
        form = {"csrf_token": csrf or "", "version": "1", "name": "X", "reason": "r"}
        refused = await page.request.post(studio.url(f"/registrations/{rid}/correct"), form=form)
        assert refused.status == 403
        assert "registration:correct" in await refused.text()
        lifecycle_form = {"csrf_token": csrf or "", "version": "1", "lifecycle_reason": "r"}
        refused = await page.request.post(
            studio.url(f"/registrations/{rid}/cancel"), form=lifecycle_form
        )
        assert refused.status == 403 and "registration:lifecycle" in await refused.text()
        refused = await page.request.post(
            studio.url(f"/registrations/{rid}/reveal"), form={"csrf_token": csrf or ""}
        )
        assert refused.status == 403 and "registration:pii" in await refused.text()
    api_patch = await api.client.patch(
        f"/admin/registrations/{rid}",
        json={"reason": "r", "name": "X"},
        headers={**reader, "If-Match": "1"},
    )
    assert api_patch.status_code == 403
    assert api_patch.json()["error"]["code"] == "missing_scope"
    assert (await full_view(admin, rid))["version"] == 1


RING = "solid 3px rgb(255, 191, 71)"  # studio.css :focus-visible
ORDER = [
    "field-name",
    "field-email",
    "field-phone",
    "field-company_name",
    "field-clear_name",
    "field-clear_email",
    "field-clear_phone",
    "field-clear_company_name",
    "field-date_closed",
    "field-clear_date_closed",
    "field-reason",
    "submit",
]


async def focused(page: Page) -> tuple[str, str]:
    """The focused element's id (`submit` for the correction's button) and its outline:
    the console's own ring (3 px solid), not the browser's default `auto` one."""
    return tuple(
        await page.evaluate(
            """() => {
                const el = document.activeElement;
                const id = el.type === "submit" && el.form && el.form.action.endsWith("/correct")
                    ? "submit" : (el.id || el.tagName);
                const style = getComputedStyle(el);
                return [id, `${style.outlineStyle} ${style.outlineWidth} ${style.outlineColor}`];
            }"""
        )
    )  # type: ignore[return-value]


@pytest.mark.parametrize(("size", "js"), FORMS)
async def test_the_correction_form_works_with_the_keyboard_alone(
    studio: Studio, admin: httpx.AsyncClient, size: str, js: bool
) -> None:
    event = await make_event(admin)
    rid = await register(admin, event["id"], "Ada")
    page = await studio.open(*EDITOR, size=size, js=js)
    await page.goto(studio.url(f"/registrations/{rid}"))
    seen: list[str] = []
    for _ in range(60):
        await page.keyboard.press("Tab")
        ident, outline = await focused(page)
        assert outline == RING, f"{ident} shows {outline}, not the console's focus ring"
        if ident in ORDER:
            seen.append(ident)
            if ident == "field-name":
                await page.keyboard.type("Ada King")
            if ident == "field-reason":
                await page.keyboard.type("married name")
        if ident == "submit":
            break
    assert seen == ORDER
    async with page.expect_response(lambda r: r.request.method == "POST") as info:
        await page.keyboard.press("Enter")
    assert (await info.value).status == 303
    await page.wait_for_load_state()
    assert "The correction is saved." in await page.inner_text("main")
    await studio.shot(page, f"registrations-keyboard-{tag(size, js)}")
    assert (await full_view(admin, rid))["name"] == "Ada King"


async def test_the_list_names_a_bad_filter_and_asks_for_an_id_without_event_read(
    app: Any, api: Any, admin: httpx.AsyncClient
) -> None:
    event = await make_event(admin)
    headers = await api.token("registration:read")
    token = headers["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c)
        await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        asking = await c.get("/registrations")
        assert asking.status_code == 200 and 'id="field-event_id"' in asking.text
        assert "paste the event" in asking.text  # no event:read: a text field, not a list
        bad = await c.get("/registrations", params={"event_id": "nope", "state": "gone"})
        assert bad.status_code == 422
        assert 'href="#field-event_id"' in bad.text and 'href="#field-state"' in bad.text
        listed = await c.get("/registrations", params={"event_id": event["id"], "state": "open"})
        assert listed.status_code == 200 and "No registrations match" in listed.text
    async with client(app) as anonymous:
        answer = await anonymous.post(f"/registrations/{event['id']}/correct", data={})
    assert answer.status_code == 303 and "/studio/sign-in" in answer.headers["location"]
