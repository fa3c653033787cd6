"""The input rules of the HTTP contract and its typed answers: bounded integers, strict
JSON types, instants in the years 1900 to 9999, calendars at the edges of time, invalid
JSON, phone shapes, HEAD on the service routes, and the OpenAPI document itself."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import icalendar
import pytest
import vobject
from openapi_spec_validator import validate

from events_svc.settings import Settings
from tests.probes.helpers import correct, event_body

SECRET = "contract-secret-0123456789"
PAST_INT32 = 2**31


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(
        database_url=db_url,
        pool_min=1,
        pool_max=4,
        scheduler_enabled=False,
        capability_secrets=(SECRET,),
        intake_public=True,
    )


def refused(r: httpx.Response, code: str, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == 422, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code, error
    if field is not None:
        assert error["field"] == field, error
    return error


@pytest.fixture
async def world(admin: httpx.AsyncClient) -> dict[str, str]:
    """One object of every noun, for the routes that write under an id."""
    ids: dict[str, str] = {}

    async def make(key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await admin.post(path, json=body)
        assert r.status_code == 201, r.text
        ids[key] = r.json()["id"]
        return dict(r.json())

    event = await make("event", "/admin/events", event_body())
    await make("ticket", "/admin/tickets", {"event_id": event["id"], "name": "T"})
    category = await make("booth_category", "/admin/booth-categories", {"name": "C"})
    booth = {"event_id": event["id"], "name": "B", "booth_category_id": category["id"]}
    await make("booth", "/admin/booths", booth)
    await make("stage", "/admin/stages", {"name": "S"})
    await make("category", "/admin/tag-categories", {"name": "C"})
    await make("tag", "/admin/tags", {"name": "T", "category_id": ids["category"]})
    await make("type", "/admin/types", {"name": "T"})
    question = await make(
        "question", "/admin/questions", {"title": "Q", "answers": [{"name": "A"}]}
    )
    ids["answer"] = question["answers"][0]["id"]
    await make("template", "/admin/templates", {"name": "M", "body": "Hello"})
    await make("mail", "/admin/mails", {"event_id": ids["event"], "template_ref": ids["template"]})
    r = await admin.post("/admin/registrations", json={"event_id": ids["event"]})
    ids["registration"] = r.json()["id"]
    return ids


# (method, path template, body template, field): `{v}` is the value under test
INTEGER_FIELDS = [
    ("POST", "/admin/events", {**event_body(), "seats_max": "{v}"}, "seats_max"),
    ("PATCH", "/admin/events/{event}", {"seats_max": "{v}"}, "seats_max"),
    ("POST", "/admin/tickets", {"event_id": "{event}", "name": "T", "seats_max": "{v}"},
     "seats_max"),
    ("PATCH", "/admin/tickets/{ticket}", {"limit_max_per_order": "{v}"}, "limit_max_per_order"),
    ("POST", "/admin/stages", {"name": "S", "sequence": "{v}"}, "sequence"),
    ("PATCH", "/admin/stages/{stage}", {"sequence": "{v}"}, "sequence"),
    ("POST", "/admin/tag-categories", {"name": "C", "sequence": "{v}"}, "sequence"),
    ("POST", "/admin/tags", {"name": "T", "category_id": "{category}", "color": "{v}"},
     "color"),
    ("PATCH", "/admin/tags/{tag}", {"sequence": "{v}"}, "sequence"),
    ("POST", "/admin/types", {"name": "T", "seats_max": "{v}"}, "seats_max"),
    ("POST", "/admin/types/{type}/mails", {"template_ref": "{template}", "interval_nbr": "{v}"},
     "interval_nbr"),
    ("POST", "/admin/types/{type}/tickets", {"name": "T", "seats_max": "{v}"}, "seats_max"),
    ("POST", "/admin/types/{type}/questions", {"question_id": "{question}", "sequence": "{v}"},
     "sequence"),
    ("POST", "/admin/questions", {"title": "Q", "sequence": "{v}"}, "sequence"),
    ("POST", "/admin/questions/{question}/answers", {"name": "A", "sequence": "{v}"},
     "sequence"),
    ("PATCH", "/admin/questions/{question}/answers/{answer}", {"sequence": "{v}"}, "sequence"),
    ("POST", "/admin/events/{event}/questions", {"question_id": "{question}", "sequence": "{v}"},
     "sequence"),
    ("POST", "/admin/mails", {"event_id": "{event}", "template_ref": "{template}",
                              "interval_nbr": "{v}"}, "interval_nbr"),
    ("PATCH", "/admin/mails/{mail}", {"sequence": "{v}"}, "sequence"),
    ("POST", "/admin/events/{event}/capabilities/ics", {"ttl_seconds": "{v}"}, "ttl_seconds"),
]  # fmt: skip


def _fill(template: Any, ids: dict[str, str], value: Any) -> Any:
    if isinstance(template, dict):
        return {k: _fill(v, ids, value) for k, v in template.items()}
    if template == "{v}":
        return value
    if isinstance(template, str) and template.startswith("{") and template.endswith("}"):
        return ids[template[1:-1]]
    return template


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    INTEGER_FIELDS,
    ids=[f"{m} {p} {f}" for m, p, _, f in INTEGER_FIELDS],
)
async def test_integers_past_int32_answer_422_naming_the_field(
    admin: httpx.AsyncClient, world: dict[str, str], method: str, path: str, body: Any, field: str
):
    url = path.format(**world)
    for value in (PAST_INT32, -PAST_INT32, "5", True):  # past int32, and not JSON integers
        r = await admin.request(method, url, json=_fill(body, world, value))
        refused(r, "validation_failed", field)


async def test_list_limits_are_bounded(admin: httpx.AsyncClient, world: dict[str, str]):
    for value in (0, 201, PAST_INT32):
        r = await admin.get("/admin/events", params={"limit": value})
        refused(r, "validation_failed", "limit")
    r = await admin.get("/admin/stages", params={"cursor": "x" * 600})
    refused(r, "validation_failed", "cursor")
    r = await admin.get("/admin/registrations", params={"event_id": world["event"], "q": "x" * 300})
    refused(r, "validation_failed", "q")


async def test_json_types_are_strict(admin: httpx.AsyncClient):
    r = await admin.post("/admin/events", json=event_body(seats_limited="yes"))
    refused(r, "validation_failed", "seats_limited")
    r = await admin.post("/admin/events", json=event_body(seats_limited=1))
    refused(r, "validation_failed", "seats_limited")
    r = await admin.post("/admin/events", json=event_body(date_begin=1_800_000_000))
    refused(r, "validation_failed", "date_begin")
    r = await admin.post("/admin/stages", json={"name": "S", "sequence": 5.5})
    refused(r, "validation_failed", "sequence")
    r = await admin.post("/admin/events", json=event_body(seats_max=5, seats_limited=True))
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(
    "instant",
    [
        "0001-01-01T00:00:00Z",
        "1899-12-31T23:59:59Z",
        "1900-01-01T00:30:00+01:00",
        "9999-12-31T23:00:00-05:00",
    ],
)
async def test_instants_outside_1900_9999_answer_date_out_of_range(
    admin: httpx.AsyncClient, world: dict[str, str], instant: str
):
    r = await admin.post("/admin/events", json=event_body(date_begin=instant))
    error = refused(r, "date_out_of_range", "date_begin")
    assert instant not in json.dumps(error)
    r = await admin.get("/admin/events", params={"date_from": instant})
    refused(r, "date_out_of_range", "date_from")
    r = await admin.patch(f"/admin/tickets/{world['ticket']}", json={"end_sale_datetime": instant})
    refused(r, "date_out_of_range", "end_sale_datetime")
    r = await admin.post(f"/admin/events/{world['event']}/publish", json={"date_publish": instant})
    refused(r, "date_out_of_range", "date_publish")


async def test_the_edges_of_the_range_are_accepted(admin: httpx.AsyncClient):
    body = event_body(date_begin="1900-01-01T00:00:00Z", date_end="9999-12-31T23:59:59Z")
    assert (await admin.post("/admin/events", json=body)).status_code == 201


async def _published_calendar(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, **over: Any
) -> tuple[dict[str, Any], httpx.Response]:
    ev = (await admin.post("/admin/events", json=event_body(**over))).json()
    r = await admin.post(
        f"/admin/events/{ev['id']}/publish", json={"date_publish": "2020-01-01T00:00:00Z"}
    )
    assert r.status_code == 200, r.text
    token = (await admin.post(f"/admin/events/{ev['id']}/capabilities/ics", json={})).json()
    return dict(ev), await public.get(f"/public/ics/{token['token']}")


@pytest.mark.parametrize(
    ("zone", "begin", "end"),
    [
        ("Etc/GMT+12", "1900-01-01T00:00:00Z", "1900-01-01T02:00:00Z"),
        ("Etc/GMT-14", "9999-12-31T20:00:00Z", "9999-12-31T23:00:00Z"),
        ("Pacific/Kiritimati", "9999-12-31T20:00:00Z", "9999-12-31T23:59:59Z"),
        ("America/New_York", "1900-01-01T00:00:00Z", "1900-01-02T00:00:00Z"),
    ],
)
async def test_calendars_at_the_edges_of_time_parse(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, zone: str, begin: str, end: str
):
    ev, r = await _published_calendar(
        admin, public, date_tz=zone, date_begin=begin, date_end=end, seats_limited=False
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/calendar")
    parsed = icalendar.Calendar.from_ical(r.content)
    vevent = next(iter(parsed.walk("VEVENT")))
    assert vevent.decoded("dtstart") == datetime.fromisoformat(begin)
    assert vevent.decoded("dtend") == datetime.fromisoformat(end)
    other = vobject.readOne(r.text)
    assert other.vevent.dtstart.value.astimezone(UTC) == datetime.fromisoformat(begin)
    # the attendee's tickets show the same instants (in the zone when it exists there)
    reg = (await admin.post("/admin/registrations", json={"event_id": ev["id"]})).json()
    link = (
        await admin.post(
            f"/admin/events/{ev['id']}/capabilities/my-tickets",
            json={"registration_ids": [reg["id"]]},
        )
    ).json()
    mine = await public.get(f"/public/my-tickets/{link['token']}")
    assert mine.status_code == 200, mine.text
    shown = datetime.fromisoformat(mine.json()["event"]["date_end"])
    assert shown == datetime.fromisoformat(end)


async def test_malformed_json_answers_invalid_json_with_line_and_column(admin: httpx.AsyncClient):
    doc = '{\n  "name": "Secret Gala",\n  "seats_max": }\n'
    r = await admin.post("/admin/events", content=doc, headers={"content-type": "application/json"})
    error = refused(r, "invalid_json")
    assert (error["line"], error["column"]) == (3, 16)
    assert "field" not in error and "Secret Gala" not in r.text
    r = await admin.post(
        "/admin/stages", content="[1, 2", headers={"content-type": "application/json"}
    )
    error = refused(r, "invalid_json")
    assert (error["line"], error["column"]) == (1, 6)
    r = await admin.post(
        "/admin/stages",
        content=b"\x85\xc6'\x83",  # not even UTF-8
        headers={"content-type": "application/json"},
    )
    refused(r, "invalid_json")


@pytest.mark.parametrize(
    "body",
    [b'{"seats_max": ' + b"1" * 5000 + b"}", b"[" * 100_000, b'{"a": ' * 50_000],
    ids=["integer-past-the-digit-limit", "deep-array", "deep-object"],
)
async def test_json_the_parser_will_not_read_answers_invalid_json(admin, body: bytes):
    for path in ("/admin/events", "/admin/registrations"):
        r = await admin.post(path, content=body, headers={"content-type": "application/json"})
        refused(r, "invalid_json")


@pytest.mark.parametrize("phone", ["call me maybe", "12345", "1" * 33, "+44 20 7946 0958 x12"])
async def test_phones_must_look_like_phones(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, world: dict[str, str], phone: str
):
    body = {"event_id": world["event"], "name": "Ada", "phone": phone}
    error = refused(await admin.post("/admin/registrations", json=body), "phone_invalid", "phone")
    assert phone not in json.dumps(error)
    r = await correct(admin, world["registration"], phone=phone)
    refused(r, "phone_invalid", "phone")
    await admin.post(f"/admin/events/{world['event']}/publish", json={})
    attendee = {"name": "Ada", "email": "ada@example.org", "phone": phone}
    r = await public.post(f"/intake/{world['event']}", json={"attendees": [attendee]})
    refused(r, "phone_invalid", "attendees.0.phone")


async def test_empty_and_real_phones_are_accepted(admin: httpx.AsyncClient, world: dict[str, str]):
    for phone in ("", "+44 (0)20 7946-0958", "06.12.34.56.78"):
        body = {"event_id": world["event"], "phone": phone}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201


@pytest.mark.parametrize(
    "path", ["/healthz", "/readyz", "/api/v1/event/healthz", "/api/v1/event/readyz"]
)
async def test_head_answers_like_get(app: Any, path: str):
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://test"
    ) as client:
        got, head = await client.get(path), await client.head(path)
    assert head.status_code == got.status_code == 200
    for name in ("content-type", "content-length", "cache-control"):
        assert head.headers.get(name) == got.headers.get(name), name


async def test_openapi_declares_every_answer(app: Any):
    doc = app.openapi()
    validate(doc)
    assert "/metrics" not in doc["paths"]
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    for path, ops in doc["paths"].items():
        assert "head" not in ops, path
        for method, op in ops.items():
            label = f"{method.upper()} {path}"
            answers = op["responses"]
            ok = [code for code in answers if code.startswith("2")]
            assert ok, label
            for code in ok:
                if code != "204":
                    assert answers[code].get("content"), label
            if path.endswith(("/healthz", "/readyz")):
                continue
            for code in ("404", "413", "422", "503"):
                if code == "422" and list(answers[code]["content"]) == ["text/html"]:
                    continue  # the event page's forms: a refusal is the page again
                assert answers[code]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }, (label, code)
    ics = doc["paths"]["/api/v1/event/public/ics/{capability}"]["get"]["responses"]["200"]
    assert list(ics["content"]) == ["text/calendar"]
    seats = schemas["EventCreate"]["properties"]["seats_max"]["anyOf"][0]
    assert (seats["minimum"], seats["maximum"]) == (0, 1_000_000)


async def test_views_carry_the_contract_fields(admin: httpx.AsyncClient, world: dict[str, str]):
    ev = (await admin.get(f"/admin/events/{world['event']}")).json()
    assert {
        "revision",
        "ics_sequence",
        "is_published",
        "date_publish",
        "stage_id",
        "kanban_state",
        "is_ongoing",
        "is_finished",
        "seats",
        "tag_ids",
    } <= set(ev)
    scope = {"limited", "cap", "reserved", "used", "held", "taken", "available"}
    assert scope <= set(ev["seats"]["event"])
    mail = (await admin.get(f"/admin/mails/{world['mail']}")).json()
    assert {
        "mail_state",
        "error_kind",
        "error_datetime",
        "next_attempt_at",
        "count_sent",
        "count_pending",
        "count_failed",
        "scheduled_date",
    } <= set(mail)
    assert isinstance(mail["mail_done"], bool)
    template = (await admin.get(f"/admin/templates/{world['template']}")).json()
    assert isinstance(template["links_unavailable"], list)
    reg = (await admin.get(f"/admin/registrations/{world['registration']}")).json()
    assert {
        "state",
        "sale_status",
        "barcode",
        "active",
        "date_closed",
        "version",
        "created_at",
        "answers",
    } <= set(reg)
    booth = (await admin.get(f"/admin/booths/{world['booth']}")).json()
    assert {"event_id", "name", "booth_category_id", "state", "is_paid", "bookings"} <= set(booth)
    assert {"contact_name", "contact_email", "contact_phone"} <= set(booth)
