"""The public event page and its forms, through httpx on the real app: what the page shows
and hides, its schema.org JSON-LD read against the vocabulary, who may open it, and every
refusal of the intake seen through the form (the page again, the values kept, the message
beside its field or at the top, nothing written)."""

from __future__ import annotations

import dataclasses
import re
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from events_svc import create_app
from events_svc.capabilities import FORM, CapabilityCodec
from events_svc.settings import Settings
from tests.probes.helpers import BASE, add_slot, add_ticket, event_body
from tests.probes.pages import schemaorg
from tests.probes.pages.kit import HTML, SECRET, open_page, path_of, published, question, read
from tests.probes.test_dispatch import operate

EMAIL_WORDS = "Enter an email address, like name@example.org."
NOT_FOUND = b'{"error":{"code":"event_not_published","detail":"Not found."}}'


async def registrations(pool: asyncpg.Pool, event_id: str) -> list[asyncpg.Record]:
    async with pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT id, name, email, state::text AS state, event_ticket_id, barcode "
                "FROM event.registrations WHERE event_id = $1 ORDER BY created_at, name",
                uuid.UUID(event_id),
            )
        )


def filled(values: dict[str, str], n: int = 1, **fields: str) -> dict[str, str]:
    """`values` with attendee n's identity typed in."""
    person = {"name": f"Person {n}", "email": f"person{n}@example.org"} | fields
    return values | {f"attendee-{n}-{k}": v for k, v in person.items()}


async def test_the_page_shows_the_event_as_an_attendee_reads_it(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    now = datetime.now(UTC)
    event = await published(
        admin,
        name="Lisbon <Meetup> & Co",
        description="First line <b>not bold</b>\nSecond line",
        location="Rua Augusta 1, Lisboa",
    )
    plenty = await add_ticket(admin, event["id"], name="Standard", seats_max=50)
    few = await add_ticket(admin, event["id"], name="Patron", seats_max=3)
    gone = await add_ticket(admin, event["id"], name="Early bird", seats_max=1)
    later = await add_ticket(
        admin, event["id"], name="Late", start_sale_datetime=(now + timedelta(days=3)).isoformat()
    )
    taken = await admin.post(
        "/admin/registrations",
        json={"event_id": event["id"], "name": "Ada", "event_ticket_id": gone["id"]},
    )
    assert taken.status_code == 201
    r = await public.get(f"/public/events/{event['id']}", headers=HTML)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert r.headers["cache-control"] == "no-store"
    assert "x-robots-tag" not in r.headers  # a published event's page may be indexed
    policy = r.headers["content-security-policy"]
    assert policy.startswith("default-src 'none'; style-src 'unsafe-inline'; img-src data:")
    assert "form-action 'self'" in policy and "frame-ancestors 'none'" in policy
    page = read(r.text)
    html = page.html
    assert '<html lang="en">' in html and 'name="robots"' not in html
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert "Lisbon &lt;Meetup&gt; &amp; Co" in html and "<Meetup>" not in html
    assert "First line &lt;b&gt;not bold&lt;/b&gt;\nSecond line" in html  # text, lines kept
    assert "Mon 10 May 2027 10:00 \u2013 Wed 12 May 2027 19:00 (Europe/Lisbon)" in html
    assert "Rua Augusta 1, Lisboa" in html
    words = {
        c.attrs["value"]: page.reader.labels[c.attrs["id"]]
        for c in page.controls("event_ticket_id")
    }
    assert words[plenty["id"]] == "Standard — available"
    assert words[few["id"]] == "Patron — few left"
    assert words[gone["id"]] == "Early bird — sold out"
    assert words[later["id"]].startswith("Late — available (On sale from ")
    disabled = {c.attrs["value"] for c in page.controls("event_ticket_id") if "disabled" in c.attrs}
    assert disabled == {gone["id"], later["id"]}  # nothing to choose there
    assert not page.reader.scripts[1:] and page.reader.scripts[0]["type"] == "application/ld+json"
    # every control a person fills has a label (radios their own, by id)
    for c in page.reader.controls:
        if c.tag == "button" or c.attrs.get("type") == "hidden":
            continue
        assert page.reader.labels.get(c.attrs["id"], "").strip(), c.attrs
    for name in ("attendee-1-name", "attendee-1-email"):
        assert "required" in page.controls(name)[0].attrs
    # the calendar link opens the event's calendar
    [ics] = [link for link in page.reader.links if "/public/ics/" in link]
    cal = await public.get(path_of(ics))
    assert cal.status_code == 200 and b"SUMMARY:Lisbon <Meetup> & Co" in cal.content


async def test_the_json_ld_is_a_schema_org_event(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, location="Centro de Congressos", description="Talks")
    await add_ticket(admin, event["id"], name="Standard", seats_max=5)
    sold = await add_ticket(admin, event["id"], name="VIP", seats_max=1)
    await admin.post(
        "/admin/registrations",
        json={"event_id": event["id"], "name": "Ada", "event_ticket_id": sold["id"]},
    )
    item = (await open_page(public, event["id"])).json_ld()
    assert schemaorg.problems(item) == []
    assert item["@type"] == "Event" and item["name"] == "PyCon Lisbon"
    assert item["startDate"] == "2027-05-10T10:00:00+01:00"  # in the event's zone
    assert item["endDate"] == "2027-05-12T19:00:00+01:00"
    assert item["eventStatus"] == "https://schema.org/EventScheduled"
    assert item["location"] == {"@type": "Place", "name": "Centro de Congressos"}
    availability = {o["name"]: o["availability"] for o in item["offers"]}
    assert availability == {
        "Standard": "https://schema.org/LimitedAvailability",
        "VIP": "https://schema.org/SoldOut",
    }
    assert item["url"] == f"{BASE}/public/events/{event['id']}"

    # a start moved once published (an operation: it has an attendee): rescheduled
    moved = {"date_begin": "2027-05-11T09:00:00+00:00", "date_end": "2027-05-12T18:00:00+00:00"}
    await operate(admin, event["id"], "reschedule", moved)
    page = await open_page(public, event["id"])
    item = page.json_ld()
    assert schemaorg.problems(item) == []
    assert item["eventStatus"] == "https://schema.org/EventRescheduled"
    assert item["previousStartDate"] == "2027-05-10T10:00:00+01:00"
    assert "This event was rescheduled" in page.html

    await operate(admin, event["id"], "cancellation", {"reason": "The venue closed"})
    page = await open_page(public, event["id"])
    assert page.json_ld()["eventStatus"] == "https://schema.org/EventCancelled"
    assert "This event is cancelled: registration is closed." in page.html
    assert not page.reader.forms  # no form, and it says why


async def test_a_start_moved_before_the_public_saw_it_is_no_reschedule(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = (await admin.post("/admin/events", json=event_body())).json()
    await admin.patch(f"/admin/events/{event['id']}", json={"date_begin": "2027-05-11T09:00:00Z"})
    # published, but its publication date still ahead: the public has not seen it yet
    later = {"date_publish": "2027-01-01T00:00:00Z"}
    assert (await admin.post(f"/admin/events/{event['id']}/publish", json=later)).is_success
    await admin.patch(f"/admin/events/{event['id']}", json={"date_begin": "2027-05-11T10:00:00Z"})
    now = {"date_publish": "2020-01-01T00:00:00Z"}
    assert (await admin.post(f"/admin/events/{event['id']}/publish", json=now)).is_success
    item = (await open_page(public, event["id"])).json_ld()
    assert item["eventStatus"] == "https://schema.org/EventScheduled"
    assert "previousStartDate" not in item


async def test_a_finished_event_shows_why_there_is_no_form(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(
        admin, date_begin="2020-01-01T09:00:00Z", date_end="2020-01-01T18:00:00Z"
    )
    page = await open_page(public, event["id"])
    assert "This event has ended: registration is closed." in page.html
    assert not page.reader.forms
    sent = await public.post(f"/public/events/{event['id']}/register", data={}, headers=HTML)
    assert sent.status_code == 422 and "form_expired" in read(sent.text).codes()


async def test_what_no_one_may_see_is_the_uniform_404(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    hidden = (await admin.post("/admin/events", json=event_body())).json()  # not published
    archived = await published(admin)
    assert (
        await admin.patch(f"/admin/events/{archived['id']}", json={"active": False})
    ).status_code == 200
    shown = await published(admin)
    intake = await admin.post(f"/admin/events/{shown['id']}/capabilities/intake", json={})
    token = intake.json()["token"]
    tampered = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    bodies = set()
    for key in (hidden["id"], archived["id"], str(uuid.uuid4()), tampered, "x" * 3000, "zz"):
        for method, path in (
            ("GET", f"/public/events/{key}"),
            ("POST", f"/public/events/{key}/register"),
            ("POST", f"/public/events/{key}/waitlist"),
        ):
            r = await public.request(method, path, headers=HTML)
            assert r.status_code == 404, (method, path, r.status_code)
            bodies.add(r.content)
    assert bodies == {NOT_FOUND}


async def test_a_private_link_opens_an_unpublished_event_and_reveals_nothing_else(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = (await admin.post("/admin/events", json=event_body(name="Board retreat"))).json()
    minted = await admin.post(f"/admin/events/{event['id']}/capabilities/intake", json={})
    token = minted.json()["token"]
    r = await public.get(f"/public/events/{token}", headers=HTML)
    assert r.status_code == 200 and r.headers["x-robots-tag"] == "noindex"
    page = read(r.text)
    assert '<meta name="robots" content="noindex">' in page.html
    assert event["id"] not in page.html  # nothing names the event without the capability
    assert not [link for link in page.reader.links if "/public/ics/" in link]  # would 404
    assert page.json_ld()["url"] == f"{BASE}/public/events/{token}"
    action, values = page.form("/register")
    assert action == f"{BASE}/public/events/{token}/register"
    sent = await public.post(path_of(action), data=filled(values), headers=HTML)
    assert sent.status_code == 303, sent.text
    assert sent.headers["location"].startswith(f"{BASE}/public/my-tickets/")
    [row] = await registrations(pool, event["id"])
    assert (row["name"], row["email"], row["state"]) == ("Person 1", "person1@example.org", "open")
    # the same event by id is not published: the uniform 404
    assert (await public.get(f"/public/events/{event['id']}", headers=HTML)).status_code == 404


async def test_two_attendees_with_answers_register_and_land_on_their_tickets(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    ticket = await add_ticket(admin, event["id"], name="Standard", limit_max_per_order=3)
    diet = await question(
        admin, event["id"], "Diet", "simple_choice", mandatory=True, answers=("Veg", "Any")
    )
    source = await question(admin, event["id"], "How did you hear of us?", once_per_order=True)
    phone = await question(admin, event["id"], "Phone", "phone", mandatory=True)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    assert values["event_ticket_id"] == ticket["id"]  # the one ticket on sale: chosen
    # two attendees: the form redrawn for them, nothing written
    grown = await public.post(
        path_of(action), data=values | {"attendees": "2", "action": "update"}, headers=HTML
    )
    assert grown.status_code == 200
    page = read(grown.text)
    assert page.controls("attendee-2-name") and not page.controls("attendee-3-name")
    assert [o["value"] for o in page.controls("attendees")[0].options] == ["1", "2", "3"]
    assert await registrations(pool, event["id"]) == []
    action, values = page.form("/register")
    veg, anything = (a["id"] for a in diet["answers"])
    typed = filled(values, 1, phone="+44 20 7946 0001") | filled({}, 2, phone="+44 20 7946 0002")
    typed |= {
        f"attendee-1-q-{diet['id']}": veg,
        f"attendee-2-q-{diet['id']}": anything,
        f"q-{source['id']}": "A friend",
        "action": "register",
    }
    sent = await public.post(path_of(action), data=typed, headers=HTML)
    assert sent.status_code == 303, read(sent.text).codes()
    tickets = await public.get(path_of(sent.headers["location"]), headers=HTML)
    assert tickets.status_code == 200 and "Person 1" in tickets.text and "Person 2" in tickets.text
    rows = await registrations(pool, event["id"])
    assert [r["name"] for r in rows] == ["Person 1", "Person 2"]
    assert all(r["event_ticket_id"] == uuid.UUID(ticket["id"]) for r in rows)
    async with pool.acquire() as conn:
        answers = await conn.fetch(
            "SELECT r.name, a.question_id, a.value_answer_id, a.value_text "
            "FROM event.registration_answers a JOIN event.registrations r "
            "ON r.id = a.registration_id WHERE r.event_id = $1",
            uuid.UUID(event["id"]),
        )
        phones = await conn.fetch(
            "SELECT phone FROM event.registrations WHERE event_id = $1 ORDER BY name",
            uuid.UUID(event["id"]),
        )
    given = {(a["name"], str(a["question_id"])): a for a in answers}
    assert str(given[("Person 1", diet["id"])]["value_answer_id"]) == veg
    assert str(given[("Person 2", diet["id"])]["value_answer_id"]) == anything
    # asked once, kept for both
    assert given[("Person 1", source["id"])]["value_text"] == "A friend"
    assert given[("Person 2", source["id"])]["value_text"] == "A friend"
    assert [p["phone"] for p in phones] == ["+44 20 7946 0001", "+44 20 7946 0002"]
    assert phone["id"] not in {k[1] for k in given}  # an identity question fills the field


async def test_a_mandatory_question_left_out_answers_the_form_again_with_what_was_typed(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    diet = await question(
        admin, event["id"], "Diet", "simple_choice", mandatory=True, answers=("Veg", "Any")
    )
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    typed = filled(values, company_name="Analytical Engines Ltd")
    sent = await public.post(path_of(action), data=typed, headers=HTML)
    assert sent.status_code == 422 and sent.headers["content-type"].startswith("text/html")
    again = read(sent.text)
    assert again.error(f"attendee-1-q-{diet['id']}") == "Please answer this question."
    _, kept = again.form("/register")
    assert kept["attendee-1-name"] == "Person 1"
    assert kept["attendee-1-email"] == "person1@example.org"
    assert kept["attendee-1-company_name"] == "Analytical Engines Ltd"
    assert kept["form_token"] and sent.headers["cache-control"] == "no-store"
    assert await registrations(pool, event["id"]) == []


async def test_a_bad_email_is_refused_beside_its_field(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    sent = await public.post(
        path_of(action), data=filled(values, email="not-an-address"), headers=HTML
    )
    assert sent.status_code == 422
    again = read(sent.text)
    assert again.error("attendee-1-email") == EMAIL_WORDS
    assert again.form("/register")[1]["attendee-1-email"] == "not-an-address"
    assert 'aria-describedby="attendee-1-email-error"' in again.html
    missing = await public.post(path_of(action), data=values, headers=HTML)
    assert read(missing.text).error("attendee-1-name") == "Enter the full name."
    assert await registrations(pool, event["id"]) == []


async def test_seats_exhausted_and_sale_window_closed_show_at_the_top(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    now = datetime.now(UTC)
    event = await published(admin, seats_max=1)
    closed = await add_ticket(
        admin, event["id"], name="Early", end_sale_datetime=(now - timedelta(days=1)).isoformat()
    )
    open_ticket = await add_ticket(admin, event["id"], name="Standard")
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    late = await public.post(
        path_of(action),
        data=filled(values) | {"event_ticket_id": closed["id"]},
        headers=HTML,
    )
    assert late.status_code == 409
    assert read(late.text).codes() == ["event_sale_window_closed"]
    assert "This ticket is not on sale at the moment." in late.text
    assert read(late.text).form("/register")[1]["attendee-1-name"] == "Person 1"

    two = filled(filled(values), 2) | {"attendees": "2", "event_ticket_id": open_ticket["id"]}
    full = await public.post(path_of(action), data=two, headers=HTML)
    assert full.status_code == 409
    again = read(full.text)
    assert again.codes() == ["event_seats_exhausted"]
    assert "Sorry, there are not enough seats left for this choice." in full.text
    kept = again.form("/register")[1]
    assert (kept["attendee-2-name"], kept["attendees"]) == ("Person 2", "2")
    assert await registrations(pool, event["id"]) == []


async def test_more_attendees_than_the_ticket_allows_is_refused_beside_the_count(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    ticket = await add_ticket(admin, event["id"], name="Duo", limit_max_per_order=2)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    three = filled(filled(filled(values), 2), 3) | {"attendees": "3"}
    sent = await public.post(path_of(action), data=three, headers=HTML)
    assert sent.status_code == 422
    again = read(sent.text)
    assert again.error("attendees") == "At most 2 can register together for this choice."
    kept = again.form("/register")[1]
    assert (kept["attendees"], kept["attendee-3-name"]) == ("3", "Person 3")
    assert kept["event_ticket_id"] == ticket["id"]
    assert await registrations(pool, event["id"]) == []


async def test_a_slot_must_be_chosen_on_a_multi_slot_event(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin, is_multi_slots=True, seats_max=1)
    first = await add_slot(admin, event["id"], 10)
    second = await add_slot(admin, event["id"], 12)
    await admin.post(
        "/admin/registrations",
        json={"event_id": event["id"], "name": "Ada", "event_slot_id": first["id"]},
    )
    page = await open_page(public, event["id"])
    [slots] = page.controls("event_slot_id")
    words = {o.get("value"): "disabled" in o for o in slots.options}
    assert words == {"": False, first["id"]: True, second["id"]: False}  # the full one
    zone = r"\(Europe/Lisbon\) \u2014"
    for slot, hours, words in ((first, "11:00", "sold out"), (second, "13:00", "few left")):
        shown = (
            rf'<option value="{slot["id"]}"[^>]*>Mon 10 May 2027, {hours}\D[^<]* {zone} {words}<'
        )
        assert re.search(shown, page.html), (hours, words)  # in the event's zone, its seats
    action, values = page.form("/register")
    sent = await public.post(path_of(action), data=filled(values), headers=HTML)
    assert sent.status_code == 422
    assert read(sent.text).error("event_slot_id") == "Choose a session."
    ok = await public.post(
        path_of(action), data=filled(values) | {"event_slot_id": second["id"]}, headers=HTML
    )
    assert ok.status_code == 303
    assert len(await registrations(pool, event["id"])) == 2


async def test_a_forged_expired_or_foreign_form_token_writes_nothing(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    other = await published(admin)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    codec = CapabilityCodec((SECRET,))
    past = datetime.now(UTC) - timedelta(seconds=1)
    foreign = (await open_page(public, other["id"])).form("/register")[1]["form_token"]
    tokens = {
        "forged": CapabilityCodec(("another-secret-0123456789",)).mint(
            FORM, {"e": event["id"]}, None
        ),
        "expired": codec.mint(FORM, {"e": event["id"]}, past),
        "another event's": foreign,
        "missing": "",
        "of another purpose": codec.mint("event-intake-access", {"e": event["id"]}, None),
    }
    for what, token in tokens.items():
        sent = await public.post(
            path_of(action), data=filled(values) | {"form_token": token}, headers=HTML
        )
        assert sent.status_code == 422, what
        again = read(sent.text)
        assert again.codes() == ["form_expired"], what
        fresh = again.form("/register")[1]
        assert fresh["attendee-1-name"] == "Person 1" and fresh["form_token"] != token
    assert await registrations(pool, event["id"]) == []
    # the fresh token of the answer is good
    retry = await public.post(path_of(action), data=filled(fresh), headers=HTML)
    assert retry.status_code == 303


async def test_sold_out_with_a_waiting_list_offers_it_and_shows_the_position(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin, seats_max=2)
    settings = await admin.put(
        f"/admin/events/{event['id']}/waitlist-settings", json={"enabled": True}
    )
    assert settings.status_code == 200, settings.text
    await admin.post("/admin/registrations", json={"event_id": event["id"], "name": "Ada"})
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    two = filled(filled(values), 2) | {"attendees": "2"}
    refused = await public.post(path_of(action), data=two, headers=HTML)
    assert refused.status_code == 409
    again = read(refused.text)
    assert again.codes() == ["event_seats_exhausted"]
    # the waiting-list form first, with the person's values and seats
    assert again.html.index("Join the waiting list") < again.html.index('id="register-title"')
    join_action, join = again.form("/waitlist")
    assert (join["name"], join["email"], join["seats"]) == ("Person 1", "person1@example.org", "2")
    # one seat is free: the waiting list is not needed for one, and says so
    one = await public.post(path_of(join_action), data=join | {"seats": "1"}, headers=HTML)
    assert one.status_code == 409 and read(one.text).codes() == ["waitlist_not_needed"]
    assert "Seats are free for this choice: you can register now." in one.text
    bad = await public.post(path_of(join_action), data=join | {"email": "nope"}, headers=HTML)
    assert bad.status_code == 422
    assert read(bad.text).error("waitlist-email") == EMAIL_WORDS
    joined = await public.post(path_of(join_action), data=join, headers=HTML)
    assert joined.status_code == 303, joined.text
    assert "/public/waitlist/" in joined.headers["location"]
    status = await public.get(path_of(joined.headers["location"]), headers=HTML)
    assert "You are number 1 in the queue." in status.text
    twice = await public.post(path_of(join_action), data=join, headers=HTML)
    assert twice.status_code == 409 and read(twice.text).codes() == ["waitlist_already_joined"]
    assert [r["name"] for r in await registrations(pool, event["id"])] == ["Ada"]

    # the event full: the page offers the waiting list, not the registration form
    await admin.post("/admin/registrations", json={"event_id": event["id"], "name": "Bob"})
    full = await open_page(public, event["id"])
    assert "Join the waiting list" in full.html and 'id="register-title"' not in full.html


async def test_sold_out_without_a_waiting_list_says_so(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, seats_max=1)
    await admin.post("/admin/registrations", json={"event_id": event["id"], "name": "Ada"})
    page = await open_page(public, event["id"])
    assert "This event is sold out." in page.html and not page.reader.forms
    assert page.json_ld()["offers"][0]["availability"] == "https://schema.org/SoldOut"


async def test_without_the_public_intake_the_page_has_no_form(
    settings: Settings, admin: httpx.AsyncClient
):
    event = await published(admin)
    closed = create_app(dataclasses.replace(settings, intake_public=False))
    async with (
        closed.router.lifespan_context(closed),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=closed), base_url=BASE) as c,
    ):
        page = await c.get(f"/public/events/{event['id']}", headers=HTML)
        assert page.status_code == 200
        assert "Registration for this event is not open online." in page.text
        assert "<form" not in page.text
        posted = await c.post(f"/public/events/{event['id']}/register", data={})
        assert posted.status_code == 404  # not mounted


async def test_the_forms_are_throttled_like_the_intake_and_answer_a_page(
    settings: Settings, admin: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    tight = create_app(
        dataclasses.replace(settings, rate_limit_ip="2/minute", rate_limit_email="1/hour")
    )
    async with (
        tight.router.lifespan_context(tight),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=tight), base_url=BASE) as c,
    ):
        page = read((await c.get(f"/public/events/{event['id']}", headers=HTML)).text)
        action, values = page.form("/register")
        # the email's window counts accepted registrations: the second is the page again
        first = await c.post(path_of(action), data=filled(values), headers=HTML)
        again = await c.post(path_of(action), data=filled(values), headers=HTML)
        assert (first.status_code, again.status_code) == (303, 429)
        assert read(again.text).codes() == ["rate_limited"]
        assert read(again.text).form("/register")[1]["attendee-1-name"] == "Person 1"
        assert int(again.headers["retry-after"]) >= 1
        # the client's window (the page's GET counted too): a short page, nothing read
        over = await c.post(path_of(action), data=filled(values, email="x@example.org"))
        assert over.status_code == 429 and over.headers["content-type"].startswith("text/html")
        assert int(over.headers["retry-after"]) >= 1
        assert read(over.text).codes() == ["rate_limited"]
        assert read(over.text).reader.links == [f"{BASE}/public/events/{event['id']}"]
        waitlist = await c.post(f"/public/events/{event['id']}/waitlist", data={})
        assert waitlist.status_code == 429
    assert len(await registrations(pool, event["id"])) == 1


async def test_a_private_links_window_counts_its_forms(
    settings: Settings, admin: httpx.AsyncClient
):
    event = (await admin.post("/admin/events", json=event_body())).json()
    token = (await admin.post(f"/admin/events/{event['id']}/capabilities/intake", json={})).json()[
        "token"
    ]
    tight = create_app(dataclasses.replace(settings, rate_limit_capability="2/minute"))
    async with (
        tight.router.lifespan_context(tight),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=tight), base_url=BASE) as c,
    ):
        codes = [(await c.post(f"/public/events/{token}/register", data={})).status_code]
        codes += [(await c.post(f"/public/events/{token}/register", data={})).status_code]
        codes += [(await c.post(f"/public/events/{token}/waitlist", data={})).status_code]
    assert codes == [422, 422, 429]  # one window for the link, whichever form


async def test_the_refusals_no_field_of_the_page_can_hold(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin)
    other = await published(admin)
    foreign = await add_ticket(admin, other["id"], name="Elsewhere")
    ticket = await add_ticket(admin, event["id"], name="Standard")
    diet = await question(admin, event["id"], "Diet", "simple_choice", answers=("Veg", "Any"))
    stranger = await question(admin, other["id"], "Size", "simple_choice", answers=("S", "M"))
    note = await question(admin, event["id"], "Note")
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    base = filled(values)
    cases = {
        "event_ticket_id": (
            base | {"event_ticket_id": foreign["id"]},
            "Choose one of the tickets shown.",
        ),
        f"attendee-1-q-{diet['id']}": (
            base | {f"attendee-1-q-{diet['id']}": stranger["answers"][0]["id"]},
            "Choose one of the answers shown.",
        ),
        f"attendee-1-q-{note['id']}": (
            base | {f"attendee-1-q-{note['id']}": "x" * 20_001},
            "This answer is too long.",
        ),
        "attendee-1-phone": (
            base | {"attendee-1-phone": "call me"},
            "Enter a phone number, like +44 20 7946 0000.",
        ),
    }
    for field_name, (body, words) in cases.items():
        sent = await public.post(path_of(action), data=body, headers=HTML)
        assert sent.status_code == 422, field_name
        assert read(sent.text).error(field_name) == words, field_name
    # a session on an event without sessions: nothing to mark, the message at the top
    sent = await public.post(
        path_of(action), data=base | {"event_slot_id": str(uuid.uuid4())}, headers=HTML
    )
    assert sent.status_code == 422 and read(sent.text).codes() == ["slot_not_in_event"]
    unreadable = await public.post(
        path_of(action), content=b"--x\r\n", headers=HTML | {"Content-Type": "multipart/form-data"}
    )
    assert unreadable.status_code == 422 and read(unreadable.text).codes() == ["form_unreadable"]
    assert ticket and await registrations(pool, event["id"]) == []


async def test_a_cancelled_event_and_a_closed_waiting_list_refuse_at_the_top(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
):
    event = await published(admin, seats_max=2)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    joining = values | {"name": "Ada", "email": "ada@example.org", "seats": "1"}
    for body in (joining, joining | {"seats": "0", "email": ""}):  # nothing else to say
        closed = await public.post(f"/public/events/{event['id']}/waitlist", data=body)
        assert closed.status_code == 409 and read(closed.text).codes() == ["waitlist_disabled"]
    await admin.put(f"/admin/events/{event['id']}/waitlist-settings", json={"enabled": True})
    for seats in ("0", "abc", "31"):
        bad = await public.post(
            f"/public/events/{event['id']}/waitlist", data=joining | {"seats": seats}
        )
        assert bad.status_code == 422, seats
        assert read(bad.text).error("waitlist-seats") == "Choose how many seats.", seats
    cancelled = await admin.patch(f"/admin/events/{event['id']}", json={"kanban_state": "cancel"})
    assert cancelled.status_code == 200, cancelled.text
    sent = await public.post(path_of(action), data=filled(values), headers=HTML)  # token good
    assert sent.status_code == 409
    assert read(sent.text).codes() == ["event_registrations_closed"]
    assert "This event is cancelled: registration is closed." in sent.text
    assert await registrations(pool, event["id"]) == []


async def test_waiting_list_seats_beyond_the_tickets_cap_are_refused_beside_them(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, seats_max=1)
    await admin.put(f"/admin/events/{event['id']}/waitlist-settings", json={"enabled": True})
    ticket = await add_ticket(admin, event["id"], name="Duo", limit_max_per_order=2)
    await admin.post(
        "/admin/registrations",
        json={"event_id": event["id"], "name": "Ada", "event_ticket_id": ticket["id"]},
    )
    page = await open_page(public, event["id"])
    action, values = page.form("/waitlist")
    body = values | {"name": "Bob", "email": "bob@example.org", "seats": "2"}
    sent = await public.post(path_of(action), data=body, headers=HTML)
    assert sent.status_code == 422
    assert read(sent.text).error("waitlist-seats") == (
        "At most 1 can register together for this choice."
    )


async def test_every_ticket_on_sale_sold_out_says_so(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    now = datetime.now(UTC)
    event = await published(admin)
    gone = await add_ticket(admin, event["id"], name="Early", seats_max=1)
    await add_ticket(
        admin, event["id"], name="Late", start_sale_datetime=(now + timedelta(days=3)).isoformat()
    )
    await admin.post(
        "/admin/registrations",
        json={"event_id": event["id"], "name": "Ada", "event_ticket_id": gone["id"]},
    )
    page = await open_page(public, event["id"])
    assert "Every ticket on sale is sold out." in page.html and not page.reader.forms


async def test_an_expired_private_link_is_the_uniform_404(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = (await admin.post("/admin/events", json=event_body())).json()
    past = datetime.now(UTC) - timedelta(seconds=1)
    token = CapabilityCodec((SECRET,)).mint("event-intake-access", {"e": event["id"]}, past)
    for method, path in (("GET", ""), ("POST", "/register"), ("POST", "/waitlist")):
        r = await public.request(method, f"/public/events/{token}{path}", headers=HTML)
        assert (r.status_code, r.content) == (404, NOT_FOUND)


async def test_a_kept_page_follows_the_seats_and_carries_fresh_tokens(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, seats_max=10)
    first, again = await open_page(public, event["id"]), await open_page(public, event["id"])
    assert first.html.count("\u2014") == again.html.count("\u2014")  # the same page
    assert first.json_ld()["offers"][0]["availability"] == "https://schema.org/InStock"
    tokens = {p.form("/register")[1]["form_token"] for p in (first, again)}
    calendars = {link for p in (first, again) for link in p.reader.links if "/ics/" in link}
    assert calendars  # a public event: the page links its calendar
    codec = CapabilityCodec((SECRET,))
    assert all(codec.open(FORM, t, datetime.now(UTC)) for t in tokens)
    seats = {"event_id": event["id"], "name": "Ada"}
    assert (await admin.post("/admin/registrations", json=seats)).status_code == 201
    after = await open_page(public, event["id"])
    assert after.json_ld()["offers"][0]["availability"] == "https://schema.org/LimitedAvailability"
    assert "few left" in after.html
    for c in calendars:
        assert (await public.get(path_of(c))).status_code == 200
