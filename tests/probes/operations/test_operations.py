"""Event operations, preview and start: the audience estimate and the revision it was
previewed on, the refusals, the one start transaction (event change, one ics_sequence
bump, mail lines re-timed, the audience snapshot, audit rows) and its rollback, racing
starts, and the PATCH fence (real PostgreSQL through the real HTTP app). The audience
changing around the snapshot is in test_audience.py."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

import asyncpg
import httpx
import pytest

from events_svc.errors.dispatch import TRIGGER_PURPOSES
from events_svc.models.operations import (
    PARAMS_OF_KIND,
    OperationKind,
    OperationState,
    TriggerPurpose,
)
from events_svc.verbs.operations import OperationOptions, run_operation_pass
from events_svc.verbs.operations.preview import PURPOSE
from tests.probes.helpers import (
    BASE,
    MOVED,
    Api,
    add_slot,
    cancel,
    finish,
    insert_registration,
    make_event,
    preview,
    register,
    scheduler,
    start,
    template,
    trigger_rows,
)
from tests.probes.helpers import operation_params as params_of

# event_body's event as created: what a preview or a refused PATCH must leave it
UNTOUCHED = {
    "revision": 1,
    "ics_sequence": 0,
    "date_begin": datetime(2027, 5, 10, 9, tzinfo=UTC),
    "date_end": datetime(2027, 5, 12, 18, tzinfo=UTC),
    "date_tz": "Europe/Lisbon",
    "location": "",
    "kanban_state": "normal",
}

OPERATE_ROUTES = (
    ("POST", "/admin/events/{event}/operations"),
    ("POST", "/admin/operations/{op}/start"),
    ("GET", "/admin/operations/{op}"),
    ("POST", "/admin/operations/{op}/resume"),
    ("POST", "/admin/operations/{op}/cancel"),
    ("GET", "/admin/triggers?event_id={event}"),
)
# the event row as a calendar sees it, and its two counters
EVENT_ROW = """
SELECT revision, ics_sequence, date_begin, date_end, date_tz, location, kanban_state::text
FROM event.events WHERE id = $1
"""
# fails the start right after the event change, inside its transaction, as a lock
# conflict does (55P03: the app answers 503 busy)
FAULT = """
CREATE FUNCTION event.probe_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'probe fault' USING ERRCODE = '55P03'; END $$;
CREATE TRIGGER probe_fault BEFORE INSERT ON event.operation_audience
    FOR EACH ROW EXECUTE FUNCTION event.probe_fault();
"""
UNFAULT = "DROP TRIGGER probe_fault ON event.operation_audience; DROP FUNCTION event.probe_fault()"


async def client(api: Api, *scopes: str, company: uuid.UUID | None = None) -> httpx.AsyncClient:
    headers = await api.token(*scopes, company=company)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )


async def rows(api: Api, statement: str, *args: Any) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return list(await conn.fetch(statement, *args))


async def value(api: Api, statement: str, *args: Any) -> Any:
    async with api.pool.acquire() as conn:
        return await conn.fetchval(statement, *args)


async def event_row(api: Api, event_id: str) -> dict[str, Any]:
    return dict((await rows(api, EVENT_ROW, uuid.UUID(event_id)))[0])


async def verbs_of(api: Api, object_id: str) -> list[str]:
    found = await rows(
        api,
        "SELECT verb FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
        uuid.UUID(object_id),
    )
    return [f["verb"] for f in found]


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


# --- preview ---------------------------------------------------------------------------------


async def test_preview_estimates_active_open_and_done_attendees_on_the_revision_it_saw(
    api: Api, admin
):
    ev = await make_event(admin)
    event_id = uuid.UUID(ev["id"])
    counted = [
        await insert_registration(api.pool, event_id),
        await insert_registration(api.pool, event_id),
        await insert_registration(api.pool, event_id, state="done"),
    ]
    for state, sale in (("draft", None), ("draft", "to_pay"), ("cancel", None)):
        await insert_registration(api.pool, event_id, state=state, sale_status=sale)
    archived = await insert_registration(api.pool, event_id)
    assert (await admin.post(f"/admin/registrations/{archived}/archive")).status_code == 200
    r = await admin.post(
        f"/admin/events/{ev['id']}/operations", json={"kind": "reschedule", "params": MOVED}
    )
    assert r.status_code == 201, r.text
    op = r.json()
    assert r.headers["etag"] == '"1"' and op["revision"] == 1
    assert (op["state"], op["audience_estimate"], op["audience"], op["processed"]) == (
        "previewed",
        3,
        0,
        0,
    )
    assert (op["event_revision"], op["ics_sequence"], op["started_at"]) == (None, None, None)
    # a preview changes nothing of the event, snapshots nobody and writes no trigger
    assert await event_row(api, ev["id"]) == UNTOUCHED
    assert await value(api, "SELECT count(*) FROM event.operation_audience") == 0
    assert await trigger_rows(api.pool) == []
    got = await admin.get(f"/admin/operations/{op['id']}")
    assert got.status_code == 200 and got.json() == op and got.headers["etag"] == '"1"'
    assert await verbs_of(api, op["id"]) == ["event_operation_previewed"]
    # a reminder and a follow-up count those created at or before the cutoff
    now = datetime.now(UTC)
    async with api.pool.acquire() as conn:
        await conn.execute(
            "UPDATE event.registrations SET created_at = $2 WHERE id = ANY($1::uuid[])",
            counted[:2],
            now - timedelta(days=3),
        )
    cutoff = (now - timedelta(days=1)).isoformat()
    for kind in ("reminder", "follow_up"):
        op = await preview(admin, ev["id"], kind, audience_cutoff=cutoff)
        assert (op["kind"], op["audience_estimate"], op["revision"]) == (kind, 2, 1)
        now_op = await preview(admin, ev["id"], kind, audience_cutoff=now.isoformat())
        assert now_op["audience_estimate"] == 3


async def test_preview_refuses_what_the_start_would_refuse(api: Api, admin):
    ev = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    url = f"/admin/events/{ev['id']}/operations"
    future = (datetime.now(UTC) + timedelta(minutes=5)).isoformat()
    cases = [
        ({"kind": "reminder", "params": MOVED}, 422, "unknown_field", "params.date_begin"),
        ({"kind": "cancellation", "params": MOVED}, 422, "unknown_field", "params.date_begin"),
        ({"kind": "reschedule", "params": {"reason": "x"}}, 422, "unknown_field", "params.reason"),
        ({"kind": "reschedule", "params": {**MOVED, "colour": 1}}, 422, "unknown_field", None),
        ({"kind": "reschedule", "params": MOVED, "dry": True}, 422, "unknown_field", "dry"),
        ({"kind": "teleport", "params": MOVED}, 422, "validation_failed", None),
        ({"kind": "reminder", "params": {"audience_cutoff": future}}, 422, None, None),
        ({"kind": "cancellation", "params": {"reason": "  "}}, 422, "validation_failed", None),
        (
            {"kind": "reschedule", "params": {**MOVED, "date_begin": "2027-06-10T09:00:00"}},
            422,
            "validation_failed",
            None,
        ),
        (
            {"kind": "reschedule", "params": {**MOVED, "date_tz": "Mars/Olympus"}},
            422,
            "invalid_timezone",
            None,
        ),
        (
            {
                "kind": "reschedule",
                "params": {"date_begin": MOVED["date_end"], "date_end": MOVED["date_begin"]},
            },
            422,
            "date_order",
            "date_end",
        ),
        (
            {
                "kind": "reschedule",
                "params": {
                    "date_begin": "2027-05-10T09:00:00+00:00",
                    "date_end": "2027-05-12T18:00:00Z",
                    "date_tz": "Europe/Lisbon",
                },
            },
            422,
            "operation_changes_nothing",
            None,
        ),
    ]
    for body, status, code, field in cases:
        r = await admin.post(url, json=body)
        assert r.status_code == status, (body, r.text)
        err = r.json()["error"]
        assert err["code"] == (code or "audience_cutoff_in_future"), (body, err)
        if field is not None:
            assert err["field"] == field, (body, err)
    # a slot outside the new range refuses the reschedule as it refuses a PATCH (409)
    multi = await make_event(admin, is_multi_slots=True)
    await add_slot(admin, multi["id"])
    r = await admin.post(
        f"/admin/events/{multi['id']}/operations", json={"kind": "reschedule", "params": MOVED}
    )
    assert error(r) == (409, "slots_outside_event_range")
    assert await value(api, "SELECT count(*) FROM event.event_operations") == 0


async def test_an_instant_out_of_range_in_the_params_is_a_typed_422(api: Api, admin):
    # the years 1900 to 9999 (UTC), as every other instant of the API: never a 500
    ev = await make_event(admin)
    cases = [
        ("reminder", {"audience_cutoff": "0328-08-12T21:57:20Z"}, "params.audience_cutoff"),
        ("follow_up", {"audience_cutoff": "1899-12-31T23:59:59Z"}, "params.audience_cutoff"),
        ("reschedule", {**MOVED, "date_begin": "1800-01-01T00:00:00Z"}, "params.date_begin"),
        ("reschedule", {**MOVED, "date_end": "9999-12-31T23:00:00-05:00"}, "params.date_end"),
    ]
    for kind, params, field in cases:
        body = {"kind": kind, "params": params}
        r = await admin.post(f"/admin/events/{ev['id']}/operations", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
            "date_out_of_range",
            field,
        )


async def test_a_cancelled_or_archived_event_takes_no_operation(api: Api, admin):
    cancelled = await make_event(admin)
    archived = await make_event(admin)
    patch = await admin.patch(f"/admin/events/{cancelled['id']}", json={"kanban_state": "cancel"})
    assert patch.status_code == 200
    assert (await admin.patch(f"/admin/events/{archived['id']}", json={"active": False})).is_success
    for ev, code in ((cancelled, "event_cancelled"), (archived, "event_archived")):
        for kind in ("reschedule", "cancellation", "reminder", "follow_up"):
            body = {"kind": kind, "params": params_of(kind)}
            r = await admin.post(f"/admin/events/{ev['id']}/operations", json=body)
            assert error(r) == (409, code), (kind, r.text)
    # an operation previewed before the event was archived cannot start after it
    ev = await make_event(admin)
    op = await preview(admin, ev["id"], "reminder")
    assert (await admin.patch(f"/admin/events/{ev['id']}", json={"active": False})).is_success
    r = await admin.post(f"/admin/operations/{op['id']}/start", headers={"If-Match": "2"})
    assert error(r) == (412, "stale_revision")  # the archive moved the revision first
    r = await admin.post(f"/admin/operations/{op['id']}/start", headers={"If-Match": "1"})
    assert error(r) == (412, "stale_revision")


async def test_another_companys_operations_are_404_and_every_route_needs_event_operate(
    api: Api, admin
):
    theirs, ours = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(theirs))
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    op = await preview(admin, ev["id"])
    outsider = await client(api, "event:operate", "event:read", "event:write", company=ours)
    insider = await client(api, "event:operate", company=theirs)
    no_scope = await client(api, "event:read", "event:write", "registration:write")
    try:
        for method, path in OPERATE_ROUTES:
            url = path.format(event=ev["id"], op=op["id"])
            headers = {"If-Match": '"1"'}
            body = {"kind": "reminder", "params": params_of("reminder")}
            kw: dict[str, Any] = {"headers": headers}
            if path.endswith("/operations"):
                kw["json"] = body
            r = await outsider.request(method, url, **kw)
            assert error(r) == (404, "not_found"), (method, path, r.text)
            r = await no_scope.request(method, url, **kw)
            assert error(r) == (403, "missing_scope"), (method, path, r.text)
            assert r.json()["error"]["scope"] == "event:operate"
        # the company's own actor sees and works its operation
        got = await insider.get(f"/admin/operations/{op['id']}")
        assert got.status_code == 200 and got.json()["id"] == op["id"]
    finally:
        for c in (outsider, insider, no_scope):
            await c.aclose()
    # nothing moved: the outsider's and the scopeless actor's calls were refused first
    again = (await admin.get(f"/admin/operations/{op['id']}")).json()
    assert again["state"] == "previewed"
    assert await value(api, "SELECT count(*) FROM event.event_operations") == 1
    assert (await event_row(api, ev["id"]))["revision"] == 1


# --- start -----------------------------------------------------------------------------------


async def test_start_needs_if_match_and_refuses_a_revision_the_event_moved_from(api: Api, admin):
    ev = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    op = await preview(admin, ev["id"])
    url = f"/admin/operations/{op['id']}/start"
    for headers in ({}, {"If-Match": "*"}):
        assert error(await admin.post(url, headers=headers)) == (428, "precondition_required")
    for stale in ('"2"', '"0"', "abc"):
        r = await admin.post(url, headers={"If-Match": stale})
        assert error(r) == (412, "stale_revision"), stale
    # the event moves after the preview (a PATCH of its name): the preview is stale
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"name": "PyCon Porto"})
    assert r.status_code == 200 and r.json()["revision"] == 2
    r = await admin.post(url, headers={"If-Match": '"1"'})
    assert error(r) == (412, "stale_revision")
    r = await admin.post(url, headers={"If-Match": '"2"'})  # not the previewed revision
    assert error(r) == (412, "stale_revision")
    assert (await admin.get(f"/admin/operations/{op['id']}")).json()["state"] == "previewed"
    row = await event_row(api, ev["id"])
    assert (row["revision"], row["date_begin"]) == (2, datetime(2027, 5, 10, 9, tzinfo=UTC))
    # a new preview on the event as it is starts
    fresh = await preview(admin, ev["id"])
    assert fresh["revision"] == 2
    assert (await start(admin, fresh))["event_revision"] == 3


async def test_a_reschedule_start_moves_the_event_retimes_its_lines_and_snapshots_once(
    api: Api, admin
):
    ev = await make_event(admin)
    tpl = await template(admin)
    line = await scheduler(admin, ev["id"], tpl)
    assert line["scheduled_date"].startswith("2027-05-09T09:00")
    attendees = sorted([await register(admin, ev["id"], n) for n in ("Ada", "Alan", "Grace")])
    gone = await register(admin, ev["id"], "Edsger")
    assert (await cancel(admin, gone)).status_code == 200
    revision = (await admin.get(f"/admin/events/{ev['id']}")).json()["revision"]
    new = {**MOVED, "date_tz": "Europe/Paris", "location": "Porto, Alfândega"}
    op = await preview(admin, ev["id"], "reschedule", **new)
    view = await start(admin, op)
    assert view["state"] == "running" and view["audience"] == 3
    assert (view["event_revision"], view["ics_sequence"]) == (revision + 1, 1)
    assert await event_row(api, ev["id"]) == {
        "revision": revision + 1,
        "ics_sequence": 1,
        "date_begin": datetime(2027, 6, 10, 9, tzinfo=UTC),
        "date_end": datetime(2027, 6, 12, 18, tzinfo=UTC),
        "date_tz": "Europe/Paris",
        "location": "Porto, Alfândega",
        "kanban_state": "normal",
    }
    # the before-event line moved with date_begin, as a PATCH moves it
    moved = (await admin.get(f"/admin/mails/{line['id']}")).json()
    assert moved["scheduled_date"].startswith("2027-06-09T09:00")
    snapshot = await rows(
        api,
        "SELECT registration_id, registration_version, event_revision, ics_sequence, outcome"
        " FROM event.operation_audience WHERE operation_id = $1 ORDER BY registration_id",
        uuid.UUID(op["id"]),
    )
    assert [(str(s["registration_id"]), *list(s)[1:]) for s in snapshot] == [
        (a, 1, revision + 1, 1, None) for a in attendees
    ]
    assert await trigger_rows(api.pool) == []  # the batches write them, not the start
    done = await finish(admin, op)
    assert (done["processed"], done["triggers_created"], done["skipped_inactive"]) == (3, 3, 0)
    made = await trigger_rows(api.pool)
    assert sorted(str(t["registration_id"]) for t in made) == attendees
    assert {
        (t["purpose"], t["ics_method"], t["ics_sequence"], t["event_revision"], t["ctx_date_tz"])
        for t in made
    } == {("event_rescheduled", "REQUEST", 1, revision + 1, "Europe/Paris")}
    assert {t["ctx_location"] for t in made} == {"Porto, Alfândega"}
    row = await event_row(api, ev["id"])
    assert (row["revision"], row["ics_sequence"]) == (revision + 1, 1)  # the batches left it
    # the audit trail: the preview, the one event write (naming the operation), the start
    # and the completion
    assert await verbs_of(api, op["id"]) == [
        "event_operation_previewed",
        "event_operation_started",
        "event_operation_completed",
    ]
    updates = await rows(
        api,
        "SELECT summary FROM event.event_audit_log WHERE verb = 'event_updated'"
        " AND object_id = $1 ORDER BY id",
        uuid.UUID(ev["id"]),
    )
    assert [u["summary"] for u in updates] == [
        {
            "fields": ["date_begin", "date_end", "date_tz", "location"],
            "revision": revision + 1,
            "operation_id": op["id"],
        }
    ]
    started = await rows(
        api,
        "SELECT summary FROM event.event_audit_log WHERE verb = 'event_operation_started'",
    )
    assert started[0]["summary"] == {
        "kind": "reschedule",
        "from": "previewed",
        "to": "running",
        "audience": 3,
        "event_revision": revision + 1,
        "ics_sequence": 1,
    }


async def test_a_cancellation_cancels_the_event_and_a_reminder_leaves_it_as_it_is(api: Api, admin):
    ev = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    reminder = await start(admin, await preview(admin, ev["id"], "reminder"))
    assert (reminder["event_revision"], reminder["ics_sequence"]) == (1, 0)
    assert (await event_row(api, ev["id"]))["revision"] == 1
    await finish(admin, reminder)
    op = await preview(admin, ev["id"], "cancellation", reason="  the venue closed ")
    assert op["params"] == {"reason": "the venue closed"}
    view = await start(admin, op)
    assert (view["event_revision"], view["ics_sequence"]) == (2, 1)
    row = await event_row(api, ev["id"])
    assert (row["kanban_state"], row["revision"], row["ics_sequence"]) == ("cancel", 2, 1)
    await finish(admin, view)
    made = await trigger_rows(api.pool)
    assert [(t["purpose"], t["ics_method"], t["ics_sequence"]) for t in made] == [
        ("event_reminder", None, 0),
        ("event_cancelled", "CANCEL", 1),
    ]


@pytest.mark.parametrize("kind", ["reschedule", "cancellation"])
async def test_a_failure_after_the_event_change_leaves_nothing_of_the_start(
    api: Api, admin, kind: str
):
    ev = await make_event(admin)
    line = await scheduler(admin, ev["id"], await template(admin))
    for name in ("Ada", "Alan"):
        await register(admin, ev["id"], name)
    before = await event_row(api, ev["id"])
    op = await preview(admin, ev["id"], kind)
    async with api.pool.acquire() as conn:
        await conn.execute(FAULT)
    r = await admin.post(f"/admin/operations/{op['id']}/start", headers={"If-Match": '"1"'})
    assert error(r) == (503, "busy") and "retry-after" in r.headers
    # the event change ran before the fault, in the same transaction: none of it stays
    assert await event_row(api, ev["id"]) == before
    mail = (await admin.get(f"/admin/mails/{line['id']}")).json()
    assert mail["scheduled_date"].startswith("2027-05-09T09:00")
    assert (await admin.get(f"/admin/operations/{op['id']}")).json()["state"] == "previewed"
    assert await value(api, "SELECT count(*) FROM event.operation_audience") == 0
    assert await trigger_rows(api.pool) == []
    audited = await value(
        api,
        "SELECT count(*) FROM event.event_audit_log"
        " WHERE verb IN ('event_updated', 'event_operation_started')",
    )
    assert audited == 0
    # without the fault the same start goes through, once
    async with api.pool.acquire() as conn:
        await conn.execute(UNFAULT)
    view = await start(admin, op)
    assert (view["state"], view["audience"], view["ics_sequence"]) == ("running", 2, 1)
    await finish(admin, view)
    assert len(await trigger_rows(api.pool)) == 2


# --- racing starts -------------------------------------------------------------------------


async def test_racing_starts_of_one_operation_start_it_once(api: Api, admin):
    ev = await make_event(admin)
    for name in ("Ada", "Alan", "Grace", "Edsger", "Barbara"):
        await register(admin, ev["id"], name)
    op = await preview(admin, ev["id"])
    clients = [await client(api, "event:operate") for _ in range(6)]
    try:
        url = f"/admin/operations/{op['id']}/start"
        headers = {"If-Match": str(op["revision"])}
        answers = await asyncio.gather(*(c.post(url, headers=headers) for c in clients))
    finally:
        for c in clients:
            await c.aclose()
    assert sorted(a.status_code for a in answers) == [202] + [409] * 5
    assert {error(a) for a in answers if a.status_code == 409} == {
        (409, "operation_already_started")
    }
    row = await event_row(api, ev["id"])
    assert (row["revision"], row["ics_sequence"]) == (op["revision"] + 1, 1)
    assert await value(api, "SELECT count(*) FROM event.operation_audience") == 5
    # racing resumes and passes write each trigger once
    now = datetime.now(UTC)
    resumes = [admin.post(f"/admin/operations/{op['id']}/resume") for _ in range(3)]
    passes = [run_operation_pass(api.pool, OperationOptions(batch=2), now) for _ in range(2)]
    await asyncio.gather(*resumes, *passes)
    view = (await admin.get(f"/admin/operations/{op['id']}")).json()
    if view["state"] != "completed":  # every racer stood aside for another at the end
        view = await finish(admin, view)
    assert (view["processed"], view["triggers_created"]) == (5, 5)
    made = await trigger_rows(api.pool)
    assert len(made) == len({t["registration_id"] for t in made}) == 5
    assert {t["ics_sequence"] for t in made} == {1}
    updates = await value(
        api, "SELECT count(*) FROM event.event_audit_log WHERE verb = 'event_updated'"
    )
    assert updates == 1


async def test_a_second_operation_of_a_kind_waits_until_the_first_is_finished(api: Api, admin):
    ev = await make_event(admin)
    for name in ("Ada", "Alan"):
        await register(admin, ev["id"], name)
    first = await start(admin, await preview(admin, ev["id"], "reminder"))
    second = await preview(admin, ev["id"], "reminder")
    r = await admin.post(
        f"/admin/operations/{second['id']}/start", headers={"If-Match": str(second["revision"])}
    )
    assert error(r) == (409, "operation_in_progress")
    # another kind is not held up: a follow-up starts beside the running reminder
    follow = await start(admin, await preview(admin, ev["id"], "follow_up"))
    assert follow["state"] == "running"
    # the first finishes: the second starts
    await finish(admin, first)
    assert (await start(admin, second))["state"] == "running"
    # two operations of a kind started at once: one starts, the other is in progress
    await finish(admin, second)
    racers = [await preview(admin, ev["id"], "reminder") for _ in range(2)]
    answers = await asyncio.gather(
        *(
            admin.post(
                f"/admin/operations/{o['id']}/start", headers={"If-Match": str(o["revision"])}
            )
            for o in racers
        )
    )
    assert sorted(a.status_code for a in answers) == [202, 409]
    assert {error(a) for a in answers if a.status_code == 409} == {(409, "operation_in_progress")}
    running = await value(
        api,
        "SELECT count(*) FROM event.event_operations WHERE kind = 'reminder' AND state = 'running'",
    )
    assert running == 1


async def test_a_change_of_the_event_waits_for_every_operation_in_progress_on_it(api: Api, admin):
    """A reschedule or cancellation changes the event: while any operation of the event is
    running, paused or failed, its start is 409 operation_in_progress naming that kind
    (the other's remaining triggers would carry the event as it was). A reminder may
    start beside a running reschedule: its snapshot already sees the new dates."""
    ev = await make_event(admin)
    for name in ("Ada", "Alan"):
        await register(admin, ev["id"], name)
    reminder = await start(admin, await preview(admin, ev["id"], "reminder"))
    for kind in ("reschedule", "cancellation"):
        waiting = await preview(admin, ev["id"], kind)
        r = await admin.post(
            f"/admin/operations/{waiting['id']}/start",
            headers={"If-Match": str(waiting["revision"])},
        )
        assert error(r) == (409, "operation_in_progress")
        assert r.json()["error"]["kind"] == "reminder"
    await finish(admin, reminder)
    moving = await start(admin, await preview(admin, ev["id"], "reschedule"))
    assert moving["state"] == "running"
    beside = await start(admin, await preview(admin, ev["id"], "follow_up"))
    assert beside["state"] == "running"
    await finish(admin, moving)
    await finish(admin, beside)
    rows = await trigger_rows(api.pool)
    follow_ups = [t for t in rows if t["purpose"] == "event_follow_up"]
    assert len(follow_ups) == 2
    assert all(t["ctx_date_begin"].isoformat().startswith("2027-06-10") for t in follow_ups)


async def test_an_if_match_of_non_ascii_digits_is_a_stale_revision_not_a_500(admin):
    ev = await make_event(admin)
    op = await preview(admin, ev["id"], "reminder")
    # the bytes of superscript one, two and three: digits to str.isdigit, not to int()
    for value in (b"\xb9", b"\xb2", b'"\xb3"'):
        r = await admin.post(f"/admin/operations/{op['id']}/start", headers={"If-Match": value})
        assert error(r) == (412, "stale_revision"), value


# --- the PATCH fence -------------------------------------------------------------------------

FENCED = [
    {"date_begin": "2027-05-09T09:00:00Z"},
    {"date_end": "2027-05-13T18:00:00Z"},
    {"date_tz": "Europe/Paris"},
    {"location": "Porto"},
    {"kanban_state": "cancel"},
    {"date_begin": "2027-05-09T09:00:00Z", "name": "Renamed"},
]


@pytest.mark.parametrize(
    ("state", "sale_status"), [("open", None), ("done", None), ("draft", "to_pay")]
)
async def test_a_plain_patch_of_calendar_fields_is_fenced_once_a_seat_is_held(
    api: Api, admin, state: str, sale_status: str | None
):
    ev = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]), state=state, sale_status=sale_status)
    url = f"/admin/events/{ev['id']}"
    for body in FENCED:
        r = await admin.patch(url, json=body)
        assert error(r) == (409, "use_event_operation"), (body, r.text)
        assert r.json()["error"]["fields"] == [k for k in sorted(body) if k != "name"]
    assert await event_row(api, ev["id"]) == UNTOUCHED
    # the same values as the event has change nothing: not fenced
    same = {"date_begin": "2027-05-10T09:00:00Z", "location": ""}
    assert (await admin.patch(url, json=same)).status_code == 200
    # other fields still patch
    r = await admin.patch(url, json={"name": "Renamed", "description": "More", "seats_max": 90})
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["seats_max"], r.json()["revision"]) == ("Renamed", 90, 2)
    r = await admin.patch(url, json={"kanban_state": "blocked"})
    assert r.status_code == 200 and r.json()["kanban_state"] == "blocked"


async def test_an_event_without_seat_holders_keeps_the_plain_patch(api: Api, admin):
    ev = await make_event(admin)
    event_id = uuid.UUID(ev["id"])
    url = f"/admin/events/{ev['id']}"
    # a cancelled one, an archived one and a plain draft (it holds no seat)
    await insert_registration(api.pool, event_id, state="cancel")
    await insert_registration(api.pool, event_id, state="draft")
    archived = await insert_registration(api.pool, event_id)
    assert (await admin.post(f"/admin/registrations/{archived}/archive")).status_code == 200
    expected = {"ics_sequence": 0}
    for body in FENCED[:-2]:
        r = await admin.patch(url, json=body)
        assert r.status_code == 200, (body, r.text)
        expected["ics_sequence"] += 1
        assert r.json()["ics_sequence"] == expected["ics_sequence"]
    assert (await admin.patch(url, json={"kanban_state": "cancel"})).json()["kanban_state"] == (
        "cancel"
    )
    # an event with no registration at all
    bare = await make_event(admin)
    r = await admin.patch(f"/admin/events/{bare['id']}", json=FENCED[0] | FENCED[3])
    assert r.status_code == 200 and r.json()["location"] == "Porto"
    # a registration that comes back (unarchived) holds a seat again: fenced again
    other = await make_event(admin)
    held = await insert_registration(api.pool, uuid.UUID(other["id"]))
    assert (await admin.post(f"/admin/registrations/{held}/archive")).status_code == 200
    r = await admin.patch(f"/admin/events/{other['id']}", json={"location": "Braga"})
    assert r.status_code == 200
    assert (await admin.post(f"/admin/registrations/{held}/unarchive")).status_code == 200
    r = await admin.patch(f"/admin/events/{other['id']}", json={"location": "Faro"})
    assert error(r) == (409, "use_event_operation")


async def test_an_event_without_registrations_is_deleted_with_its_operations(
    api: Api, admin: httpx.AsyncClient
) -> None:
    """An event is deleted only without registrations (so without triggers): its previewed
    and completed operations go with it, and the delete answers 204, not a 500."""
    event = await make_event(admin)
    await preview(admin, event["id"])
    await start(admin, await preview(admin, event["id"], "reminder"))  # empty: completed
    r = await admin.delete(f"/admin/events/{event['id']}")
    assert r.status_code == 204, r.text
    async with api.pool.acquire() as conn:
        left = await conn.fetchval(
            "SELECT count(*) FROM event.event_operations WHERE event_id = $1",
            uuid.UUID(event["id"]),
        )
    assert left == 0


async def test_the_kinds_states_and_purposes_are_the_databases(api: Api):
    """The Python lists of operation kinds, states and trigger purposes are the database
    types' values, in order (a probe, since a Literal cannot be read from the schema)."""

    async def labels(name: str) -> tuple[str, ...]:
        async with api.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid"
                " JOIN pg_namespace n ON n.oid = t.typnamespace"
                " WHERE n.nspname = 'event' AND t.typname = $1 ORDER BY e.enumsortorder",
                name,
            )
        return tuple(r[0] for r in rows)

    kinds = await labels("operation_kind")
    assert kinds == get_args(OperationKind) == tuple(PARAMS_OF_KIND) == tuple(PURPOSE)
    assert await labels("operation_state") == get_args(OperationState)
    purposes = await labels("trigger_purpose")
    assert purposes == get_args(TriggerPurpose) == TRIGGER_PURPOSES == tuple(PURPOSE.values())
