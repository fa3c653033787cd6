"""The forms against what anyone may post (a property over the form's fields: never a 500,
always the page or a redirect), and against a crowd: 50 people posting the form of a
10-seat event at once register exactly 10; the others get the sold-out page."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.probes.helpers import add_ticket
from tests.probes.pages.kit import HTML, open_page, path_of, published, question, read

ANSWERS = {200, 303, 409, 422, 429}
TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
    st.sampled_from(["", " ", "\x00", "0", "-1", "31", "99999999999999999999", "ada@example.org"]),
    st.just(str(uuid.uuid4())),
)


@pytest.fixture
async def world(admin: httpx.AsyncClient, public: httpx.AsyncClient) -> dict[str, Any]:
    """An event with a ticket (two a registration), a mandatory choice and a once-per-order
    text, and its page's form as served (set up once for all the examples)."""
    event = await published(admin, seats_max=3, is_multi_slots=False)
    ticket = await add_ticket(admin, event["id"], name="Standard", limit_max_per_order=2)
    diet = await question(
        admin, event["id"], "Diet", "simple_choice", mandatory=True, answers=("Veg", "Any")
    )
    note = await question(admin, event["id"], "Note", once_per_order=True)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    names = [
        "form_token",
        "event_ticket_id",
        "event_slot_id",
        "attendees",
        "action",
        "attendee-1-name",
        "attendee-1-email",
        "attendee-1-phone",
        "attendee-2-name",
        "attendee-2-email",
        f"attendee-1-q-{diet['id']}",
        f"q-{note['id']}",
        "name",
        "email",
        "seats",
    ]
    known = {
        "event_ticket_id": ticket["id"],
        f"attendee-1-q-{diet['id']}": diet["answers"][0]["id"],
    }
    return {"action": path_of(action), "values": values, "names": names, "known": known}


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
async def test_no_form_input_makes_a_500(
    world: dict[str, Any], public: httpx.AsyncClient, data: st.DataObject
):
    names = world["names"]
    fields = data.draw(
        st.dictionaries(st.one_of(st.sampled_from(names), st.text(max_size=90)), TEXT, max_size=12)
    )
    base = data.draw(st.sampled_from(["none", "page", "known"]))
    body = {"none": {}, "page": world["values"], "known": world["values"] | world["known"]}[base]
    sent = dict(body) | fields
    target = data.draw(st.sampled_from(["/register", "/waitlist"]))
    url = world["action"].removesuffix("/register") + target
    raw = data.draw(st.booleans())
    if raw:  # bytes as they come: any encoding, any separators
        content = data.draw(st.binary(max_size=400))
        kind = data.draw(
            st.sampled_from(
                ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]
            )
        )
        r = await public.post(url, content=content, headers=HTML | {"Content-Type": kind})
    else:
        r = await public.post(url, data=sent, headers=HTML)
    assert r.status_code in ANSWERS, (r.status_code, r.text[:500])
    if r.status_code != 303:
        assert r.headers["content-type"].startswith("text/html")
        assert r.headers["cache-control"] == "no-store"
        assert r.text.startswith("<!doctype html>") and "</html>" in r.text  # the page


async def test_fifty_people_at_once_on_ten_seats_register_exactly_ten(
    admin: httpx.AsyncClient, app: Any, pool: asyncpg.Pool
):
    event = await published(admin, seats_max=10)
    crowd = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=str(admin.base_url))
        for _ in range(50)
    ]
    try:
        pages = await asyncio.gather(*(open_page(c, event["id"]) for c in crowd))
        posts = []
        for n, (client, page) in enumerate(zip(crowd, pages, strict=True)):
            action, values = page.form("/register")
            values |= {"attendee-1-name": f"Person {n}", "attendee-1-email": f"p{n}@example.org"}
            posts.append(client.post(path_of(action), data=values, headers=HTML))
        answers = await asyncio.gather(*posts)
    finally:
        await asyncio.gather(*(c.aclose() for c in crowd))
    statuses = sorted(a.status_code for a in answers)
    assert statuses == [303] * 10 + [409] * 40
    for refused in (a for a in answers if a.status_code == 409):
        again = read(refused.text)
        assert again.codes() == ["event_seats_exhausted"]
        assert "This event is sold out." in refused.text  # read again after the refusal
        assert not again.reader.forms
    async with pool.acquire() as conn:
        taken = await conn.fetchval(
            "SELECT count(*) FROM event.registrations WHERE event_id = $1 AND state = 'open'",
            uuid.UUID(event["id"]),
        )
    assert taken == 10
