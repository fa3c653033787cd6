"""The check-in desk: the frozen branch order row by row, the race of two desks, the
audit row of every branch, the throttle (real PostgreSQL through the real HTTP app)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import httpx
import pytest

from events_svc.app import create_app
from events_svc.settings import Settings
from tests.probes.helpers import BASE, Api, add_slot, add_ticket, cancel, make_event

SCAN = "/admin/desk/scan"


async def attendee(admin: httpx.AsyncClient, event_id: str, **body: Any) -> dict[str, Any]:
    person = {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+44 20 7946 0958"}
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **person, **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def scan(admin: httpx.AsyncClient, event_id: str, barcode: str) -> dict[str, Any]:
    r = await admin.post(SCAN, json={"event_id": event_id, "barcode": barcode})
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    return dict(r.json())


async def sql(api: Api, statement: str, *args: Any) -> None:
    async with api.pool.acquire() as conn:
        await conn.execute(statement, *args)


async def audits(api: Api) -> list[dict[str, Any]]:
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT object_id, event_id, summary FROM event.event_audit_log"
            " WHERE verb = 'desk_scan' ORDER BY id"
        )
    return [dict(r) for r in rows]


async def test_the_branch_table_row_by_row_with_its_audit_rows(api: Api, admin):
    ev = await make_event(admin)
    other = await make_event(admin)
    ticket = await add_ticket(admin, ev["id"], name="Early bird")
    guest = await attendee(admin, ev["id"], event_ticket_id=ticket["id"])
    code = guest["barcode"]

    # 7: open -> the one write, done with date_closed
    first = await scan(admin, ev["id"], f"  {code}\n")
    assert first["outcome"] == "confirmed_registration"
    seen = first["registration"]
    assert seen["id"] == guest["id"] and seen["state"] == "done"
    assert seen["name"] == "Ada Lovelace"  # the desk checks identity
    assert seen["ticket"] == {"id": ticket["id"], "name": "Early bird"} and seen["slot"] is None
    assert "email" not in seen and "phone" not in seen
    full = (await admin.get(f"/admin/registrations/{guest['id']}")).json()
    assert full["state"] == "done" and full["date_closed"] is not None
    # 6: done -> already_registered, no write
    again = await scan(admin, ev["id"], code)
    assert again["outcome"] == "already_registered"
    assert (await admin.get(f"/admin/registrations/{guest['id']}")).json()["version"] == 2
    # 5: another event's desk
    assert (await scan(admin, other["id"], code))["outcome"] == "need_manual_confirmation"
    # 1: unknown, a prefix, a near miss, archived
    assert await scan(admin, ev["id"], "12345") == {
        "outcome": "invalid_ticket",
        "registration": None,
    }
    assert (await scan(admin, ev["id"], code[:-1]))["outcome"] == "invalid_ticket"
    near = code[:-1] + str((int(code[-1]) + 1) % 10)
    assert (await scan(admin, ev["id"], near))["outcome"] == "invalid_ticket"
    archived = await attendee(admin, ev["id"])
    await admin.post(f"/admin/registrations/{archived['id']}/archive")
    assert (await scan(admin, ev["id"], archived["barcode"]))["outcome"] == "invalid_ticket"
    # 2 and 3: cancelled, draft
    cancelled = await attendee(admin, ev["id"])
    await cancel(admin, cancelled["id"])
    assert (await scan(admin, ev["id"], cancelled["barcode"]))["outcome"] == (
        "canceled_registration"
    )
    draft = await attendee(admin, ev["id"])
    await admin.post(f"/admin/registrations/{draft['id']}/set-draft")
    scanned = await scan(admin, ev["id"], draft["barcode"])
    assert scanned["outcome"] == "unconfirmed_registration"
    assert scanned["registration"]["state"] == "draft"
    # every scan wrote one audit row, the barcode masked to its last 4 digits
    rows = await audits(api)
    assert [r["summary"]["outcome"] for r in rows] == [
        "confirmed_registration",
        "already_registered",
        "need_manual_confirmation",
        "invalid_ticket",
        "invalid_ticket",
        "invalid_ticket",
        "invalid_ticket",
        "canceled_registration",
        "unconfirmed_registration",
    ]
    masked = rows[0]["summary"]["barcode"]
    assert masked.endswith(code[-4:]) and masked.count("*") == len(code) - 4
    assert all(code not in str(r["summary"]) for r in rows)
    assert rows[3]["object_id"] is None and str(rows[0]["object_id"]) == guest["id"]
    assert str(rows[2]["event_id"]) == other["id"]


async def test_not_ongoing_is_read_on_the_registrations_own_event(api: Api, admin):
    ev = await make_event(admin)
    done = await attendee(admin, ev["id"])
    await scan(admin, ev["id"], done["barcode"])  # checked in
    opened = await attendee(admin, ev["id"])
    eid = uuid.UUID(ev["id"])
    ended = "date_end = now() - interval '1 hour', date_begin = now() - interval '2 days'"
    await sql(api, f"UPDATE event.events SET {ended} WHERE id = $1", eid)
    # a done attendee at a finished event: not_ongoing_event, never already_registered
    assert (await scan(admin, ev["id"], done["barcode"]))["outcome"] == "not_ongoing_event"
    assert (await scan(admin, ev["id"], opened["barcode"]))["outcome"] == "not_ongoing_event"
    other = await make_event(admin)  # the desk's own event is ongoing: the row's event rules
    assert (await scan(admin, other["id"], opened["barcode"]))["outcome"] == "not_ongoing_event"
    state = (await admin.get(f"/admin/registrations/{opened['id']}")).json()["state"]
    assert state == "open"  # no write
    for kanban in ("cancel", "done"):
        live = await make_event(admin)
        guest = await attendee(admin, live["id"])
        await sql(
            api,
            "UPDATE event.events SET kanban_state = $2::event.kanban_state WHERE id = $1",
            uuid.UUID(live["id"]),
            kanban,
        )
        assert (await scan(admin, live["id"], guest["barcode"]))["outcome"] == "not_ongoing_event"
    outcomes = [r["summary"]["outcome"] for r in await audits(api)]
    assert outcomes == ["confirmed_registration"] + ["not_ongoing_event"] * 5


async def test_a_slot_attendee_shows_the_slot(admin):
    ev = await make_event(admin, is_multi_slots=True)
    slot = await add_slot(admin, ev["id"])
    guest = await attendee(admin, ev["id"], event_slot_id=slot["id"])
    seen = (await scan(admin, ev["id"], guest["barcode"]))["registration"]
    assert seen["slot"]["id"] == slot["id"] and seen["ticket"] is None


async def test_two_desks_racing_one_ticket_confirm_it_once(api: Api, admin):
    for _ in range(5):
        ev = await make_event(admin)
        guest = await attendee(admin, ev["id"])
        body = {"event_id": ev["id"], "barcode": guest["barcode"]}
        answers = await asyncio.gather(*(admin.post(SCAN, json=body) for _ in range(2)))
        outcomes = sorted(r.json()["outcome"] for r in answers)
        assert outcomes == ["already_registered", "confirmed_registration"]
    async with api.pool.acquire() as conn:
        writes = await conn.fetchval(
            "SELECT count(*) FROM event.event_audit_log WHERE verb = 'registration_set_done'"
        )
    assert writes == 5


async def test_the_desk_needs_its_scope_and_a_bounded_body(api: Api, admin):
    ev = await make_event(admin)
    reader = await api.token("registration:read", "registration:write")
    body = {"event_id": ev["id"], "barcode": "1"}
    r = await api.client.post(SCAN, json=body, headers=reader)
    assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    desk = await api.token("desk:scan")
    assert (await api.client.post(SCAN, json=body, headers=desk)).status_code == 200
    for broken in ({**body, "barcode": ""}, {**body, "barcode": "9" * 65}, {**body, "x": 1}):
        assert (await admin.post(SCAN, json=broken)).status_code == 422
    other_company = await api.token("desk:scan", company=uuid.uuid4())
    owned = await make_event(admin, company_id=str(uuid.uuid4()))
    guest = await attendee(admin, owned["id"])
    mine = {"event_id": owned["id"], "barcode": guest["barcode"]}
    r = await api.client.post(SCAN, json=mine, headers=other_company)
    assert r.json()["outcome"] == "invalid_ticket"  # another company's ticket is unknown here


@pytest.fixture
def tight(settings: Settings) -> Settings:
    return dataclasses.replace(settings, rate_limit_desk="3/minute")


async def test_scans_are_throttled_per_actor(tight: Settings, pool, api: Api):
    app = create_app(tight)
    async with app.router.lifespan_context(app):
        one, two = await api.token("desk:scan"), await api.token("desk:scan")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            body = {"event_id": str(uuid.uuid4()), "barcode": "1"}
            codes = [
                (await client.post(SCAN, json=body, headers=one)).status_code for _ in range(4)
            ]
            assert codes == [200, 200, 200, 429]
            r = await client.post(SCAN, json=body, headers=one)
            assert r.json()["error"]["code"] == "rate_limited" and int(r.headers["retry-after"]) > 0
            assert (await client.post(SCAN, json=body, headers=two)).status_code == 200
