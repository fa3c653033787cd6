"""What anonymous forms and the intake accept: whole numbers of ASCII digits only (a
superscript is no number: never a 500), the form token before any other field, person-facing
text without control characters (422 `invalid_characters` naming the field, on every route
that writes it), and an unpublished event answered like an unknown one on the intake."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events_svc.text import whole_number
from tests.probes.helpers import event_body
from tests.probes.pages.kit import HTML, open_page, path_of, published, question, read

CONTROLS = ["\x01", "\x07", "\x1b", "\x7f", "\x85", "\x9b", "\x00", "\ud800", "\udfff"]
# typed numbers that are no whole number of ASCII digits
NOT_DIGITS = [
    "²",
    "³",
    "\u0661",
    "\u0663",
    "\u06f5",
    "\u096b",
    "①",
    "+1",
    "-1",
    " 1",
    "1 ",
    "1_0",
    "1.0",
    "\u00a02",
]
KEPT = ["Zoë Ångström", "محمد", "李小龍", "Łukasz-Ñuñez", "e\u0301", "🎟️ Ada", "O'Brien (Jr.)"]


async def count(pool: asyncpg.Pool, event_id: str, table: str = "registrations") -> int:
    async with pool.acquire() as conn:
        n = await conn.fetchval(
            f"SELECT count(*) FROM event.{table} WHERE event_id = $1", uuid.UUID(event_id)
        )
    return int(n)


async def waitlisted(admin: httpx.AsyncClient, seats: int = 0) -> dict[str, Any]:
    event = await published(admin, seats_max=seats)
    r = await admin.put(
        f"/admin/events/{event['id']}/waitlist-settings", json={"enabled": True, "offer_hours": 24}
    )
    assert r.status_code == 200, r.text
    return event


async def full(admin: httpx.AsyncClient) -> dict[str, Any]:
    """A one-seat event with a waiting list, its seat taken: the page offers the list."""
    event = await waitlisted(admin, seats=1)
    r = await admin.post("/admin/registrations", json={"event_id": event["id"], "name": "First"})
    assert r.status_code == 201, r.text
    return event


async def post_json(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    """POST `body` as JSON with every non-ASCII character escaped (a lone surrogate is
    sent as `\\ud800`, as any client may)."""
    headers = {"Content-Type": "application/json"}
    return await client.post(path, content=json.dumps(body), headers=headers)


# --- whole numbers -------------------------------------------------------------------------


async def test_a_number_in_another_script_is_refused_beside_its_field(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Any
):
    event = await published(admin, seats_max=5)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    person = {"attendee-1-name": "Ada", "attendee-1-email": "ada@example.org"}
    for typed in ("²", "³", "\u0661", " 1", "1 ", "\t1", "+1"):
        for action_of in ({}, {"action": "update"}):  # sent, or only redrawn
            sent = values | person | {"attendees": typed} | action_of
            r = await public.post(path_of(action), data=sent, headers=HTML)
            assert r.status_code == 422, (typed, r.status_code, r.text[:300])
            assert read(r.text).error("attendees") == "Choose how many attendees."
    assert await count(api.pool, event["id"]) == 0
    # the waiting-list form's seats
    waiting = await full(admin)
    page = await open_page(public, waiting["id"])
    action, values = page.form("/waitlist")
    joining = {"name": "Wanda", "email": "wanda@example.org"}
    for typed in ("²", "+1", "1.0", " 1", "1 "):
        r = await public.post(
            path_of(action), data=values | joining | {"seats": typed}, headers=HTML
        )
        assert r.status_code == 422, (typed, r.status_code, r.text[:300])
        assert read(r.text).error("waitlist-seats") == "Choose how many seats."
    assert await count(api.pool, waiting["id"], "waitlist_entry") == 0


async def test_the_form_token_is_checked_before_any_other_field(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await waitlisted(admin, seats=5)
    page = await open_page(public, event["id"])
    action, _ = page.form("/register")
    base = path_of(action).removesuffix("/register")
    for target, field in (("/register", "attendees"), ("/waitlist", "seats")):
        for token in (None, "forged", ""):
            body = {field: "²", "attendee-1-name": "\x1b[31m"}
            if token is not None:
                body["form_token"] = token
            r = await public.post(base + target, data=body, headers=HTML)
            assert r.status_code == 422, (target, token, r.text[:300])
            assert read(r.text).codes() == ["form_expired"]


async def test_query_numbers_are_ascii_digits(admin: httpx.AsyncClient):
    for limit in ("²", "+5", " 5", "5.0", "1_0", "٣"):
        r = await admin.get("/admin/events", params={"limit": limit})
        assert r.status_code == 422, (limit, r.text)
        assert r.json()["error"]["field"] == "limit"
    assert (await admin.get("/admin/events", params={"limit": "5"})).status_code == 200


@pytest.fixture
async def forms(admin: httpx.AsyncClient, public: httpx.AsyncClient) -> dict[str, Any]:
    """A small event with a waiting list and its page's forms (set up once for the
    examples)."""
    event = await waitlisted(admin, seats=2)
    page = await open_page(public, event["id"])
    register, values = page.form("/register")
    return {"event": event, "register": path_of(register), "values": values}


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
async def test_no_typed_number_makes_a_500(
    forms: dict[str, Any], public: httpx.AsyncClient, data: st.DataObject
):
    digits = st.characters(categories=["Nd", "No"])  # every script's digits, superscripts
    typed = data.draw(
        st.one_of(
            st.sampled_from(NOT_DIGITS),
            st.text(digits, min_size=1, max_size=4),
            st.builds(
                lambda s, d: s + d,
                st.sampled_from(["+", "-", " ", "\t", ""]),
                st.text(digits, max_size=3),
            ),
        )
    )
    target = data.draw(st.sampled_from(["register", "waitlist", "intake", "intake-waitlist"]))
    event_id = forms["event"]["id"]
    if target in ("register", "waitlist"):
        field = "attendees" if target == "register" else "seats"
        body = forms["values"] | {
            field: typed,
            "attendee-1-name": "Ada",
            "attendee-1-email": "ada@example.org",
            "name": "Ada",
            "email": "ada@example.org",
        }
        url = forms["register"].removesuffix("/register") + "/" + target
        r = await public.post(url, data=body, headers=HTML)
        assert r.status_code in (200, 303, 409, 422), (typed, r.status_code, r.text[:300])
        if typed and whole_number(typed) is None:  # refused, whatever else the form holds
            assert r.status_code == 422, (typed, r.text[:300])
            again = read(r.text)
            field = "attendees" if target == "register" else "seats"
            if again.controls(field):  # the form is on the page (not sold out)
                name = field if target == "register" else "waitlist-seats"
                assert again.error(name) is not None, typed
    elif target == "intake":
        # digits of every script are text like any other in a name; a tab is not
        body = {"attendees": [{"name": typed or "Ada", "email": "ada@example.org"}]}
        r = await public.post(f"/intake/{event_id}", json=body)
        assert r.status_code in (201, 409, 422), (typed, r.text)
        if r.status_code == 422:
            assert "\t" in typed and r.json()["error"]["code"] == "invalid_characters"
    else:
        body = {"name": "Ada", "email": "ada@example.org", "seats": typed}
        r = await public.post(f"/intake/{event_id}/waitlist", json=body)
        assert r.status_code == 422, (typed, r.text)
        assert r.json()["error"]["field"] == "seats"


# --- control characters --------------------------------------------------------------------


async def test_control_characters_are_refused_on_every_route_that_writes_a_person(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Any
):
    event = await waitlisted(admin, seats=3)
    eid = event["id"]
    for bad in CONTROLS:
        name = f"Ada{bad}Lovelace"
        r = await post_json(
            public,
            f"/intake/{eid}",
            {
                "attendees": [
                    {"name": "Ok", "email": "ok@example.org"},
                    {"name": name, "email": "a@example.org"},
                ]
            },
        )
        assert r.status_code == 422, (bad, r.text)
        error = r.json()["error"]
        assert error["code"] == "invalid_characters", error
        assert error["field"] == "attendees.1.name", error
        assert name not in r.text  # never echoed
        r = await post_json(
            public,
            f"/intake/{eid}",
            {
                "attendees": [
                    {"name": "Ok", "email": "ok@example.org", "company_name": f"ACME{bad}"}
                ]
            },
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "attendees.0.company_name"
        r = await post_json(
            public, f"/intake/{eid}/waitlist", {"name": name, "email": "w@example.org", "seats": 1}
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text
        r = await post_json(
            admin, "/admin/registrations", {"event_id": eid, "name": name, "email": "x@example.org"}
        )
        assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text
    assert await count(api.pool, eid) == 0
    # a correction and the seam
    r = await admin.post("/admin/registrations", json={"event_id": eid, "name": "Grace"})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    r = await admin.patch(
        f"/admin/registrations/{rid}", json={"reason": "typo", "name": "Grace\x1bHopper"}
    )
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("invalid_characters", "name")
    seam = {
        "order_id": str(uuid.uuid4()),
        "amount_total": "0.00",
        "currency": "EUR",
        "lines": [
            {
                "line_id": str(uuid.uuid4()),
                "event_id": eid,
                "attendees": [{"name": "Bell\x07", "email": "b@example.org"}],
            }
        ],
    }
    r = await admin.post("/admin/seam/orders/confirmed", json=seam)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_characters"
    assert r.json()["error"]["field"] == "lines.0.attendees.0.name"
    assert await count(api.pool, eid) == 1


async def test_answers_text_box_keeps_line_breaks_others_are_one_line(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Any
):
    event = await published(admin, seats_max=10)
    eid = event["id"]
    note = await question(admin, eid, "Note")  # text_box
    who = await question(admin, eid, "Your name", "name")

    def body(note_text: str, name_text: str = "Ada") -> dict[str, Any]:
        answers = [
            {"question_id": note["id"], "value_text": note_text},
            {"question_id": who["id"], "value_text": name_text},
        ]
        return {
            "attendees": [
                {"name": "Ada", "email": f"{uuid.uuid4().hex[:8]}@example.org", "answers": answers}
            ]
        }

    r = await public.post(f"/intake/{eid}", json=body("line one\r\nline\ttwo"))
    assert r.status_code == 201, r.text
    r = await public.post(f"/intake/{eid}", json=body("a\x1b[2Jb"))
    assert r.status_code == 422
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
        "invalid_characters",
        "attendees.0.answers.0.value_text",
    )
    r = await public.post(f"/intake/{eid}", json=body("fine", "Ada\nLovelace"))
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
        "invalid_characters",
        "attendees.0.answers.1.value_text",
    )
    r = await admin.post(
        "/admin/registrations",
        json={
            "event_id": eid,
            "name": "Ada",
            "answers": [{"question_id": who["id"], "value_text": "A\tB"}],
        },
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "answers.0.value_text"
    assert await count(api.pool, eid) == 1


async def test_letters_of_every_script_stay_accepted(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
):
    event = await published(admin, seats_max=len(KEPT) + 1)
    for i, name in enumerate(KEPT):
        r = await public.post(
            f"/intake/{event['id']}",
            json={
                "attendees": [{"name": name, "email": f"k{i}@example.org", "company_name": name}]
            },
        )
        assert r.status_code == 201, (name, r.text)


async def test_the_forms_refuse_control_characters_beside_the_field(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Any
):
    event = await waitlisted(admin, seats=5)
    page = await open_page(public, event["id"])
    action, values = page.form("/register")
    for name in ("Ada\x1b[31mLovelace", "Ada\nLovelace", "Ada\tLovelace"):
        typed = values | {"attendee-1-name": name, "attendee-1-email": "ada@example.org"}
        r = await public.post(path_of(action), data=typed, headers=HTML)
        assert r.status_code == 422, r.text[:300]
        again = read(r.text)
        words = "Please remove the control characters from this field."
        assert again.error("attendee-1-name") == words, name
        assert "\x1b" not in r.text
    waiting = await full(admin)
    page = await open_page(public, waiting["id"])
    action, values = page.form("/waitlist")
    typed = values | {"name": "Wanda\x07", "email": "wanda@example.org", "seats": "1"}
    r = await public.post(path_of(action), data=typed, headers=HTML)
    assert r.status_code == 422, r.text[:300]
    assert (
        read(r.text).error("waitlist-name")
        == "Please remove the control characters from this field."
    )
    assert await count(api.pool, event["id"]) == 0
    assert await count(api.pool, waiting["id"], "waitlist_entry") == 0


# --- unpublished events on the intake --------------------------------------------------------


async def test_the_intake_answers_an_unpublished_event_like_an_unknown_one(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Any
):
    r = await admin.post("/admin/events", json=event_body(seats_max=0))
    assert r.status_code == 201
    draft = r.json()
    r = await admin.put(
        f"/admin/events/{draft['id']}/waitlist-settings", json={"enabled": True, "offer_hours": 24}
    )
    assert r.status_code == 200
    one = {"attendees": [{"name": "Ada", "email": "ada@example.org"}]}
    joining = {"name": "Ada", "email": "ada@example.org", "seats": 1}
    unknown = str(uuid.uuid4())
    for path, body in (("", one), ("/waitlist", joining)):
        missing = await public.post(f"/intake/{unknown}{path}", json=body)
        hidden = await public.post(f"/intake/{draft['id']}{path}", json=body)
        assert missing.status_code == hidden.status_code == 404, hidden.text
        assert missing.json() == hidden.json()
        assert hidden.json()["error"]["code"] == "event_not_published"
    # published later: 404 until its publication date
    r = await admin.post(
        f"/admin/events/{draft['id']}/publish", json={"date_publish": "2999-01-01T00:00:00Z"}
    )
    assert r.status_code == 200, r.text
    assert (await public.post(f"/intake/{draft['id']}", json=one)).status_code == 404
    # a private intake link still admits it
    link = await admin.post(f"/admin/events/{draft['id']}/capabilities/intake", json={})
    assert link.status_code in (200, 201), link.text
    key = link.json()["url"].split("/intake/")[1]
    admitted = await public.post(f"/intake/{key}", json=one)
    assert admitted.status_code == 201, admitted.text
    # a published event that is cancelled keeps its 409
    live = await published(admin, seats_max=5)
    r = await admin.patch(f"/admin/events/{live['id']}", json={"kanban_state": "cancel"})
    assert r.status_code == 200, r.text
    r = await public.post(f"/intake/{live['id']}", json=one)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "event_registrations_closed"
