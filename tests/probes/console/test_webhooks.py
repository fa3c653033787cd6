"""The console's webhooks page: the endpoints and the new-endpoint form (`create_endpoint`
with the service's egress guard), the secret shown once in the answer to the form (and
a reload of that answer making nothing), rotation, the refusals beside the form with the
values kept, ping, the delivery log and redelivery against a real receiver, enable and
disable, delete after its confirmation, and the company fence."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest
from axe_playwright_python.async_playwright import Axe

from events_svc import errors
from tests.probes.console.kit import Studio, client, code_of, console_of, csrf_of, submit
from tests.probes.helpers import Api, company_client, make_event
from tests.probes.webhooks.kit import Clock, hand_loop, turn_until_quiet, utc_now
from tests.probes.webhooks.receiver import Receiver, receiver

HOOK = "https://hooks.example.com/in"
PUBLIC = "93.184.216.34"  # the injected resolver's answer: a public address
SECRET = re.compile(r"whsec_[A-Za-z0-9+/=]{44}")


@pytest.fixture
def names(app: Any) -> None:
    """The guard resolves hooks.example.com to a public address, and nothing else (the
    probes' settings keep private addresses refused)."""

    async def resolve(host: str, port: int) -> list[str]:
        if host != "hooks.example.com":
            raise OSError("no such name")
        return [PUBLIC]

    app.state.events.egress.resolver = resolve


@pytest.fixture
def sink() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


def hidden(page: str, name: str) -> str:
    """A hidden field's value: the create form's `opened`, the rotate form's `seen`."""
    found = re.search(f'name="{name}" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def new_form(csrf: str, page: str, **over: Any) -> dict[str, Any]:
    form: dict[str, Any] = {
        "csrf_token": csrf,
        "opened": hidden(page, "opened"),
        "url": HOOK,
        "event_types": ["registration.created", "ping"],
        "event_id": "",
        "description": "CRM sync",
        "active": "1",
    }
    form.update(over)
    return form


async def stored(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return await pool.fetch(
        "SELECT id, url, secret, previous_secret, active FROM event.webhook_endpoints"
        " ORDER BY created_at"
    )


async def test_create_shows_the_secret_once_and_rotation_too(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool, names: None
):
    event = await make_event(admin)
    async with console_of(api, "webhook:write", "registration:pii", "event:read") as (c, csrf):
        listing = await c.get("/webhooks")
        assert listing.status_code == 200 and "No endpoint yet." in listing.text
        assert 'href="/studio/webhooks" aria-current="page"' in listing.text
        for kind in errors.EVENT_TYPES:  # the closed list, as boxes
            assert f'name="event_types" value="{kind}"' in listing.text
        assert 'name="include_pii"' in listing.text and "All events" in listing.text

        form = new_form(csrf, listing.text)
        made = await c.post("/webhooks", data=form)
        assert made.status_code == 201  # the answer itself: no address holds the secret
        (row,) = await stored(pool)
        assert SECRET.findall(made.text) == [row["secret"]]
        assert "shown this once" in made.text and "CRM sync" in made.text
        assert "set-cookie" not in made.headers or row["secret"] not in made.headers["set-cookie"]

        again = await c.get(f"/webhooks/{row['id']}")
        assert again.status_code == 200 and not SECRET.search(again.text)
        assert "registration.created" in again.text and "All events" in again.text
        listed = await c.get("/webhooks")
        assert f'id="hook-{row["id"]}"' in listed.text and HOOK in listed.text
        assert "Active" in listed.text and not SECRET.search(listed.text)

        # the browser sends the answered form again (a reload): nothing made, no secret
        replay = await c.post("/webhooks", data=form)
        assert replay.status_code == 303
        assert replay.headers["location"] == f"/studio/webhooks/{row['id']}?done=webhook_replayed"
        assert len(await stored(pool)) == 1

        rotated = await c.post(
            f"/webhooks/{row['id']}/rotate-secret",
            data={"csrf_token": csrf, "seen": hidden(again.text, "seen")},
        )
        assert rotated.status_code == 200
        (after,) = await stored(pool)
        assert after["previous_secret"] == row["secret"] != after["secret"]
        assert SECRET.findall(rotated.text) == [after["secret"]]
        assert "keeps signing beside it" in rotated.text
        # sent again, the rotate form is stale: no second rotation, no secret
        twice = await c.post(
            f"/webhooks/{row['id']}/rotate-secret",
            data={"csrf_token": csrf, "seen": hidden(again.text, "seen")},
        )
        assert twice.status_code == 412 and "stale_revision" in code_of(twice.text)
        assert not SECRET.search(twice.text)
        assert (await stored(pool))[0]["secret"] == after["secret"]
        shown = await c.get(f"/webhooks/{row['id']}")
        assert not SECRET.search(shown.text) and "Still signs until" in shown.text

        # another form, the same URL, one event: a new endpoint, not a replay
        page = (await c.get("/webhooks")).text
        assert f'<option value="{event["id"]}">PyCon Lisbon (2027-05-10)</option>' in page
        scoped = await c.post("/webhooks", data=new_form(csrf, page, event_id=event["id"]))
        assert scoped.status_code == 201 and len(SECRET.findall(scoped.text)) == 1
        assert len(await stored(pool)) == 2
        assert (
            '<td data-label="Event">PyCon Lisbon (2027-05-10)</td>'
            in (await c.get("/webhooks")).text
        )


async def test_refusals_show_beside_the_form_with_the_values_kept(
    api: Api, pool: asyncpg.Pool, names: None
):
    async with console_of(api, "webhook:write", "registration:pii") as (c, csrf):
        page = (await c.get("/webhooks")).text
        assert 'name="event_id" type="text"' in page  # no event:read: an id, not a list
        private = await c.post("/webhooks", data=new_form(csrf, page, url="http://10.1.2.3/in"))
        assert private.status_code == 422
        assert "webhook_url_not_allowed" in code_of(private.text)
        assert 'href="#field-url"' in private.text and 'value="http://10.1.2.3/in"' in private.text
        assert 'value="CRM sync"' in private.text
        assert 'value="registration.created" checked' in private.text
        assert 'value="event.updated" checked' not in private.text

        forged = await c.post(
            "/webhooks", data=new_form(csrf, page, event_types=["registration.deleted"])
        )
        assert forged.status_code == 422 and "unknown_event_type" in code_of(forged.text)
        assert "registration.deleted" not in forged.text  # never echoed
        assert 'href="#field-event_types"' in forged.text
        none = await c.post("/webhooks", data=new_form(csrf, page, event_types=[]))
        assert none.status_code == 422 and "Tick at least one event type." in none.text
    assert await stored(pool) == []

    async with console_of(api, "webhook:write") as (c, csrf):
        page = (await c.get("/webhooks")).text
        assert 'name="include_pii"' not in page  # only for registration:pii
        pii = await c.post("/webhooks", data=new_form(csrf, page, include_pii="1"))
        assert pii.status_code == 403 and "missing_scope" in code_of(pii.text)
        assert 'value="https://hooks.example.com/in"' in pii.text  # the form, kept
        assert await stored(pool) == []
        made = await c.post("/webhooks", data=new_form(csrf, page))
        assert made.status_code == 201
        (row,) = await stored(pool)
        edit = await c.post(
            f"/webhooks/{row['id']}",
            data={"csrf_token": csrf, "url": "http://127.0.0.1/x", "event_types": ["ping"]},
        )
        assert edit.status_code == 422 and "webhook_url_not_allowed" in code_of(edit.text)
        assert 'value="http://127.0.0.1/x"' in edit.text
        assert (await stored(pool))[0]["url"] == HOOK
        saved = await c.post(
            f"/webhooks/{row['id']}",
            data={"csrf_token": csrf, "url": HOOK, "event_types": ["event.updated", "ping"]},
        )
        assert saved.headers["location"].endswith("?done=webhook_saved")
        shown = await c.get(f"/webhooks/{row['id']}", params={"done": "webhook_saved"})
        assert "The endpoint is saved." in shown.text
        assert 'value="event.updated" checked' in shown.text
        assert 'value="registration.created" checked' not in shown.text

    async with console_of(api, "event:read") as (c, _):
        assert (await c.get("/webhooks")).status_code == 403


async def test_ping_redeliver_disable_and_delete(
    api: Api, admin: httpx.AsyncClient, sink: Receiver, app: Any, pool: asyncpg.Pool
):
    clock = Clock(utc_now())
    loop = hand_loop(app, clock)  # the app reads this clock; private addresses allowed
    try:
        hook = (
            await admin.post(
                "/admin/webhooks", json={"url": f"{sink.url}/in", "event_types": ["ping"]}
            )
        ).json()
        path = f"/webhooks/{hook['id']}"
        async with console_of(api, "webhook:write") as (c, csrf):
            empty = await c.get(path)
            assert "No attempt yet" in empty.text
            pinged = await c.post(f"{path}/ping", data={"csrf_token": csrf})
            assert pinged.headers["location"] == f"/studio{path}?done=webhook_pinged"
            (first,) = (await admin.get(f"/admin{path}/deliveries")).json()["items"]
            page = (await c.get(path, params={"done": "webhook_pinged"})).text
            assert "A ping is queued" in page and f'id="attempt-{first["id"]}"' in page
            assert first["message_id"] in page and "Pending" in page

            await turn_until_quiet(loop)
            clock.move(seconds=1)  # the log is newest first: the next attempt is later
            assert len(sink.got("/in")) == 1
            page = (await c.get(path)).text
            assert "Succeeded" in page and '<td data-label="Status">200</td>' in page

            again = await c.post(
                f"/webhook-deliveries/{first['id']}/redeliver",
                data={"csrf_token": csrf, "endpoint_id": hook["id"]},
            )
            assert again.headers["location"] == f"/studio{path}?done=webhook_redelivered"
            newest, older = (await admin.get(f"/admin{path}/deliveries")).json()["items"]
            assert (newest["attempt"], newest["state"]) == (2, "pending")
            assert newest["message_id"] == older["message_id"] == first["message_id"]
            page = (await c.get(path)).text
            assert page.index(f'id="attempt-{newest["id"]}"') < page.index(
                f'id="attempt-{first["id"]}"'
            )

            off = await c.post(f"{path}/disable", data={"csrf_token": csrf})
            assert off.headers["location"].endswith("?done=webhook_disabled")
            refused = await c.post(
                f"/webhook-deliveries/{first['id']}/redeliver",
                data={"csrf_token": csrf, "endpoint_id": hook["id"]},
            )
            assert refused.status_code == 409
            assert "webhook_endpoint_disabled" in code_of(refused.text)
            assert (
                "enable it before redelivering" in refused.text
                and "Enable</button>" in refused.text
            )
            on = await c.post(f"{path}/enable", data={"csrf_token": csrf})
            assert on.headers["location"].endswith("?done=webhook_enabled")
            assert (await admin.get(f"/admin{path}")).json()["active"] is True

            confirm = await c.get(f"{path}/delete")
            assert confirm.status_code == 200 and "This cannot be undone" in confirm.text
            assert f'action="/studio{path}/delete"' in confirm.text
            gone = await c.post(f"{path}/delete", data={"csrf_token": csrf})
            assert gone.headers["location"] == "/studio/webhooks?done=webhook_deleted"
            assert (await admin.get(f"/admin{path}")).status_code == 404
            assert (await c.get(path)).status_code == 404
    finally:
        await loop.sender.close()


async def test_the_log_pages_newest_first(api: Api, admin: httpx.AsyncClient, names: None):
    hook = (await admin.post("/admin/webhooks", json={"url": HOOK, "event_types": ["ping"]})).json()
    for _ in range(51):
        assert (await admin.post(f"/admin/webhooks/{hook['id']}/ping")).status_code == 202
    async with console_of(api, "webhook:write") as (c, _):
        first = await c.get(f"/webhooks/{hook['id']}")
        assert first.text.count('id="attempt-') == 50 and 'rel="next"' in first.text
        start = first.text.index('rel="next"')
        href = first.text[first.text.rindex('href="', 0, start) + 6 : start - 2]
        second = await c.get(href.replace("&amp;", "&").removeprefix("/studio"))
        assert second.status_code == 200 and second.text.count('id="attempt-') == 1
        assert "First page" in second.text and 'name="cursor"' in second.text


async def test_a_company_sees_only_its_own_endpoints(api: Api, pool: asyncpg.Pool, names: None):
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    body = {"url": HOOK, "event_types": ["ping"]}
    async with await company_client(api, theirs) as other:
        foreign = (await other.post("/admin/webhooks", json=body)).json()
        delivery = (await other.post(f"/admin/webhooks/{foreign['id']}/ping")).json()
    async with await company_client(api, ours) as mine:
        own = (await mine.post("/admin/webhooks", json={**body, "description": "ours"})).json()
    async with client(api.app) as c:
        token = (await api.token("webhook:write", company=ours))["Authorization"][7:]
        await c.post("/sign-in", data={"token": token, "csrf_token": await csrf_of(c)})
        csrf = await csrf_of(c)
        listed = await c.get("/webhooks")
        assert f'id="hook-{own["id"]}"' in listed.text
        assert foreign["id"] not in listed.text
        answers = {
            (await c.get(f"/webhooks/{foreign['id']}")).status_code,
            (await c.get(f"/webhooks/{foreign['id']}/delete")).status_code,
        }
        for action in ("ping", "rotate-secret", "disable", "delete"):
            r = await c.post(f"/webhooks/{foreign['id']}/{action}", data={"csrf_token": csrf})
            answers.add(r.status_code)
        r = await c.post(
            f"/webhook-deliveries/{delivery['id']}/redeliver",
            data={"csrf_token": csrf, "endpoint_id": foreign["id"]},
        )
        answers.add(r.status_code)
        assert answers == {404}
    kept = {r["id"]: r for r in await stored(pool)}
    assert kept[uuid.UUID(foreign["id"])]["active"] is True
    assert await pool.fetchval("SELECT count(*) FROM event.webhook_deliveries") == 1


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_creating_an_endpoint_in_a_browser(studio: Studio, names: None, size: str):
    page = await studio.open("*", size=size)  # lands on the events page
    async with page.expect_navigation():
        await page.get_by_role("link", name="Webhooks").click()
    await page.fill("#field-url", "http://10.1.2.3/in")
    await page.get_by_label("registration.created").check()
    assert await submit(page, "Create endpoint") == 422
    assert "webhook_url_not_allowed" in await page.inner_text("#error-summary")
    assert await page.input_value("#field-url") == "http://10.1.2.3/in"
    assert await page.get_by_label("registration.created").is_checked()
    await page.fill("#field-url", HOOK)
    assert await submit(page, "Create endpoint") == 201
    secret = await page.inner_text("#hook-secret-value")
    assert SECRET.fullmatch(secret)
    report = await Axe().run(page)  # labels, contrast, names, landmarks
    assert report.response["testEngine"]["name"] == "axe-core"
    assert [v["id"] for v in report.response["violations"]] == [], report.generate_report()

    studio.secrets.add(secret)  # from here on no page may show it
    await page.get_by_role("link", name="Webhooks", exact=True).first.click()
    await page.get_by_role("link", name=HOOK).click()
    await studio.shot(page, f"webhook-{size}")
    async with page.expect_navigation():
        await page.get_by_role("button", name="Send a ping").click()
    assert "A ping is queued" in await page.inner_text("main")
    assert await page.locator("table.hook-log tbody tr").count() == 1
    await studio.shot(page, f"webhook-pinged-{size}")
    report = await Axe().run(page)
    assert [v["id"] for v in report.response["violations"]] == [], report.generate_report()
