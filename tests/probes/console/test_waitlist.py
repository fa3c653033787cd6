"""The waiting list on the console's event page: the settings form (`put_settings`, its
refusals beside the form), the masked entries in queue order with "Offer now" and
"Remove" (`offer_now`, `remove_entry`, their refusals on the page), the scopes that show
each part, the CSRF token, and another company's entry answering like a missing one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.settings import Settings
from tests.probes.console.kit import Studio, client, code_of, console_of, csrf_of
from tests.probes.helpers import Api, company_client
from tests.probes.waitlist.kit import (
    cancel,
    entries,
    fill,
    joined,
    listed_event,
    waitlist_settings,
)

EVERY = ("event:read", "event:write", "registration:read", "registration:write")


@pytest.fixture
def settings(db_url: str) -> Settings:
    """Public intake, a capability secret and a public base URL: joining and offers work."""
    return waitlist_settings(db_url)


async def full_event(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, *people: tuple[str, str, int]
) -> tuple[dict[str, Any], list[str], list[str]]:
    """A published event of two seats, taken, with its list on and `people` (name, email,
    seats) joined in that order: (the event, the registration ids, the entry ids)."""
    event = await listed_event(admin, 2)
    taken = await fill(public, event["id"], 2)
    ids = []
    for name, email, seats in people:
        ids.append(
            str((await joined(public, event["id"], email, seats, name=name))["waitlist_entry_id"])
        )
    return event, taken, ids


def entry_form(csrf: str, event_id: str, **more: str) -> dict[str, str]:
    return {"csrf_token": csrf, "event_id": event_id, **more}


async def entry_state(pool: asyncpg.Pool, entry_id: str) -> asyncpg.Record:
    row = await pool.fetchrow(
        "SELECT status, registration_ids, offer_expires_at FROM event.waitlist_entry WHERE id = $1",
        uuid.UUID(entry_id),
    )
    assert row is not None
    return row


@asynccontextmanager
async def console_of_company(
    api: Api, company: uuid.UUID, *scopes: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A console client signed in with a token of `company` and `scopes`."""
    async with client(api.app) as c:
        headers = await api.token(*scopes, company=company)
        token = headers["Authorization"].removeprefix("Bearer ")
        signed = await c.post("/sign-in", data={"token": token, "csrf_token": await csrf_of(c)})
        assert signed.status_code == 303
        yield c, await csrf_of(c)


async def test_the_section_shows_masked_entries_in_queue_order(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event, _, (wanda, otto) = await full_event(
        admin,
        public,
        ("Wanda Waiter", "wanda@example.org", 1),
        ("Otto Other", "otto@example.org", 2),
    )
    async with console_of(api, *EVERY) as (c, _):
        page = await c.get(f"/events/{event['id']}")
        assert page.status_code == 200
        assert 'id="waitlist"' in page.text
        text = page.text
        assert text.index(f'id="entry-{wanda}"') < text.index(f'id="entry-{otto}"')
        assert "W*** W***" in text and "w***@example.org" in text
        assert "O*** O***" in text and "o***@example.org" in text
        for secret in ("Wanda", "wanda@example.org", "Otto", "otto@example.org"):
            assert secret not in text
        assert f"/waitlist/{wanda}/offer" in text and f"/waitlist/{otto}/remove" in text
        # the same masked view as the admin API's list
        listed = (await admin.get(f"/admin/events/{event['id']}/waitlist")).json()["items"]
        assert [(e["name"], e["email"], e["position"]) for e in listed] == [
            ("W*** W***", "w***@example.org", 1),
            ("O*** O***", "o***@example.org", 2),
        ]
        # the status filter is a choice of the page's
        waiting = await c.get(f"/events/{event['id']}", params={"waitlist_status": "offered"})
        assert waiting.status_code == 200 and "Nobody is on the waiting list" in waiting.text
        bad = await c.get(f"/events/{event['id']}", params={"waitlist_status": "lost"})
        assert bad.status_code == 422 and 'href="#field-waitlist_status"' in bad.text


async def test_the_list_pages_with_a_cursor(api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool):
    event = await listed_event(admin, 1)
    company = await pool.fetchval(
        "SELECT company_id FROM event.events WHERE id = $1", uuid.UUID(event["id"])
    )
    await pool.executemany(
        "INSERT INTO event.waitlist_entry (event_id, company_id, seats, name, email, phone)"
        " VALUES ($1, $2, 1, $3, $4, '')",
        [(uuid.UUID(event["id"]), company, f"Person {i}", f"p{i}@example.org") for i in range(52)],
    )
    async with console_of(api, *EVERY) as (c, _):
        first = await c.get(f"/events/{event['id']}")
        assert first.text.count('id="entry-') == 50 and 'rel="next"' in first.text
        start = first.text.index('rel="next"')
        href = first.text[first.text.rindex('href="', 0, start) + 6 : start - 2]
        second = await c.get(href.replace("&amp;", "&").removeprefix("/studio"))
        assert second.status_code == 200
        assert second.text.count('id="entry-') == 2 and "First page" in second.text


async def test_saving_the_settings_and_a_refused_value(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event, _, _ = await full_event(admin, public)
    path = f"/admin/events/{event['id']}/waitlist-settings"
    mail = await admin.post(
        "/admin/templates",
        json={"kind": "mail", "name": "Offer", "subject": "A seat", "body": "A seat is free."},
    )
    sms = await admin.post("/admin/templates", json={"kind": "sms", "name": "Text", "body": "Hi"})
    assert mail.status_code == sms.status_code == 201
    mail_id = mail.json()["id"]
    async with console_of(api, *EVERY) as (c, csrf):
        page = await c.get(f"/events/{event['id']}")
        assert 'name="offer_hours"' in page.text and f'value="{mail_id}"' in page.text
        assert f'value="{sms.json()["id"]}"' not in page.text  # only mail templates

        saved = await c.post(
            f"/events/{event['id']}/waitlist-settings",
            data={
                "csrf_token": csrf,
                "enabled": "1",
                "offer_hours": "24",
                "offer_template_id": mail_id,
            },
        )
        assert saved.status_code == 303
        assert saved.headers["location"] == f"/studio/events/{event['id']}?done=waitlist_saved"
        assert (await admin.get(path)).json() == {
            "event_id": event["id"],
            "enabled": True,
            "offer_hours": 24,
            "offer_template_id": mail_id,
        }
        shown = await c.get(f"/events/{event['id']}", params={"done": "waitlist_saved"})
        assert "The waiting-list settings are saved." in shown.text
        assert f'<option value="{mail_id}" selected>' in shown.text

        # a bad value: the model's refusal beside its field, the typed values kept
        refused = await c.post(
            f"/events/{event['id']}/waitlist-settings",
            data={"csrf_token": csrf, "enabled": "1", "offer_hours": "0"},
        )
        assert refused.status_code == 422
        assert "validation_failed" in code_of(refused.text)
        assert "Enter a whole number of hours from 1 to 336." in refused.text
        assert 'href="#field-offer_hours"' in refused.text and 'value="0"' in refused.text
        for typed in ("+5", " 5", "5.0", "\u0665", "²"):  # ASCII digits only
            refused = await c.post(
                f"/events/{event['id']}/waitlist-settings",
                data={"csrf_token": csrf, "enabled": "1", "offer_hours": typed},
            )
            assert refused.status_code == 422, typed
            assert "Enter a whole number of hours from 1 to 336." in refused.text
        # the verb's refusal: an offer is a mail
        wrong = await c.post(
            f"/events/{event['id']}/waitlist-settings",
            data={
                "csrf_token": csrf,
                "offer_hours": "12",
                "offer_template_id": sms.json()["id"],
            },
        )
        assert wrong.status_code == 422 and "channel_kind_mismatch" in code_of(wrong.text)
        api_wrong = await admin.put(
            path, json={"offer_hours": 12, "offer_template_id": sms.json()["id"]}
        )
        assert api_wrong.status_code == 422
        assert api_wrong.json()["error"]["code"] == "channel_kind_mismatch"
        assert (await admin.get(path)).json()["offer_hours"] == 24  # nothing changed

        # unticked and no template: off, with the built-in text
        off = await c.post(
            f"/events/{event['id']}/waitlist-settings",
            data={"csrf_token": csrf, "offer_hours": "72", "offer_template_id": ""},
        )
        assert off.status_code == 303
        stored = (await admin.get(path)).json()
        assert (stored["enabled"], stored["offer_hours"], stored["offer_template_id"]) == (
            False,
            72,
            None,
        )


async def test_offer_now_makes_an_offer_and_a_full_event_refuses_it(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event, taken, (wanda,) = await full_event(admin, public, ("Wanda Waiter", "w@example.org", 1))
    async with console_of(api, *EVERY) as (c, csrf):
        full = await c.post(f"/waitlist/{wanda}/offer", data=entry_form(csrf, event["id"]))
        assert full.status_code == 409 and "event_seats_exhausted" in code_of(full.text)
        assert f'id="entry-{wanda}"' in full.text  # the event page, with its list
        api_full = await admin.post(f"/admin/waitlist/{wanda}/offer")
        assert (api_full.status_code, api_full.json()["error"]["code"]) == (
            409,
            "event_seats_exhausted",
        )
        assert (await entry_state(pool, wanda))["status"] == "waiting"

        await cancel(admin, taken[0])  # a seat frees up
        offered = await c.post(f"/waitlist/{wanda}/offer", data=entry_form(csrf, event["id"]))
        assert offered.status_code == 303
        assert offered.headers["location"] == (
            f"/studio/events/{event['id']}?done=waitlist_offered"
        )
        entry = await entry_state(pool, wanda)
        assert entry["status"] == "offered" and len(entry["registration_ids"]) == 1
        drafts = await pool.fetch(
            "SELECT state::text AS state, hold_expires_at FROM event.registrations"
            " WHERE id = ANY($1::uuid[])",
            list(entry["registration_ids"]),
        )
        assert [d["state"] for d in drafts] == ["draft"]
        assert drafts[0]["hold_expires_at"] == entry["offer_expires_at"] is not None

        page = await c.get(f"/events/{event['id']}", params={"done": "waitlist_offered"})
        assert "The offer is made; its seats are held until its deadline." in page.text
        assert f"/waitlist/{wanda}/offer" not in page.text  # only a waiting entry's button
        assert f"/waitlist/{wanda}/remove" in page.text
        again = await c.post(f"/waitlist/{wanda}/offer", data=entry_form(csrf, event["id"]))
        assert again.status_code == 409 and "waitlist_entry_not_waiting" in code_of(again.text)


async def test_remove_takes_an_entry_off_and_releases_its_offer(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event, taken, (wanda, otto) = await full_event(
        admin,
        public,
        ("Wanda Waiter", "wanda@example.org", 1),
        ("Otto Other", "otto@example.org", 1),
    )
    await cancel(admin, taken[0])
    async with console_of(api, *EVERY) as (c, csrf):
        assert (
            await c.post(f"/waitlist/{wanda}/offer", data=entry_form(csrf, event["id"]))
        ).status_code == 303
        held = list((await entry_state(pool, wanda))["registration_ids"])

        kept = {"waitlist_status": "offered"}
        removed = await c.post(
            f"/waitlist/{wanda}/remove", data=entry_form(csrf, event["id"], **kept)
        )
        assert removed.status_code == 303
        assert removed.headers["location"] == (
            f"/studio/events/{event['id']}?waitlist_status=offered&done=waitlist_removed"
        )
        assert (await entry_state(pool, wanda))["status"] == "removed"
        states = await pool.fetch(
            "SELECT state::text AS state FROM event.registrations WHERE id = ANY($1::uuid[])",
            held,
        )
        assert [s["state"] for s in states] == ["cancel"]  # the held seat is free again

        waiting = await c.post(f"/waitlist/{otto}/remove", data=entry_form(csrf, event["id"]))
        assert waiting.status_code == 303
        assert [e["status"] for e in await entries(pool, event["id"])] == ["removed", "removed"]

        page = await c.get(f"/events/{event['id']}", params={"done": "waitlist_removed"})
        assert "The entry is off the waiting list; a held offer is released." in page.text
        assert "/remove" not in page.text and "/offer" not in page.text
        assert page.text.count("Removed</span>") == 2


async def test_forms_need_their_csrf_token_and_their_scopes(
    api: Api, admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event, _, (wanda,) = await full_event(admin, public, ("Wanda Waiter", "w@example.org", 1))
    async with console_of(api, *EVERY) as (c, _):
        for sent in ({}, {"csrf_token": "forged"}):
            for path in (f"/waitlist/{wanda}/offer", f"/waitlist/{wanda}/remove"):
                refused = await c.post(path, data={"event_id": event["id"], **sent})
                assert refused.status_code == 403 and "csrf_failed" in refused.text
            settings = await c.post(
                f"/events/{event['id']}/waitlist-settings", data={"offer_hours": "5", **sent}
            )
            assert settings.status_code == 403 and "csrf_failed" in settings.text
    assert (await entry_state(pool, wanda))["status"] == "waiting"
    stored = (await admin.get(f"/admin/events/{event['id']}/waitlist-settings")).json()
    assert stored["offer_hours"] == 48

    async with console_of(api, "event:read") as (c, csrf):
        page = await c.get(f"/events/{event['id']}")
        assert page.status_code == 200 and 'id="waitlist"' in page.text
        assert "Takes entries" in page.text and 'name="offer_hours"' not in page.text
        assert "needs the registration:read scope" in page.text
        assert f'id="entry-{wanda}"' not in page.text
        refused = await c.post(
            f"/events/{event['id']}/waitlist-settings", data={"csrf_token": csrf}
        )
        assert refused.status_code == 403 and "event:write" in refused.text

    async with console_of(api, "event:read", "registration:read") as (c, csrf):
        page = await c.get(f"/events/{event['id']}")
        assert f'id="entry-{wanda}"' in page.text and "/offer" not in page.text
        refused = await c.post(f"/waitlist/{wanda}/offer", data=entry_form(csrf, event["id"]))
        assert refused.status_code == 403 and "registration:write" in refused.text

    async with console_of(api, "registration:read") as (c, _):
        assert (await c.get(f"/events/{event['id']}")).status_code == 403
    assert (await entry_state(pool, wanda))["status"] == "waiting"


async def test_another_companys_entry_answers_like_a_missing_one(
    api: Api, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    async with await company_client(api, theirs) as other:
        event, _, (foreign,) = await full_event(other, public, ("Wanda Waiter", "w@example.org", 1))
    async with console_of_company(api, ours, *EVERY) as (c, csrf):
        for action in ("offer", "remove"):
            answers = []
            for entry_id in (foreign, str(uuid.uuid4())):
                r = await c.post(
                    f"/waitlist/{entry_id}/{action}", data=entry_form(csrf, event["id"])
                )
                answers.append((r.status_code, code_of(r.text)))
            assert answers[0] == answers[1] == (404, ["not_found"]), answers
        assert (await c.get(f"/events/{event['id']}")).status_code == 404
    assert (await entry_state(pool, foreign))["status"] == "waiting"


@pytest.mark.parametrize("size", ["desktop", "phone"])
async def test_offer_now_in_a_browser(
    studio: Studio, admin: httpx.AsyncClient, public: httpx.AsyncClient, size: str
):
    event, taken, (wanda, _) = await full_event(
        admin,
        public,
        ("Wanda Waiter", "wanda@example.org", 1),
        ("Otto Other", "otto@example.org", 2),
    )
    await cancel(admin, taken[0])
    page = await studio.open(*EVERY, size=size, js=False)
    await page.goto(studio.url(f"/events/{event['id']}"))
    text = await studio.shot(page, f"waitlist-{size}")
    assert "W*** W***" in text and "wanda@example.org" not in text
    row = page.locator(f"#entry-{wanda}")
    async with page.expect_navigation():
        await row.get_by_role("button", name="Offer now").click()
    assert page.url.endswith("?done=waitlist_offered")
    assert "Offered" in await page.locator(f"#entry-{wanda}").inner_text()
    await studio.shot(page, f"waitlist-offered-{size}")
