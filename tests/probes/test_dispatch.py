"""The optional trigger dispatcher: triggers written by event operations (previewed,
started and resumed through the API) become one mail each, through the standalone template
store and outbox. Calendar triggers carry an `.ics` read by two independent parsers
(icalendar and vobject): METHOD:REQUEST with the new times, METHOD:CANCEL, the event's
stable UID, the trigger's SEQUENCE. A purpose without a template parks only its own
triggers, backing off, until it is mapped; racing dispatchers and a real `events-svc
serve` SIGKILLed mid-dispatch still queue exactly one message per trigger; nothing is
dispatched unless EVENT_TRIGGER_DISPATCH says so; the mapping routes check scope, template
and purpose.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import icalendar
import pytest
import vobject

from events_svc.app import create_app
from events_svc.documents import build_calendar
from events_svc.ports import MailErrorKind, MailRefused, OutgoingMessage, Ports
from events_svc.settings import Settings, SettingsError
from events_svc.verbs.dispatch import message, run_dispatch_pass
from events_svc.verbs.mail import PassOptions
from tests.probes.helpers import (
    API,
    BASE,
    Api,
    add_slot,
    free_port,
    make_event,
    ports,
    run_all,
    run_once_cli,
    seed,
    start_serve,
    template,
    until_listening,
    until_true,
    wait_ready,
)

NEW_BEGIN = datetime(2027, 6, 1, 8, 0, tzinfo=UTC)
NEW_END = datetime(2027, 6, 2, 16, 0, tzinfo=UTC)
RESCHEDULE = {
    "date_begin": NEW_BEGIN.isoformat(),
    "date_end": NEW_END.isoformat(),
    "location": "Hall B",
}
PURPOSES = ["event_rescheduled", "event_cancelled", "event_reminder", "event_follow_up"]


def options(batch: int = 50, cap: int = 1000) -> PassOptions:
    return PassOptions(batch=batch, cap=cap, default_sender="events@example.org")


async def dispatch(api: Api, now: datetime | None = None, p: Ports | None = None, **kw: Any) -> Any:
    """One dispatcher pass at `now` (the wall clock unless given) with the standalone ports."""
    at = now or datetime.now(UTC)
    return await run_dispatch_pass(api.pool, p or ports(api.pool), options(**kw), at)


async def attendee(admin: httpx.AsyncClient, event_id: str, n: int, **extra: Any) -> str:
    body = {"event_id": event_id, "name": f"Guest {n}", "email": f"guest{n}@example.org"}
    r = await admin.post("/admin/registrations", json={**body, **extra})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def operate(admin: httpx.AsyncClient, event_id: str, kind: str, params: dict) -> dict:
    """Preview, start (If-Match: the previewed revision) and resume the operation until it
    has written its triggers; the completed operation."""
    r = await admin.post(
        f"/admin/events/{event_id}/operations", json={"kind": kind, "params": params}
    )
    assert r.status_code == 201, r.text
    op = r.json()
    r = await admin.post(
        f"/admin/operations/{op['id']}/start", headers={"If-Match": str(op["revision"])}
    )
    assert r.status_code == 202, r.text
    view = r.json()
    for _ in range(50):
        if view["state"] == "completed":
            return dict(view)
        r = await admin.post(f"/admin/operations/{op['id']}/resume")
        assert r.status_code == 200, r.text
        view = r.json()
    raise AssertionError(view)


async def triggers(admin: httpx.AsyncClient, event_id: str) -> list[dict]:
    r = await admin.get("/admin/triggers", params={"event_id": event_id, "limit": 200})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def mapped(admin: httpx.AsyncClient, purpose: str, body: str | None = None) -> str:
    """A mail template set as the purpose's; its id."""
    tpl = await template(admin, body=body or "Hello {{ registration.name }}")
    r = await admin.put(f"/admin/trigger-templates/{purpose}", json={"template_id": tpl})
    assert r.status_code == 200, r.text
    return tpl


async def outbox(admin: httpx.AsyncClient, event_id: str) -> list[dict]:
    r = await admin.get("/admin/outbox", params={"event_id": event_id, "pii": "full"})
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def receipts(api: Api) -> dict[str, tuple[str, str | None, int]]:
    """trigger id -> (state, error_kind, attempts) of every receipt."""
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT trigger_id, state::text, error_kind, attempts"
            " FROM event.trigger_dispatch_receipts"
        )
    return {str(r["trigger_id"]): (r["state"], r["error_kind"], r["attempts"]) for r in rows}


def calendars(message: dict) -> tuple[Any, Any]:
    """The message's one calendar attachment, read by icalendar and by vobject."""
    (attachment,) = message["attachments"]
    assert attachment["filename"] == "invite.ics"
    text = attachment["content"]
    return icalendar.Calendar.from_ical(text), vobject.readOne(text)


# --- the calendar a message carries -------------------------------------------------------


async def test_a_reschedule_mails_a_request_calendar_two_parsers_read(api: Api, admin):
    ev = await make_event(admin, date_tz="Europe/Lisbon", event_url="https://example.org/e")
    reg = await attendee(admin, ev["id"], 1)
    await mapped(admin, "event_rescheduled", "{{ registration.name }}: {{ event.date_begin }}")
    op = await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    (trigger,) = await triggers(admin, ev["id"])
    assert (trigger["purpose"], trigger["ics_method"]) == ("event_rescheduled", "REQUEST")
    summary = await dispatch(api)
    assert (summary.taken, summary.sent, summary.parked, summary.skipped) == (1, 1, 0, 0)
    (message,) = await outbox(admin, ev["id"])
    assert (message["trigger_id"], message["registration_id"]) == (trigger["id"], reg)
    assert message["scheduler_id"] is None and message["recipient"] == "guest1@example.org"
    assert message["attachments"][0]["content_type"] == "text/calendar; method=REQUEST"
    # the body renders the trigger's context: the new start, in the event's zone
    assert message["body"] == "Guest 1: 2027-06-01 09:00:00+01:00"
    cal, other = calendars(message)
    assert str(cal["METHOD"]) == "REQUEST" and other.method.value == "REQUEST"
    vevent = cal.walk("VEVENT")[0]
    assert str(vevent["UID"]) == other.vevent.uid.value == f"{ev['id']}@events-svc"
    assert int(vevent["SEQUENCE"]) == int(other.vevent.sequence.value) == trigger["ics_sequence"]
    assert trigger["ics_sequence"] == ev["ics_sequence"] + 1 and op["triggers_created"] == 1
    assert vevent["DTSTART"].dt == NEW_BEGIN and vevent["DTEND"].dt == NEW_END
    assert vevent["DTSTART"].params["TZID"] == "Europe/Lisbon"
    assert other.vevent.dtstart.value.astimezone(UTC) == NEW_BEGIN
    assert other.vevent.dtend.value.astimezone(UTC) == NEW_END
    assert str(vevent["STATUS"]) == "CONFIRMED" and str(vevent["LOCATION"]) == "Hall B"
    assert str(vevent["ORGANIZER"]) == "mailto:events@example.org"
    assert other.vevent.attendee.value == "mailto:guest1@example.org"
    assert (await receipts(api))[trigger["id"]] == ("sent", None, 0)
    # the pass is done: a second one finds nothing, the message stays one
    again = await dispatch(api)
    assert (again.taken, again.sent) == (0, 0) and len(await outbox(admin, ev["id"])) == 1


async def test_a_cancellation_mails_a_cancel_calendar_of_the_same_uid(api: Api, admin):
    ev = await make_event(admin)
    await attendee(admin, ev["id"], 1)
    await mapped(admin, "event_cancelled", "Cancelled: {{ event.name }}")
    await operate(admin, ev["id"], "cancellation", {"reason": "the venue closed"})
    (trigger,) = await triggers(admin, ev["id"])
    assert (trigger["purpose"], trigger["ics_method"]) == ("event_cancelled", "CANCEL")
    assert (await dispatch(api)).sent == 1
    (message,) = await outbox(admin, ev["id"])
    assert message["attachments"][0]["content_type"] == "text/calendar; method=CANCEL"
    assert message["body"] == "Cancelled: PyCon Lisbon"
    cal, other = calendars(message)
    assert str(cal["METHOD"]) == "CANCEL" and other.method.value == "CANCEL"
    vevent = cal.walk("VEVENT")[0]
    assert str(vevent["UID"]) == other.vevent.uid.value == f"{ev['id']}@events-svc"
    assert int(vevent["SEQUENCE"]) == int(other.vevent.sequence.value) == trigger["ics_sequence"]
    assert str(vevent["STATUS"]) == other.vevent.status.value == "CANCELLED"
    assert vevent["DTSTART"].dt == datetime.fromisoformat(trigger["context"]["date_begin"])


async def test_a_slot_attendee_gets_the_slot_calendar_and_a_reminder_none(api: Api, admin):
    ev = await make_event(admin, is_multi_slots=True)
    slot = await add_slot(admin, ev["id"], 14)
    await attendee(admin, ev["id"], 1, event_slot_id=slot["id"])
    await mapped(admin, "event_rescheduled")
    await mapped(admin, "event_reminder", "See you, {{ registration.name }}")
    longer = {"date_begin": "2027-05-10T08:00:00Z", "date_end": "2027-05-13T18:00:00Z"}
    await operate(admin, ev["id"], "reschedule", longer)  # the slot stays inside
    cutoff = datetime.now(UTC).isoformat()
    await operate(admin, ev["id"], "reminder", {"audience_cutoff": cutoff})
    # the slot moves after the triggers were written: the calendar is the trigger's fact
    moved = {"date_begin": "2027-05-11T09:00:00Z", "date_end": "2027-05-11T10:00:00Z"}
    assert (await admin.patch(f"/admin/slots/{slot['id']}", json=moved)).status_code == 200
    assert (await dispatch(api)).sent == 2
    by_trigger = {m["trigger_id"]: m for m in await outbox(admin, ev["id"])}
    calendar_trigger, reminder = await triggers(admin, ev["id"])  # in feed order
    assert (calendar_trigger["purpose"], reminder["purpose"]) == (
        "event_rescheduled",
        "event_reminder",
    )
    cal, other = calendars(by_trigger[calendar_trigger["id"]])
    uid = f"{slot['id']}.{ev['id']}@events-svc"
    assert str(cal.walk("VEVENT")[0]["UID"]) == other.vevent.uid.value == uid
    assert other.vevent.dtstart.value.astimezone(UTC) == datetime.fromisoformat(slot["date_begin"])
    assert by_trigger[reminder["id"]]["attachments"] == []
    assert by_trigger[reminder["id"]]["body"] == "See you, Guest 1"


async def test_the_outbox_withholds_the_calendar_without_pii(api: Api, admin):
    ev = await make_event(admin)
    await attendee(admin, ev["id"], 1)
    await mapped(admin, "event_rescheduled")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    await dispatch(api)
    reader = await api.token("registration:read")
    r = await admin.get("/admin/outbox", params={"event_id": ev["id"]}, headers=reader)
    (message,) = r.json()["items"]
    assert message["attachments"] == [
        {
            "filename": "invite.ics",
            "content_type": "text/calendar; method=REQUEST",
            "content": None,
        }
    ]
    assert message["recipient"] != "guest1@example.org" and message["body"] is None


# --- what is skipped, what parks ----------------------------------------------------------


async def test_gone_unaddressed_and_replaced_attendees_are_skipped(api: Api, admin):
    ev = await make_event(admin)
    gone = await attendee(admin, ev["id"], 1)
    unaddressed = await attendee(admin, ev["id"], 2, email="")
    kept = await attendee(admin, ev["id"], 3)
    await mapped(admin, "event_rescheduled")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    later = {**RESCHEDULE, "date_end": (NEW_END + timedelta(hours=2)).isoformat()}
    await operate(admin, ev["id"], "reschedule", later)
    r = await admin.post(f"/admin/registrations/{gone}/cancel", json={"reason": "asked"})
    assert r.status_code == 200, r.text
    summary = await dispatch(api)
    assert (summary.taken, summary.sent, summary.skipped) == (6, 1, 5)
    states = await receipts(api)
    by = {
        (t["registration_id"], t["ics_sequence"]): states[t["id"]]
        for t in await triggers(admin, ev["id"])
    }
    first, second = sorted({s for _, s in by})
    assert by[(kept, first)] == ("skipped", "superseded", 0)
    assert by[(kept, second)] == ("sent", None, 0)
    assert by[(gone, second)] == ("skipped", "registration_inactive", 0)
    assert by[(unaddressed, second)] == ("skipped", "recipient_invalid", 0)
    (message,) = await outbox(admin, ev["id"])
    cal, _ = calendars(message)
    assert int(cal.walk("VEVENT")[0]["SEQUENCE"]) == second
    assert (await dispatch(api)).sent == 0  # skipped is settled: never claimed again


async def test_a_reminder_of_an_event_cancelled_since_is_skipped(api: Api, admin):
    ev = await make_event(admin)
    await attendee(admin, ev["id"], 1)
    await mapped(admin, "event_reminder")
    await operate(admin, ev["id"], "reminder", {"audience_cutoff": datetime.now(UTC).isoformat()})
    await operate(admin, ev["id"], "cancellation", {"reason": "the venue closed"})
    summary = await dispatch(api)
    assert (summary.sent, summary.skipped, summary.parked) == (0, 1, 1)
    reminder, cancellation = await triggers(admin, ev["id"])
    states = await receipts(api)
    assert states[reminder["id"]] == ("skipped", "event_cancelled", 0)
    assert states[cancellation["id"]] == ("parked", "template_unmapped", 1)


async def test_an_unmapped_purpose_parks_only_its_own_triggers_until_mapped(
    api: Api, admin, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.DEBUG, logger="events_svc.dispatch")
    ev = await make_event(admin)
    for n in range(3):
        await attendee(admin, ev["id"], n)
    await mapped(admin, "event_reminder")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)  # unmapped
    await operate(admin, ev["id"], "reminder", {"audience_cutoff": datetime.now(UTC).isoformat()})
    now = datetime.now(UTC)
    first = await dispatch(api, now)
    assert (first.sent, first.parked, first.failures) == (3, 3, {"template_unmapped": 3})
    sent = {m["trigger_id"] for m in await outbox(admin, ev["id"])}
    rescheduled = {t["id"] for t in await triggers(admin, ev["id"]) if t["ics_method"]}
    assert sent.isdisjoint(rescheduled) and len(sent) == 3
    states = await receipts(api)
    assert {states[t] for t in rescheduled} == {("parked", "template_unmapped", 1)}
    # backing off like a mail line: 1 minute, then 2
    assert (await dispatch(api, now + timedelta(seconds=59))).parked == 0
    assert (await dispatch(api, now + timedelta(minutes=1))).parked == 3
    assert {(await receipts(api))[t] for t in rescheduled} == {("parked", "template_unmapped", 2)}
    assert (await dispatch(api, now + timedelta(minutes=2))).parked == 0
    listed = (await admin.get("/admin/trigger-templates")).json()["items"]
    row = next(i for i in listed if i["purpose"] == "event_rescheduled")
    assert (row["template_id"], row["parked"], row["parked_kinds"]) == (
        None,
        3,
        ["template_unmapped"],
    )
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith("dispatch")]
    assert said == [
        ("WARNING", "trigger dispatch parking"),  # once, when it starts
        ("DEBUG", "trigger dispatch parking"),
    ]
    caplog.clear()
    # mapping the purpose releases its triggers at once (their back-off cleared)
    await mapped(admin, "event_rescheduled")
    released = await dispatch(api, datetime.now(UTC))
    assert (released.sent, released.parked) == (3, 0)
    assert {(await receipts(api))[t] for t in rescheduled} == {("sent", None, 0)}
    assert len(await outbox(admin, ev["id"])) == 6
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name.endswith("dispatch")]
    assert said == [("INFO", "trigger dispatch recovered")]


class FailingQueue:
    """A host's mail queue that cannot write: every flush raises (not a typed refusal),
    quoting the recipient, as a careless host's error might."""

    def __init__(self) -> None:
        self.held: list[str] = []

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        self.held.append(message.recipient)

    async def flush(self, conn: Any) -> None:
        raise ConnectionError(f"the queue's store is away (was sending to {self.held})")


class RefusingQueue:
    """A host's mail queue that refuses every message (a typed refusal)."""

    async def enqueue(self, conn: Any, message: OutgoingMessage) -> None:
        raise MailRefused(MailErrorKind.ENQUEUE_REFUSED, "the relay said no")

    async def flush(self, conn: Any) -> None:
        return None


async def test_failing_renders_and_queues_park_backed_off_and_never_send_twice(
    api: Api, admin, caplog: pytest.LogCaptureFixture
):
    ev = await make_event(admin)
    await attendee(admin, ev["id"], 1)
    tpl = await mapped(admin, "event_rescheduled", "{{ registration.name|length // 0 }}")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    (trigger,) = await triggers(admin, ev["id"])
    now = datetime.now(UTC)
    assert (await dispatch(api, now)).failures == {"render_failed": 1}
    assert (await receipts(api))[trigger["id"]] == ("parked", "render_failed", 1)
    r = await admin.patch(f"/admin/templates/{tpl}", json={"body": "Hello"})
    assert r.status_code == 200, r.text
    standalone = ports(api.pool)
    failing = dataclasses.replace(standalone, mail_queue=FailingQueue())
    later = now + timedelta(minutes=1)
    summary = await dispatch(api, later, failing)
    assert (summary.failed_batches, summary.parked) == (1, 1)
    assert (await receipts(api))[trigger["id"]] == ("parked", "batch_failed", 2)
    refusing = dataclasses.replace(standalone, mail_queue=RefusingQueue())
    later += timedelta(minutes=2)
    assert (await dispatch(api, later, refusing)).failures == {"enqueue_refused": 1}
    assert (await receipts(api))[trigger["id"]] == ("parked", "enqueue_refused", 3)
    assert (await dispatch(api, later + timedelta(minutes=3))).parked == 0  # backing off
    assert await outbox(admin, ev["id"]) == []
    assert (await dispatch(api, later + timedelta(minutes=4))).sent == 1
    (message,) = await outbox(admin, ev["id"])
    assert message["body"] == "Hello"
    # what the failures left behind names no attendee: logs, receipts, audit rows
    logged = " ".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)
    async with api.pool.acquire() as conn:
        kept = await conn.fetchval(
            "SELECT string_agg(coalesce(error_kind, '') || coalesce(error_detail, ''), ' ')"
            " FROM event.trigger_dispatch_receipts"
        )
        audited = await conn.fetchval(
            "SELECT string_agg(summary::text, ' ') FROM event.event_audit_log"
        )
    assert "batch failed" in logged  # the failures were logged
    for text in (logged, kept or "", audited or ""):
        assert "guest1@example.org" not in text and "Guest 1" not in text


# --- exactly once -------------------------------------------------------------------------


async def one_message_per_trigger(api: Api, n: int) -> None:
    """n triggers, each with one sent receipt and one outbox row, and no other row."""
    async with api.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM event.triggers) AS triggers,"
            " (SELECT count(*) FROM event.trigger_dispatch_receipts WHERE state = 'sent') AS sent,"
            " (SELECT count(*) FROM event.outbox_messages) AS messages,"
            " (SELECT count(DISTINCT trigger_id) FROM event.outbox_messages) AS distinct_triggers,"
            " (SELECT count(*) FROM event.trigger_dispatch_receipts d WHERE d.state = 'sent'"
            "   AND NOT EXISTS (SELECT 1 FROM event.outbox_messages o"
            "                   WHERE o.trigger_id = d.trigger_id)) AS unsent"
        )
    assert dict(row) == {
        "triggers": n,
        "sent": n,
        "messages": n,
        "distinct_triggers": n,
        "unsent": 0,
    }


async def test_racing_dispatchers_queue_each_trigger_once(api: Api, admin):
    ev = await make_event(admin, seats_max=0, seats_limited=False)
    await seed(api, ev["id"], 300)
    await mapped(admin, "event_rescheduled")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    now = datetime.now(UTC)
    passes = await asyncio.gather(*(dispatch(api, now, batch=7) for _ in range(4)))
    assert sum(p.sent for p in passes) == 300
    assert sum(p.taken for p in passes) == 300  # the feed was read once
    await one_message_per_trigger(api, 300)


async def _count(db_url: str, sql: str) -> int:
    conn = await asyncpg.connect(db_url)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


@pytest.mark.long
async def test_a_sigkill_mid_dispatch_leaves_one_message_per_trigger(api: Api, admin, db_url: str):
    ev = await make_event(admin, seats_max=0, seats_limited=False)
    await seed(api, ev["id"], 2000)
    await mapped(admin, "event_rescheduled")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    sent = "SELECT count(*) FROM event.trigger_dispatch_receipts WHERE state = 'sent'"
    env = {"EVENT_TRIGGER_DISPATCH": "true", "EVENT_MAIL_BATCH": "3", "EVENTS_LOG_LEVEL": "ERROR"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_serve(db_url, port, **env)
    try:
        await asyncio.to_thread(wait_ready, proc, base, 90)
        progress = 0
        for _ in range(6000):
            progress = await _count(db_url, sent)
            if progress > 0:
                break
            await asyncio.sleep(0.005)
        proc.kill()  # SIGKILL: no shutdown, the batch in hand dies with its transaction
        await asyncio.to_thread(proc.wait, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = await _count(db_url, sent)
    assert 0 < progress <= killed_at < 2000, (progress, killed_at)
    # what the killed process left: every sent receipt has its one message, and no more
    messages = await _count(db_url, "SELECT count(*) FROM event.outbox_messages")
    assert messages == killed_at
    proc = start_serve(db_url, port, **env)
    try:
        await asyncio.to_thread(wait_ready, proc, base, 90)
        async with httpx.AsyncClient(base_url=f"{base}{API}") as http:
            assert (await http.get("/readyz")).status_code == 200
        for _ in range(12000):
            if await _count(db_url, sent) == 2000:
                break
            await asyncio.sleep(0.01)
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
    await one_message_per_trigger(api, 2000)


async def test_nothing_is_dispatched_unless_enabled(api: Api, admin, settings: Settings):
    assert Settings().trigger_dispatch is False
    assert Settings.from_env({}).trigger_dispatch is False
    assert Settings.from_env({"EVENT_TRIGGER_DISPATCH": "yes"}).trigger_dispatch is True
    with pytest.raises(SettingsError, match="EVENT_TRIGGER_DISPATCH"):
        Settings.from_env({"EVENT_TRIGGER_DISPATCH": "sometimes"})
    ev = await make_event(admin)
    await attendee(admin, ev["id"], 1)
    await mapped(admin, "event_rescheduled")
    await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    off = await run_all(api.pool, settings)
    assert off["dispatch"] == {
        "name": "dispatch",
        "status": "skipped",
        "counts": {},
        "detail": "disabled",
    }
    assert await outbox(admin, ev["id"]) == [] and await receipts(api) == {}
    on = dataclasses.replace(settings, trigger_dispatch=True)
    ran = await run_all(api.pool, on)
    assert ran["dispatch"]["status"] == "ran" and ran["dispatch"]["counts"]["sent"] == 1
    assert len(await outbox(admin, ev["id"])) == 1


# --- the mapping routes -------------------------------------------------------------------


async def test_the_mapping_routes_check_scope_template_and_purpose(api: Api, admin):
    tpl = await template(admin)
    url = "/admin/trigger-templates/event_cancelled"
    reader = await api.token("event:read")
    r = await admin.put(url, json={"template_id": tpl}, headers=reader)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
    r = await admin.get("/admin/trigger-templates", headers=reader)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
    r = await admin.get("/admin/trigger-templates", headers=await api.token("template:write"))
    assert r.status_code == 200 and r.json()["next_cursor"] is None
    assert [i["purpose"] for i in r.json()["items"]] == PURPOSES
    assert all(i["template_id"] is None and i["parked"] == 0 for i in r.json()["items"])
    r = await admin.put(url, json={"template_id": str(uuid.uuid4())})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_found")
    assert r.json()["error"]["field"] == "template_id"
    sms = await admin.post("/admin/templates", json={"kind": "sms", "name": "S", "body": "Hi"})
    r = await admin.put(url, json={"template_id": sms.json()["id"]})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "channel_kind_mismatch")
    r = await admin.put("/admin/trigger-templates/event_moved", json={"template_id": tpl})
    assert (r.status_code, r.json()["error"]["code"]) == (404, "trigger_purpose_unknown")
    assert r.json()["error"]["purposes"] == PURPOSES
    r = await admin.put(url, json={"template_id": tpl, "subject": "x"})
    assert (r.status_code, r.json()["error"]["code"]) == (422, "unknown_field")
    company = await api.token("template:write", company=uuid.uuid4())
    r = await admin.put(url, json={"template_id": tpl}, headers=company)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
    r = await admin.get("/admin/trigger-templates", headers=company)  # counts span companies
    assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
    writer = await api.token("template:write")
    r = await admin.put(url, json={"template_id": tpl}, headers=writer)
    assert r.status_code == 200, r.text
    assert (r.json()["purpose"], r.json()["template_id"]) == ("event_cancelled", tpl)
    other = await template(admin)
    assert (await admin.put(url, json={"template_id": other})).status_code == 200
    async with api.pool.acquire() as conn:
        audits = await conn.fetch(
            "SELECT object_id, summary FROM event.event_audit_log"
            " WHERE verb = 'trigger_template_set' ORDER BY id"
        )
    assert [(str(a["object_id"]), a["summary"]["previous"]) for a in audits] == [
        (tpl, None),
        (other, tpl),
    ]
    assert all(a["summary"]["purpose"] == "event_cancelled" for a in audits)


async def test_deleting_a_mapped_template_unmaps_its_purposes(api: Api, admin):
    """A deleted template takes its lines with it, and its purposes' mappings: they are
    unmapped again (the dispatcher parks them until another template is mapped)."""
    tpl = await template(admin)
    for purpose in ("event_rescheduled", "event_cancelled"):
        r = await admin.put(f"/admin/trigger-templates/{purpose}", json={"template_id": tpl})
        assert r.status_code == 200, r.text
    gone = await admin.delete(f"/admin/templates/{tpl}")
    assert gone.status_code == 200, gone.text
    assert gone.json()["trigger_purposes_unmapped"] == ["event_rescheduled", "event_cancelled"]
    listed = (await admin.get("/admin/trigger-templates")).json()["items"]
    assert all(i["template_id"] is None for i in listed)


@pytest.mark.parametrize(
    "recipient",
    ["ada@example.org", "a" * 90 + "@example.org", "Zoë.Ünïcode@exämple.org", "o'neil+x@ex.org"],
)
@pytest.mark.parametrize("method", ["REQUEST", "CANCEL"])
@pytest.mark.parametrize("slotted", [False, True])
def test_a_shared_calendar_with_the_attendees_line_is_the_calendar_built_for_them(
    recipient: str, method: str, slotted: bool
) -> None:
    """The dispatcher builds one calendar per change and writes each attendee's line into
    it: byte for byte the calendar built whole for that attendee (long lines folded the
    same), and both parsers read the attendee back."""
    at = datetime(2027, 9, 1, 12, tzinfo=UTC)
    row = {
        "event_id": uuid.uuid4(),
        "event_name": "PyCon Lisbon " * 8,
        "event_description": "Talks",
        "ctx_date_begin": datetime(2027, 9, 10, 8, tzinfo=UTC),
        "ctx_date_end": datetime(2027, 9, 11, 17, tzinfo=UTC),
        "ctx_date_tz": "Europe/Lisbon",
        "ctx_location": "Porto",
        "event_url": "https://example.org/e",
        "ics_method": method,
        "ics_sequence": 3,
        "created_at": at,
        "event_slot_id": uuid.uuid4() if slotted else None,
        "slot_begin": datetime(2027, 9, 10, 9, tzinfo=UTC) if slotted else None,
        "slot_end": datetime(2027, 9, 10, 10, tzinfo=UTC) if slotted else None,
    }
    event = {
        "id": row["event_id"],
        "name": row["event_name"],
        "description": "Talks",
        "date_begin": row["ctx_date_begin"],
        "date_end": row["ctx_date_end"],
        "date_tz": "Europe/Lisbon",
        "location": "Porto",
        "event_url": row["event_url"],
        "kanban_state": "cancel" if method == "CANCEL" else "normal",
        "updated_at": at,
    }
    slot = None
    if slotted:
        slot = {
            "id": row["event_slot_id"],
            "date_begin": row["slot_begin"],
            "date_end": row["slot_end"],
        }
    message.calendar(row, "desk@example.org", "someone.else@example.org")  # the shared one
    shared = message.calendar(row, "desk@example.org", recipient).content
    whole = build_calendar(
        event, slot, method=method, sequence=3, parties=("desk@example.org", recipient)
    )
    assert shared.encode() == whole
    parsed = icalendar.Calendar.from_ical(shared).walk("VEVENT")[0]
    assert str(parsed["ATTENDEE"]) == f"mailto:{recipient}"
    assert vobject.readOne(shared).vevent.attendee.value == f"mailto:{recipient}"


async def test_run_once_runs_the_operations_and_the_dispatcher_when_it_is_on(
    db_url: str, api: Api, admin
):
    """`events-svc scheduler run-once` works a started operation's batches and, with
    EVENT_TRIGGER_DISPATCH on, dispatches the triggers they wrote; off, it dispatches
    nothing."""
    ev = await make_event(admin)
    for n in (1, 2, 3):
        await attendee(admin, ev["id"], n)
    await mapped(admin, "event_rescheduled")
    r = await admin.post(
        f"/admin/events/{ev['id']}/operations", json={"kind": "reschedule", "params": RESCHEDULE}
    )
    op = r.json()
    r = await admin.post(
        f"/admin/operations/{op['id']}/start", headers={"If-Match": str(op["revision"])}
    )
    assert r.status_code == 202, r.text

    def run_once(**env: str) -> dict[str, Any]:
        printed = json.loads(run_once_cli(db_url, **env).stdout)
        return {p["name"]: p for p in printed["passes"]}

    off = run_once()
    assert off["operations"]["counts"]["triggers"] == 3
    assert off["operations"]["counts"]["completed"] == 1
    assert (off["dispatch"]["status"], off["dispatch"]["detail"]) == ("skipped", "disabled")
    assert await outbox(admin, ev["id"]) == []
    on = run_once(EVENT_TRIGGER_DISPATCH="true")
    assert on["dispatch"]["counts"]["sent"] == 3
    assert len(await outbox(admin, ev["id"])) == 3


async def test_any_writer_of_triggers_wakes_the_dispatching_loop(
    settings: Settings, pool: asyncpg.Pool
):
    """The loop sleeps up to EVENT_SCHEDULER_FLOOR_S (20 minutes by default); a transaction
    that writes triggers wakes it when it commits (the NOTIFY of `triggers_wake_dispatch`),
    whoever wrote them (here plain SQL, while the loop sleeps), so their mails follow
    without waiting for the floor."""
    on = dataclasses.replace(
        settings, scheduler_enabled=True, trigger_dispatch=True, scheduler_floor_s=1200
    )
    app = create_app(on)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        admin = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE, headers=await api.token("*")
        )
        ev = await make_event(admin)
        registration = await attendee(admin, ev["id"], 1)
        await mapped(admin, "event_reminder", "See you, {{ registration.name }}")
        lane = app.state.events.loop.lanes["dispatch"]
        await until_true(lambda: lane.runs >= 1)  # its pass ran: it sleeps (floor: 20 min)
        await until_listening(pool)
        async with pool.acquire() as conn, conn.transaction():
            op = await conn.fetchval(
                """INSERT INTO event.event_operations (event_id, kind, state, params, revision,
                       audience_estimate, actor_id, actor_kind, started_by, event_revision,
                       ics_sequence, ctx_date_begin, ctx_date_end, ctx_date_tz, created_at,
                       updated_at, started_at, finished_at)
                   SELECT id, 'reminder', 'completed', '{}', revision, 0, 'probe', 'token',
                       'probe', revision, ics_sequence, date_begin, date_end, date_tz, now(),
                       now(), now(), now()
                   FROM event.events WHERE id = $1 RETURNING id""",
                uuid.UUID(ev["id"]),
            )
            await conn.execute(
                """INSERT INTO event.triggers (operation_id, event_id, registration_id,
                       purpose, event_revision, registration_version, ics_sequence,
                       ctx_date_begin, ctx_date_end, ctx_date_tz, created_at)
                   SELECT $1, e.id, $2, 'event_reminder', e.revision, 1, e.ics_sequence,
                       e.date_begin, e.date_end, e.date_tz, now()
                   FROM event.events e WHERE e.id = $3""",
                op,
                uuid.UUID(registration),
                uuid.UUID(ev["id"]),
            )
        for _ in range(300):  # 30 s at most, far below the 20-minute floor
            if await outbox(admin, ev["id"]):
                break
            await asyncio.sleep(0.1)
        assert [m["body"] for m in await outbox(admin, ev["id"])] == ["See you, Guest 1"]
        await admin.aclose()
        await api.client.aclose()


async def test_a_directory_that_never_answers_parks_the_batch_within_its_budget(
    api: Api, admin, monkeypatch: pytest.MonkeyPatch
):
    """Each question to the partner directory has its own bound, and a batch's questions
    one budget: the parties not asked in time go back to the queue untouched and are
    asked in the next batch, each party once; the ones that did not answer park, backed
    off, and the pass ends instead of waiting on the directory."""
    from events_svc.verbs import partners
    from events_svc.verbs.dispatch import mailing

    monkeypatch.setattr(partners, "DIRECTORY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(mailing, "SENDERS_BUDGET_S", 0.3)

    class Hanging:
        def __init__(self) -> None:
            self.asked: list[uuid.UUID] = []

        async def contact(self, partner_id: uuid.UUID) -> Any:
            self.asked.append(partner_id)
            await asyncio.Event().wait()  # never answers

    await mapped(admin, "event_rescheduled")
    for n in range(3):  # three organizers: more questions than one batch's budget holds
        ev = await make_event(admin, organizer_id=str(uuid.uuid4()))
        await attendee(admin, ev["id"], n)
        await operate(admin, ev["id"], "reschedule", RESCHEDULE)
    directory = Hanging()
    hanging = dataclasses.replace(ports(api.pool), partner_directory=directory)
    summary = await asyncio.wait_for(dispatch(api, p=hanging), 10)
    assert (summary.sent, summary.parked) == (0, 3)
    assert summary.batches >= 3  # the feed read, then at most two questions a batch
    assert len(directory.asked) == len(set(directory.asked)) == 3  # each asked once
    assert sorted((await receipts(api)).values()) == [("parked", "batch_failed", 1)] * 3
    async with api.pool.acquire() as conn:
        details = await conn.fetch(
            "SELECT error_detail, next_attempt_at > now() AS later"
            " FROM event.trigger_dispatch_receipts"
        )
    assert {(r["error_detail"], r["later"]) for r in details} == {("TimeoutError", True)}
