"""The communication scheduler: engines, receipts, windows, failures, batches.

Time is a parameter: every pass is run with an explicit `now`; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from events_svc.adapters.standalone import OutboxQueue, StoreRenderer
from events_svc.ports import Ports
from events_svc.verbs.mail import PassOptions, run_mail_pass
from tests.probes.helpers import (
    BASE,
    BEGIN,
    END,
    Api,
    add_slot,
    cancel,
    correct,
    event_body,
    outbox,
    ports,
    preview,
    run,
    scheduler,
    start,
    template,
)


async def people(admin: httpx.AsyncClient, event_id: str, n: int, **extra: Any) -> list[dict]:
    out = []
    for i in range(n):
        r = await admin.post(
            "/admin/registrations",
            params={"pii": "full"},
            json={
                "event_id": event_id,
                "name": f"Guest {i}",
                "email": f"guest{i}@example.org",
                **extra,
            },
        )
        assert r.status_code == 201, r.text
        out.append(r.json())
    return out


async def mail(admin: httpx.AsyncClient, mail_id: str) -> dict:
    return dict((await admin.get(f"/admin/mails/{mail_id}")).json())


async def test_before_event_mail_goes_once_to_each_eligible_attendee(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    tpl = await template(admin)
    guests = await people(admin, ev["id"], 4)
    await cancel(admin, guests[1]["id"])
    await admin.post(f"/admin/registrations/{guests[2]['id']}/archive")
    await admin.post(f"/admin/registrations/{guests[3]['id']}/set-draft")
    m = await scheduler(admin, ev["id"], tpl)
    assert m["scheduled_date"].startswith("2027-05-09T09:00")
    assert m["mail_state"] == "scheduled" and m["count_pending"] == 1
    assert (await run(api, BEGIN - timedelta(days=2))).sent == 0  # not due yet
    summary = await run(api, BEGIN - timedelta(hours=12))
    assert summary.sent == 1
    sent = await outbox(api)
    assert [(o["recipient"], o["subject"], o["body"]) for o in sent] == [
        ("guest0@example.org", "About PyCon Lisbon", "Hello Guest 0")
    ]
    assert sent[0]["sender"] == "events@example.org"
    assert (await run(api, BEGIN - timedelta(hours=11))).sent == 0  # exactly once
    view = await mail(admin, m["id"])
    assert view["mail_done"] is True and view["mail_state"] == "sent" and view["count_sent"] == 1


async def test_a_late_registrant_reopens_a_finished_scheduler(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    m = await scheduler(admin, ev["id"], await template(admin))
    await people(admin, ev["id"], 2)
    assert (await run(api, BEGIN - timedelta(hours=1))).sent == 2
    assert (await mail(admin, m["id"]))["mail_done"] is True
    await people(admin, ev["id"], 1)
    assert (await mail(admin, m["id"]))["mail_done"] is False
    assert (await run(api, BEGIN - timedelta(minutes=30))).sent == 1
    assert len(await outbox(api)) == 3


async def test_an_ended_event_drops_a_before_event_mail_visibly(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 3)
    m = await scheduler(admin, ev["id"], await template(admin))
    summary = await run(api, END + timedelta(hours=1))
    assert summary.sent == 0 and summary.dropped == 3
    assert await outbox(api) == []
    view = await mail(admin, m["id"])
    assert view["mail_done"] is True and view["count_dropped"] == 3


async def test_a_cancelled_event_sends_nothing(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 2)
    m = await scheduler(admin, ev["id"], await template(admin))
    # an event with attendees is cancelled by an event operation
    op = await start(admin, await preview(admin, ev["id"], "cancellation"))
    assert (await admin.post(f"/admin/operations/{op['id']}/resume")).json()["state"] == "completed"
    assert (await run(api, BEGIN)).sent == 0
    assert (await mail(admin, m["id"]))["mail_state"] == "cancelled"


@pytest.mark.parametrize(
    ("kind", "unit", "nbr", "due"),
    [
        ("before_event", "days", 2, BEGIN - timedelta(days=2)),
        ("before_event", "now", 5, BEGIN),
        ("after_event_start", "hours", 3, BEGIN + timedelta(hours=3)),
        ("before_event_end", "weeks", 1, END - timedelta(weeks=1)),
        ("after_event", "months", 1, datetime(2027, 6, 12, 18, 0, tzinfo=UTC)),
    ],
)
async def test_each_interval_kind_and_unit(api: Api, admin, kind, unit, nbr, due):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    m = await scheduler(
        admin,
        ev["id"],
        await template(admin),
        interval_kind=kind,
        interval_unit=unit,
        interval_nbr=nbr,
    )
    assert datetime.fromisoformat(m["scheduled_date"]) == due
    assert (await run(api, due - timedelta(seconds=1))).sent == 0
    assert (await run(api, due)).sent == 1


async def test_after_sub_is_due_from_the_time_a_row_became_eligible(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    m = await scheduler(
        admin,
        ev["id"],
        await template(admin),
        interval_kind="after_sub",
        interval_unit="hours",
        interval_nbr=2,
    )
    first, second = await people(admin, ev["id"], 2)
    await admin.post(f"/admin/registrations/{second['id']}/set-draft")
    opened = datetime.fromisoformat(first["date_open"])
    assert (await run(api, opened + timedelta(hours=1))).sent == 0
    assert (await run(api, opened + timedelta(hours=2, seconds=1))).sent == 1
    # re-confirm of an open row and open -> done never re-send
    await admin.post(f"/admin/registrations/{first['id']}/confirm")
    await admin.post(f"/admin/registrations/{first['id']}/set-done")
    assert (await run(api, opened + timedelta(hours=3))).sent == 0
    # the draft healed to open: due two hours after THAT, not after its creation
    healed = (await admin.post(f"/admin/registrations/{second['id']}/confirm")).json()
    healed_at = datetime.fromisoformat(healed["date_open"])
    assert (await run(api, healed_at + timedelta(hours=1))).sent == 0
    assert (await run(api, healed_at + timedelta(hours=2, seconds=1))).sent == 1
    assert len(await outbox(api, m["id"])) == 2


async def test_receipts_of_attendees_who_left_are_pruned(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    m = await scheduler(
        admin,
        ev["id"],
        await template(admin),
        interval_kind="after_sub",
        interval_unit="days",
        interval_nbr=1,
    )
    a, b = await people(admin, ev["id"], 2)
    due = datetime.fromisoformat(b["date_open"]) + timedelta(days=1, minutes=1)
    first = await run(api, due, batch=1, cap=1)  # both receipts exist, one mail went
    assert (first.sent, first.more) == (1, True)
    await cancel(admin, b["id"])
    summary = await run(api, due)
    assert summary.sent == 0 and summary.pruned == 1
    assert [o["registration_id"] for o in await outbox(api, m["id"])] == [uuid.UUID(a["id"])]
    assert (await mail(admin, m["id"]))["mail_done"] is True
    async with api.pool.acquire() as conn:
        audit = await conn.fetchrow(
            "SELECT actor_id, summary FROM event.event_audit_log WHERE verb = $1",
            "mail_receipts_pruned",
        )
    assert audit["actor_id"] == "system" and audit["summary"] == {"receipts": 1}


async def test_batches_and_the_per_pass_cap(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body(seats_max=0))).json()
    async with api.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, name, email)"
            " SELECT $1, g::text, 'G' || g, 'g' || g || '@example.org'"
            " FROM generate_series(1, 30) g",
            uuid.UUID(ev["id"]),
        )
    m = await scheduler(admin, ev["id"], await template(admin))
    first = await run(api, BEGIN, batch=5, cap=20)
    assert (first.sent, first.more) == (20, True)
    assert (await mail(admin, m["id"]))["mail_state"] == "running"
    second = await run(api, BEGIN, batch=5, cap=20)
    assert (second.sent, second.more) == (10, False)
    assert len(await outbox(api)) == 30


async def test_the_slot_engine_sends_per_slot(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body(is_multi_slots=True))).json()
    morning = await add_slot(admin, ev["id"], 10)
    evening = await add_slot(admin, ev["id"], 20)
    await people(admin, ev["id"], 2, event_slot_id=morning["id"])
    await people(admin, ev["id"], 1, event_slot_id=evening["id"])
    m = await scheduler(
        admin, ev["id"], await template(admin), interval_nbr=1, interval_unit="hours"
    )
    assert m["scheduled_date"].startswith("2027-05-10T09:00")  # the earliest child
    s1 = await run(api, datetime(2027, 5, 10, 9, 30, tzinfo=UTC))
    assert s1.sent == 2
    assert (await mail(admin, m["id"]))["scheduled_date"].startswith("2027-05-10T19:00")
    s2 = await run(api, datetime(2027, 5, 10, 19, 30, tzinfo=UTC))
    assert s2.sent == 1 and (await mail(admin, m["id"]))["mail_done"] is True


async def _lines_failing(api: Api) -> float:
    c = httpx.AsyncClient(transport=httpx.ASGITransport(app=api.app), base_url="http://t")
    text = (await c.get("/metrics")).text
    await c.aclose()
    (line,) = [x for x in text.splitlines() if x.startswith("events_scheduler_lines_failing ")]
    return float(line.split()[1])


async def test_failures_are_typed_recorded_and_cleared(api: Api, admin, caplog):
    caplog.set_level(logging.DEBUG, logger="events_svc.scheduler")
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    tpl = await template(admin, body="Hello {{ registration.name|length // 0 }}")
    m = await scheduler(admin, ev["id"], tpl)
    s = await run(api, BEGIN)
    assert s.sent == 0 and s.failures == {"render_failed": 1} and s.failed == 1
    view = await mail(admin, m["id"])
    assert view["mail_state"] == "error" and view["error_kind"] == "render_failed"
    assert view["error_detail"].startswith("ZeroDivisionError")
    assert await _lines_failing(api) == 1
    await admin.patch(f"/admin/templates/{tpl}", json={"body": "Hello {{ registration.name }}"})
    assert (await run(api, BEGIN)).sent == 1
    view = await mail(admin, m["id"])
    assert view["error_kind"] is None and view["mail_state"] == "sent"
    assert (view["attempts"], view["next_attempt_at"], view["error_detail"]) == (0, None, None)
    assert await _lines_failing(api) == 0
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith("scheduler")]
    assert said == [("WARNING", "scheduler line failing"), ("INFO", "scheduler line recovered")]


async def _line_without_template(api: Api, event_id: str, ref: uuid.UUID) -> str:
    """A line whose template the renderer no longer has (a host's store lost it): the API
    refuses to write one, so the probe inserts it."""
    async with api.pool.acquire() as conn:
        mail_id = await conn.fetchval(
            "INSERT INTO event.mails (event_id, interval_nbr, interval_unit, interval_kind,"
            " template_ref, scheduled_date) VALUES ($1, 1, 'days', 'before_event', $2, $3)"
            " RETURNING id",
            uuid.UUID(event_id),
            ref,
            BEGIN - timedelta(days=1),
        )
    return str(mail_id)


async def test_each_scheduler_failure_kind_is_recorded_then_cleared(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    missing = uuid.uuid4()
    mail_id = await _line_without_template(api, ev["id"], missing)
    now = BEGIN

    async def fails_with(kind: str, p: Ports | None = None) -> None:
        nonlocal now
        s = await run(api, now, p=p)
        assert s.failures == {kind: 1} and s.sent == 0
        view = await mail(admin, mail_id)
        assert view["error_kind"] == kind and view["error_datetime"] is not None
        now = datetime.fromisoformat(view["next_attempt_at"])  # the back-off, then again

    await fails_with("template_unresolved")
    async with api.pool.acquire() as conn:  # the template appears under that id
        await conn.execute(
            "INSERT INTO event.message_templates (id, name, subject, body)"
            " VALUES ($1, 'Late', 'Hi', 'Hello {{ registration.name }}')",
            missing,
        )
    await fails_with("template_renderer_not_composed", Ports())
    await fails_with("enqueue_refused", Ports(template_renderer=StoreRenderer()))
    assert (await run(api, now)).sent == 1
    view = await mail(admin, mail_id)
    assert view["error_kind"] is None and view["error_datetime"] is None
    assert view["mail_state"] == "sent"


@pytest.mark.parametrize("engine", ["event", "after_sub", "slot"])
async def test_an_unreachable_recipient_fails_alone_and_is_retried_when_corrected(
    api: Api, admin, engine: str
):
    multi = engine == "slot"
    ev = (await admin.post("/admin/events", json=event_body(is_multi_slots=multi))).json()
    where = {"event_slot_id": (await add_slot(admin, ev["id"], 10))["id"]} if multi else {}
    await people(admin, ev["id"], 2, **where)
    body = {"event_id": ev["id"], "name": "No mail", **where}
    nomail = (await admin.post("/admin/registrations", json=body)).json()
    kinds = {"after_sub": {"interval_kind": "after_sub", "interval_unit": "now"}}
    m = await scheduler(admin, ev["id"], await template(admin), **kinds.get(engine, {}))
    when = BEGIN if engine != "after_sub" else datetime.fromisoformat(nomail["date_open"])
    s = await run(api, when)
    assert (s.sent, s.recipients_failed, s.failures) == (2, 1, {"recipient_invalid": 1})
    view = await mail(admin, m["id"])
    assert view["error_kind"] is None and view["mail_done"] is True
    assert (view["count_sent"], view["count_failed"], view["count_pending"]) == (2, 1, 0)
    again = await run(api, when + timedelta(minutes=5))  # recorded once, not retried per pass
    assert (again.sent, again.recipients_failed, again.schedulers) == (0, 0, 0)
    fixed = await correct(admin, nomail["id"], email="n@ex.org")
    assert fixed.status_code == 200
    assert (await mail(admin, m["id"]))["mail_done"] is False  # the correction reopened it
    assert (await run(api, when + timedelta(minutes=6))).sent == 1
    view = await mail(admin, m["id"])
    assert (view["count_sent"], view["count_failed"], view["mail_done"]) == (3, 0, True)
    assert [o["recipient"] for o in await outbox(api, m["id"])][-1] == "n@ex.org"


async def test_queue_refusal_keeps_the_work_pending(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 2)
    m = await scheduler(admin, ev["id"], await template(admin))
    refusing = Ports(template_renderer=StoreRenderer())
    s = await run(api, BEGIN, p=refusing)
    assert s.failures == {"enqueue_refused": 1} and s.sent == 0
    assert (await mail(admin, m["id"]))["count_pending"] == 2
    assert (await run(api, BEGIN + timedelta(minutes=1))).sent == 2
    assert (await mail(admin, m["id"]))["error_kind"] is None


async def test_a_failing_line_backs_off_while_the_other_events_are_sent(api: Api, admin):
    ongoing = {"date_begin": "2026-01-01T00:00:00Z", "date_end": "2099-01-01T00:00:00Z"}
    broken_ev = (await admin.post("/admin/events", json=event_body(**ongoing))).json()
    fine_ev = (await admin.post("/admin/events", json=event_body(**ongoing))).json()
    await people(admin, broken_ev["id"], 1)
    await people(admin, fine_ev["id"], 2)
    due_now = {"interval_kind": "after_event_start", "interval_unit": "now", "interval_nbr": 0}
    # a type error at render time, for this attendee's data
    bad = await template(admin, body="{{ registration.name + 1 }}")
    broken = await scheduler(admin, broken_ev["id"], bad, **due_now)
    fine = await scheduler(admin, fine_ev["id"], await template(admin), **due_now)
    r = await admin.post("/admin/schedulers/run")  # the whole pass, through HTTP: no 500
    assert r.status_code == 200, r.text
    assert (r.json()["sent"], r.json()["failures"]) == (2, {"render_failed": 1})
    assert (await mail(admin, fine["id"]))["mail_state"] == "sent"
    view = await mail(admin, broken["id"])
    assert (view["attempts"], view["error_detail"]) == (1, "TypeError at template line 1")
    failed_at = datetime.fromisoformat(view["error_datetime"])
    first_retry = datetime.fromisoformat(view["next_attempt_at"])
    assert first_retry == failed_at + timedelta(minutes=1)
    assert (await run(api, first_retry - timedelta(seconds=1))).schedulers == 0  # backing off
    retry = await run(api, first_retry)
    assert retry.failures == {"render_failed": 1}
    view = await mail(admin, broken["id"])
    assert view["attempts"] == 2
    assert datetime.fromisoformat(view["next_attempt_at"]) == first_retry + timedelta(minutes=2)
    # editing the line clears the back-off (the error shows until a success)
    await admin.patch(f"/admin/mails/{broken['id']}", json={"sequence": 5})
    view = await mail(admin, broken["id"])
    assert (view["attempts"], view["next_attempt_at"], view["mail_state"]) == (0, None, "error")


async def test_a_line_may_only_name_an_existing_template(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    nowhere = str(uuid.uuid4())
    body = {"event_id": ev["id"], "template_ref": nowhere}
    r = await admin.post("/admin/mails", json=body)
    assert r.status_code == 422
    assert r.json()["error"] | {"detail": ""} == {
        "code": "template_not_found",
        "detail": "",
        "field": "template_ref",
        "template_ref": nowhere,
    }
    m = await scheduler(admin, ev["id"], await template(admin))
    r = await admin.patch(f"/admin/mails/{m['id']}", json={"template_ref": nowhere})
    assert r.status_code == 422 and r.json()["error"]["code"] == "template_not_found"
    kind = (await admin.post("/admin/types", json={"name": "Conference"})).json()
    r = await admin.post(f"/admin/types/{kind['id']}/mails", json={"template_ref": nowhere})
    assert r.status_code == 422 and r.json()["error"]["code"] == "template_not_found"


async def test_templates_are_checked_when_written(api: Api, admin):
    r = await admin.post("/admin/templates", json={"name": "T", "body": "Hi\n{% if %}"})
    assert r.status_code == 422
    assert (r.json()["error"]["code"], r.json()["error"]["line"]) == ("template_invalid", 2)
    r = await admin.post("/admin/templates", json={"name": "T", "body": "{{ attendee.name }}"})
    assert r.status_code == 422
    error = r.json()["error"]
    assert (error["code"], error["variable"]) == ("template_variable_unknown", "attendee")
    tpl = await template(admin)
    r = await admin.patch(f"/admin/templates/{tpl}", json={"subject": "{{ registration.nick }}"})
    assert r.status_code == 422 and r.json()["error"]["variable"] == "registration.nick"
    assert r.json()["error"]["field"] == "subject"


async def test_links_that_cannot_be_minted_render_empty_and_are_listed(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    tpl = await template(admin, body="[{{ links.ics }}|{{ links.my_tickets }}]")
    assert (await admin.get(f"/admin/templates/{tpl}")).json()["links_unavailable"] == [
        "ics",
        "my_tickets",
    ]
    await scheduler(admin, ev["id"], tpl)
    assert (await run(api, BEGIN)).sent == 1
    assert (await outbox(api))[0]["body"] == "[|]"


async def test_the_outbox_shows_rendered_text_only_to_full_pii_readers(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    await scheduler(admin, ev["id"], await template(admin))
    await run(api, BEGIN)
    url = f"/admin/outbox?event_id={ev['id']}"
    r = await api.client.get(url, headers=await api.token("event:read"))
    assert r.status_code == 403 and r.json()["error"]["scope"] == "registration:read"
    r = await api.client.get(url, headers=await api.token("registration:read"))
    (item,) = r.json()["items"]
    assert (item["recipient"], item["subject"], item["body"]) == ("g***@example.org", None, None)
    assert "Guest" not in r.text
    r = await api.client.get(url + "&pii=full", headers=await api.token("registration:read"))
    assert r.status_code == 403 and r.json()["error"]["scope"] == "registration:pii"
    full = await api.token("registration:read", "registration:pii")
    (item,) = (await api.client.get(url + "&pii=full", headers=full)).json()["items"]
    assert (item["recipient"], item["body"]) == ("guest0@example.org", "Hello Guest 0")
    async with api.pool.acquire() as conn:
        audited = await conn.fetchval(
            "SELECT count(*) FROM event.event_audit_log WHERE verb = 'outbox_pii_read'"
        )
    assert audited == 1


async def test_moving_the_event_retimes_unsent_work_only(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, ev["id"], 1)
    sent = await scheduler(admin, ev["id"], await template(admin), interval_nbr=3)
    await run(api, BEGIN - timedelta(days=2))
    pending = await scheduler(admin, ev["id"], await template(admin), interval_nbr=1)
    # an event with attendees moves by an event operation
    new = {"date_begin": "2027-06-10T09:00:00Z", "date_end": "2027-06-12T18:00:00Z"}
    op = await start(admin, await preview(admin, ev["id"], "reschedule", **new))
    assert (await admin.post(f"/admin/operations/{op['id']}/resume")).json()["state"] == "completed"
    assert (await mail(admin, pending["id"]))["scheduled_date"].startswith("2027-06-09T09:00")
    assert (await mail(admin, sent["id"]))["count_sent"] == 1
    assert (await run(api, BEGIN)).sent == 0


async def test_templates_get_the_attendees_links_when_the_deployment_can_mint_them(api, admin):
    from events_svc.capabilities import ICS, MY_TICKETS, CapabilityCodec
    from events_svc.links import AttendeeLinks

    codec = CapabilityCodec(("links-secret-0123456789",))
    ev = (await admin.post("/admin/events", json=event_body())).json()
    guest = (await people(admin, ev["id"], 1))[0]
    tpl = await template(admin, body="{{ links.ics }} {{ links.my_tickets }}")
    await scheduler(admin, ev["id"], tpl)
    links = AttendeeLinks(codec, "https://events.example.org", 86400)
    options = PassOptions(batch=50, cap=1000, default_sender="events@example.org", links=links)
    assert (await run_mail_pass(api.pool, ports(api.pool), options, BEGIN)).sent == 1
    ics_url, tickets_url = (await outbox(api))[0]["body"].split()
    base = "https://events.example.org/api/v1/event/public"
    assert ics_url.startswith(f"{base}/ics/") and tickets_url.startswith(f"{base}/my-tickets/")
    now = datetime.now(UTC)
    assert codec.open(ICS, ics_url.rsplit("/", 1)[1], now)["e"] == ev["id"]
    assert codec.open(MY_TICKETS, tickets_url.rsplit("/", 1)[1], now)["r"] == [guest["id"]]


async def test_the_service_keeps_answering_while_a_hostile_template_renders(api: Api, admin):
    ongoing = {"date_begin": "2026-01-01T00:00:00Z", "date_end": "2099-01-01T00:00:00Z"}
    ev = (await admin.post("/admin/events", json=event_body(**ongoing))).json()
    await people(admin, ev["id"], 1)
    # no loop and no output: 2**25 macro calls, until the render's deadline stops it
    burn = "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
    m = await scheduler(admin, ev["id"], await template(admin, body=burn + "{{ f(25) }}"))
    running = asyncio.create_task(admin.post(f"/admin/mails/{m['id']}/run"))
    answered = 0
    while not running.done():
        assert (await api.client.get("/healthz")).status_code == 200
        answered += 1
        await asyncio.sleep(0.01)
    assert answered >= 20  # the event loop kept serving during the whole render
    ran = (await running).json()
    assert ran["summary"]["failures"] == {"render_failed": 1}
    assert ran["mail"]["error_detail"].endswith("deadline of 2 s")


async def test_an_unarchived_attendee_gets_the_mails_it_missed(api: Api, admin):
    ev = (await admin.post("/admin/events", json=event_body())).json()
    stay, away = await people(admin, ev["id"], 2)
    await admin.post(f"/admin/registrations/{away['id']}/archive")
    m = await scheduler(admin, ev["id"], await template(admin))
    assert (await run(api, BEGIN - timedelta(hours=2))).sent == 1
    assert (await mail(admin, m["id"]))["mail_done"] is True
    await admin.post(f"/admin/registrations/{away['id']}/unarchive")
    assert (await mail(admin, m["id"]))["mail_done"] is False  # owed again
    assert (await run(api, BEGIN - timedelta(hours=1))).sent == 1
    assert sorted(o["recipient"] for o in await outbox(api)) == [stay["email"], away["email"]]
    await admin.post(f"/admin/registrations/{away['id']}/archive")
    await admin.post(f"/admin/registrations/{away['id']}/unarchive")
    assert (await run(api, BEGIN - timedelta(minutes=30))).sent == 0  # never twice


async def test_a_newcomer_between_two_batches_never_makes_a_pass_loop(api: Api, admin):
    """An attendee who becomes eligible while a pass is between two batches of an
    after-subscription line (here a row written behind the service's back): the pass ends,
    and the newcomer is sent too."""
    ev = (await admin.post("/admin/events", json=event_body(seats_max=0))).json()
    await people(admin, ev["id"], 2)
    m = await scheduler(
        admin,
        ev["id"],
        await template(admin),
        interval_kind="after_sub",
        interval_unit="now",
        interval_nbr=0,
    )
    store = StoreRenderer()

    class Joining:
        calls = 0

        async def render(self, conn: Any, request: Any) -> Any:
            Joining.calls += 1
            if Joining.calls == 1:
                async with api.pool.acquire() as other:
                    await other.execute(
                        "INSERT INTO event.registrations (event_id, barcode, name, email,"
                        " date_open) VALUES ($1, '99', 'New', 'new@example.org', $2)",
                        uuid.UUID(ev["id"]),
                        BEGIN,
                    )
            return await store.render(conn, request)

        async def template_kind(self, conn: Any, ref: uuid.UUID) -> str | None:
            return await store.template_kind(conn, ref)

    joining = Ports(template_renderer=Joining(), mail_queue=OutboxQueue())
    summary = await asyncio.wait_for(run(api, BEGIN, batch=1, p=joining), 30)
    assert summary.sent == 3
    assert len(await outbox(api, m["id"])) == 3


async def test_no_renderer_composed_refuses_lines_loudly(settings, pool):
    from events_svc import create_app
    from events_svc.verbs.tokens import create_token

    app = create_app(settings, ports=Ports())  # a host that composed nothing
    async with app.router.lifespan_context(app):
        token, _ = await create_token(pool, "probe", ["*"], None, datetime.now(UTC))
        c = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url=BASE,
            headers={"Authorization": f"Bearer {token}"},
        )
        ev = (await c.post("/admin/events", json=event_body())).json()
        r = await c.post(
            "/admin/mails", json={"event_id": ev["id"], "template_ref": str(uuid.uuid4())}
        )
        await c.aclose()
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "template_renderer_not_composed"


async def test_the_failure_kinds_are_the_database_type(api: Api):
    from events_svc.ports import MailErrorKind

    async with api.pool.acquire() as conn:
        labels = await conn.fetchval("SELECT enum_range(NULL::event.mail_error_kind)::text[]")
    assert sorted(labels) == sorted(kind.value for kind in MailErrorKind)


async def test_a_failing_partner_directory_fails_its_line_alone(api: Api, admin):
    """The sender is asked of the host's directory before the claim (no lock held); a
    directory that raises fails that line, backed off, and the other lines are sent."""

    class Broken:
        async def contact(self, partner_id: uuid.UUID) -> Any:
            raise ConnectionError("the directory is down")

    organized = (
        await admin.post("/admin/events", json=event_body(organizer_id=str(uuid.uuid4())))
    ).json()
    plain = (await admin.post("/admin/events", json=event_body())).json()
    await people(admin, organized["id"], 1)
    await people(admin, plain["id"], 1)
    broken = await scheduler(admin, organized["id"], await template(admin))
    fine = await scheduler(admin, plain["id"], await template(admin))
    store = Ports(
        partner_directory=Broken(), template_renderer=StoreRenderer(), mail_queue=OutboxQueue()
    )
    s = await run(api, BEGIN, p=store)
    assert (s.sent, s.failures) == (1, {"batch_failed": 1})
    view = await mail(admin, broken["id"])
    assert (view["error_kind"], view["error_detail"]) == ("batch_failed", "ConnectionError")
    assert view["next_attempt_at"] is not None
    assert (await mail(admin, fine["id"]))["mail_state"] == "sent"
