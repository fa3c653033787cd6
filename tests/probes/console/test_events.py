"""The console's events pages: the list (the landing page), the detail with its seats
gauges, publish / unpublish / mark-done, the scheduler lines and the masked outbox, in a
real browser at 1440x900 and 390x844 (the publish form also without JavaScript), and
their parity with the admin API: the same verbs, the same state, the same refusal codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.probes.console.kit import RUNS, Studio, client, csrf_of
from tests.probes.helpers import (
    BEGIN,
    Api,
    add_slot,
    add_ticket,
    api_status,
    insert_registration,
    make_event,
    register,
    run,
    scheduler,
    template,
)


def shot_name(area: str, size: str, js: bool = True) -> str:
    return f"events-{area}-{size}" + ("" if js else "-nojs")


# --- the console over httpx (for parity and statuses) -----------------------------------


@asynccontextmanager
async def console(app: Any, api: Api, *scopes: str) -> AsyncIterator[httpx.AsyncClient]:
    """A console client signed in with a fresh token of `scopes`."""
    token = (await api.token(*scopes))["Authorization"].removeprefix("Bearer ")
    async with client(app) as c:
        csrf = await csrf_of(c, "/sign-in")
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": csrf})
        assert signed.status_code == 303
        yield c


async def post_form(c: httpx.AsyncClient, path: str, **data: str) -> httpx.Response:
    """POST a console form with the CSRF token of the page it sits on (the event detail)."""
    event_path = path.rsplit("/", 1)[0]
    csrf = await csrf_of(c, event_path)
    return await c.post(path, data={"csrf_token": csrf, **data})


def state(event: dict[str, Any]) -> tuple[Any, ...]:
    """What publish, unpublish and mark-done write."""
    return (
        event["is_published"],
        event["date_publish"] is not None,
        event["stage_id"],
        event["kanban_state"],
        event["revision"],
    )


async def event_state(admin: httpx.AsyncClient, event_id: str) -> tuple[Any, ...]:
    return state((await admin.get(f"/admin/events/{event_id}")).json())


# --- browser flows ----------------------------------------------------------------------


@pytest.mark.parametrize(("size", "js"), RUNS)
async def test_list_detail_publish_unpublish_flow(
    studio: Studio, admin: httpx.AsyncClient, pool: Any, size: str, js: bool
) -> None:
    event = await make_event(admin, name="Lisbon Summit")
    await make_event(
        admin,
        name="Porto Meetup",
        date_begin="2027-06-01T09:00:00+00:00",
        date_end="2027-06-01T18:00:00+00:00",
    )
    await register(admin, event["id"], "Ada")
    await insert_registration(pool, event["id"], state="done")
    page = await studio.open("event:read", "event:write", size=size, js=js)

    # sign-in lands on the events list
    assert page.url.startswith(studio.url("/events"))
    assert await page.locator(".notice").inner_text() == "You are signed in."
    row = page.locator("table.events tbody tr", has_text="Lisbon Summit")
    assert "Not published" in await row.inner_text()
    assert "2 of 100 taken, 98 free" in await row.inner_text()
    await studio.shot(page, shot_name("list", size, js))

    # the filters narrow the list (a plain GET form)
    await page.fill("#field-q", "porto")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_load_state()
    assert await page.locator("table.events tbody tr").count() == 1
    assert "Porto Meetup" in await page.locator("table.events").inner_text()
    await page.goto(studio.url("/events"))

    # the detail: facts and the gauge with its numbers
    await page.get_by_role("link", name="Lisbon Summit").click()
    await page.wait_for_load_state()
    assert page.url == studio.url(f"/events/{event['id']}")
    gauge = page.locator("#gauge-event")
    assert await gauge.locator("[data-count=used] strong").inner_text() == "1"
    assert await gauge.locator("[data-count=reserved] strong").inner_text() == "1"
    assert await gauge.locator("[data-count=available] strong").inner_text() == "98"
    assert (
        "1 used, 1 reserved, 0 held, 98 available of 100"
        in await gauge.locator("svg title").text_content()
    )
    hrefs = await page.locator(".event-links a").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    eid = event["id"]
    assert hrefs == [
        f"/studio/registrations?event_id={eid}",
        f"/studio/desk?event_id={eid}",
        f"/studio/events/{eid}/attendance",
        f"/studio/events/{eid}/export",
        f"/studio/events/{eid}/operations",
        f"/studio/events/{eid}/schedulers",
    ]
    assert await page.get_by_role("button", name="Unpublish").count() == 0
    await studio.shot(page, shot_name("detail", size, js))

    # publish → notice → unpublish
    await page.get_by_role("button", name="Publish", exact=True).click()
    await page.wait_for_load_state()
    assert page.url.endswith("?done=published")
    assert await page.locator(".notice").inner_text() == "The event is published."
    assert "Published" in await page.locator(".badges").inner_text()
    assert (await admin.get(f"/admin/events/{event['id']}")).json()["is_published"] is True
    await studio.shot(page, shot_name("published", size, js))
    await page.get_by_role("button", name="Unpublish").click()
    await page.wait_for_load_state()
    assert await page.locator(".notice").inner_text() == "The event is no longer published."
    assert "Not published" in await page.locator(".badges").inner_text()
    assert (await admin.get(f"/admin/events/{event['id']}")).json()["is_published"] is False


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_a_refused_mark_done_shows_its_code_on_the_detail(
    studio: Studio, admin: httpx.AsyncClient, size: str
) -> None:
    event = await make_event(admin)
    page = await studio.open("event:read", "event:write", size=size)
    await page.goto(studio.url(f"/events/{event['id']}"))
    async with page.expect_response(lambda r: r.request.method == "POST") as posted:
        await page.get_by_role("button", name="Mark done").click()
    assert (await posted.value).status == 409
    summary = page.locator("#error-summary")
    assert "no_pipe_end_stage" in await summary.inner_text()
    await studio.shot(page, shot_name("mark-done-refused", size))


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_seats_gauges_equal_the_seat_read_model(
    studio: Studio, admin: httpx.AsyncClient, pool: Any, size: str
) -> None:
    event = await make_event(admin, is_multi_slots=True, seats_max=4)
    first, second = await add_slot(admin, event["id"], 10), await add_slot(admin, event["id"], 12)
    capped = await add_ticket(admin, event["id"], name="Workshop", seats_max=2)
    free = await add_ticket(admin, event["id"], name="Hallway", seats_max=0)
    for slot, ticket, st, sale in [
        (first, capped, "open", None),
        (first, capped, "done", None),
        (second, capped, "draft", "to_pay"),
        (second, capped, "open", None),
        (second, free, "open", None),
    ]:
        await insert_registration(
            pool, event["id"], slot=slot["id"], ticket=ticket["id"], state=st, sale_status=sale
        )
    seats = (await admin.get(f"/admin/events/{event['id']}/seats")).json()
    page = await studio.open("event:read", size=size)
    await page.goto(studio.url(f"/events/{event['id']}"))

    scopes = [("event", seats["event"])]
    scopes += [(f"ticket-{t['ticket_id']}", t) for t in seats["tickets"]]
    scopes += [(f"slot-{s['slot_id']}", s) for s in seats["slots"]]
    assert len(scopes) == 5
    for key, scope in scopes:
        gauge = page.locator(f"#gauge-{key}")
        shown = {
            name: int(await gauge.locator(f"[data-count={name}] strong").inner_text())
            for name in ("used", "reserved", "held")
        }
        assert shown == {n: scope[n] for n in ("used", "reserved", "held")}, key
        if scope["limited"]:
            assert (
                int(await gauge.locator("[data-count=available] strong").inner_text())
                == (scope["available"])
            )
            assert int(await gauge.locator("[data-count=cap] strong").inner_text()) == scope["cap"]
            title = await gauge.locator("svg title").text_content() or ""
            assert f"{scope['available']} available of {scope['cap']} seats" in title
        else:  # an unlimited scope: the counts without a bar
            assert await gauge.locator("svg").count() == 0
            assert (
                int(await gauge.locator("[data-count=taken] strong").inner_text())
                == (scope["taken"])
            )
    workshop = next(t for t in seats["tickets"] if t["ticket_id"] == capped["id"])
    assert workshop["available"] == 0 and workshop["held"] == 1  # full, one seat held
    assert "Sold out" in await page.locator(f"#gauge-ticket-{capped['id']}").inner_text()
    await studio.shot(page, shot_name("gauges", size))


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_schedulers_and_the_masked_outbox(
    studio: Studio, api: Api, admin: httpx.AsyncClient, size: str
) -> None:
    event = await make_event(admin, name="Mail Day")
    await register(admin, event["id"], "Grace")
    line = await scheduler(admin, event["id"], await template(admin))
    assert (await run(api, BEGIN - timedelta(hours=12))).sent == 1
    page = await studio.open("event:read", "registration:read", size=size)

    await page.goto(studio.url(f"/events/{event['id']}/schedulers"))
    row = page.locator(f"#line-{line['id']}")
    text = await row.inner_text()
    assert "1 day before the event begins" in text
    assert "Sent" in text and "1 sent, 0 pending" in text
    await studio.shot(page, shot_name("schedulers", size))

    # the outbox: picked from the events, masked like GET /admin/outbox
    await page.goto(studio.url("/outbox"))
    await page.select_option("#field-event_id", event["id"])
    await page.get_by_role("button", name="Show").click()
    await page.wait_for_load_state()
    body = await page.locator("table.outbox").inner_text()
    masked = (await admin.get("/admin/outbox", params={"event_id": event["id"]})).json()
    assert masked["items"][0]["recipient"] in body
    assert "Hello Grace" not in await page.inner_text("body")  # the body stays withheld
    await studio.shot(page, shot_name("outbox", size))  # asserts no email shows


# --- parity with the admin API ----------------------------------------------------------


async def test_publish_unpublish_mark_done_match_the_api(
    app: Any, api: Api, admin: httpx.AsyncClient
) -> None:
    ours, theirs = (await make_event(admin))["id"], (await make_event(admin))["id"]
    async with console(app, api, "event:read", "event:write") as c:
        for action, done in (("publish", "published"), ("unpublish", "unpublished")):
            answer = await post_form(c, f"/events/{ours}/{action}")
            assert answer.status_code == 303
            assert answer.headers["location"] == f"/studio/events/{ours}?done={done}"
            assert (await admin.post(f"/admin/events/{theirs}/{action}")).status_code == 200
            assert await event_state(admin, ours) == await event_state(admin, theirs)

        # no pipe_end stage: the same 409 and code on both sides
        refused = await post_form(c, f"/events/{ours}/mark-done")
        api_answer = await api_status(admin, "POST", f"/admin/events/{theirs}/mark-done")
        assert (refused.status_code, api_answer) == (409, (409, "no_pipe_end_stage"))
        assert "no_pipe_end_stage" in refused.text

        stage = (await admin.post("/admin/stages", json={"name": "Over", "pipe_end": True})).json()
        assert (await post_form(c, f"/events/{ours}/mark-done")).status_code == 303
        assert (await admin.post(f"/admin/events/{theirs}/mark-done")).status_code == 200
        assert await event_state(admin, ours) == await event_state(admin, theirs)
        assert (await event_state(admin, ours))[2] == stage["id"]

        # a scheduled publication: the form's local time is read in the event's zone
        answer = await post_form(c, f"/events/{ours}/publish", date_publish="2027-01-02T10:30")
        assert answer.status_code == 303
        published = (await admin.get(f"/admin/events/{ours}")).json()
        moment = datetime.fromisoformat(published["date_publish"])
        assert moment == datetime(2027, 1, 2, 10, 30, tzinfo=UTC)  # Lisbon is UTC in winter
        bad = await post_form(c, f"/events/{theirs}/publish", date_publish="soon")
        assert bad.status_code == 422 and 'href="#field-date_publish"' in bad.text


async def test_a_read_only_token_cannot_publish_on_either_side(
    app: Any, api: Api, admin: httpx.AsyncClient
) -> None:
    event_id = (await make_event(admin))["id"]
    headers = await api.token("event:read")
    async with console(app, api, "event:read") as c:
        page = await c.get(f"/events/{event_id}")
        assert page.status_code == 200
        assert f"/events/{event_id}/publish" not in page.text  # no button to offer
        refused = await post_form(c, f"/events/{event_id}/publish")
    api_answer = await api_status(
        api.client, "POST", f"/admin/events/{event_id}/publish", headers=headers
    )
    assert refused.status_code == 403 and "event:write" in refused.text
    assert api_answer == (403, "missing_scope")
    assert (await admin.get(f"/admin/events/{event_id}")).json()["is_published"] is False


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_denied_scope_names_event_read_like_the_api(
    studio: Studio, api: Api, size: str
) -> None:
    token = await studio.token("registration:read")
    page = await studio.open(token=token, size=size)
    answer = await page.goto(studio.url("/events"))
    assert answer is not None and answer.status == 403
    text = await studio.shot(page, shot_name("denied", size))
    assert "event:read" in text and "missing_scope" in text
    api_answer = await api_status(
        api.client, "GET", "/admin/events", headers={"Authorization": f"Bearer {token}"}
    )
    assert api_answer == (403, "missing_scope")
    outbox = await page.goto(studio.url("/outbox"))  # registration:read is enough there
    assert outbox is not None and outbox.status == 200
    assert await page.locator("#field-event_id").get_attribute("type") == "text"
