"""Webhook facts, as the verbs write them (the scheduler is off: the facts stay in
`event.webhook_facts` to be read back): each event type by the one verb that makes its
change, with ids, states and times in `data` and the attendee's name, email and phone
only in `pii`; nothing when no active endpoint of the company, event and type listens;
nothing for a change that rolls back; one fact per registration of a combined batch."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.actors import SYSTEM
from events_svc.db import transaction
from events_svc.models import AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.events import sweep_done_events
from events_svc.verbs.registrations import (
    Registered,
    RegisterRequest,
    register_batch_in,
    register_in,
)
from events_svc.verbs.webhooks import attempts
from tests.probes.helpers import (
    Api,
    add_ticket,
    cancel,
    company_client,
    correct,
    finish,
    make_event,
    preview,
    start,
)
from tests.probes.waitlist.kit import (
    fill,
    joined,
    link,
    listed_event,
    offer_pass,
    waitlist_settings,
)
from tests.probes.webhooks.kit import PII

REGISTRATION_TYPES = (
    "registration.created",
    "registration.updated",
    "registration.state_changed",
    "registration.checked_in",
)
EVENT_TYPES = ("event.published", "event.updated", "event.cancelled", "event.operation.completed")
PERSON = {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+44 20 7946 0958"}


@pytest.fixture
def settings(db_url: str) -> Settings:
    # the waiting list's (public intake, capability links); the scheduler is off
    return waitlist_settings(db_url)


async def hook(
    pool: asyncpg.Pool,
    *types: str,
    company: uuid.UUID | None = None,
    event_id: str | None = None,
    active: bool = True,
    include_pii: bool = True,
) -> None:
    """An endpoint row, written directly: the facts need only its company, event, types,
    whether it is active and whether it takes the PII (by default it does, so a fact
    keeps its PII for the probes to read)."""
    await pool.execute(
        "INSERT INTO event.webhook_endpoints (company_id, url, event_types, event_id,"
        " include_pii, active, secret, created_at, updated_at)"
        " VALUES ($1, 'https://hooks.example.org/in', $2, $3, $5, $4, 'whsec_probe',"
        " now(), now())",
        company,
        list(types),
        uuid.UUID(event_id) if event_id else None,
        active,
        include_pii,
    )


async def facts(pool: asyncpg.Pool, *types: str) -> list[dict[str, Any]]:
    """The written facts (of `types` when given), in the order written."""
    rows = await pool.fetch(
        "SELECT company_id, event_id, type, occurred_at, data, pii FROM event.webhook_facts"
        " WHERE cardinality($1::text[]) = 0 OR type = ANY($1::text[]) ORDER BY id",
        list(types),
    )
    return [dict(r) for r in rows]


async def forget(pool: asyncpg.Pool) -> None:
    """Drop the facts read so far (the delivery pass would have taken them)."""
    await pool.execute("DELETE FROM event.webhook_facts")


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def clean(fact: dict[str, Any], *person: str) -> None:
    """No attendee data in `data`: none of its keys, none of the person's values."""
    assert not PII & set(fact["data"]), fact["data"]
    text = json.dumps(fact["data"])
    assert all(value not in text for value in person if value), fact["data"]


async def attendee(admin: httpx.AsyncClient, event_id: str, **body: Any) -> dict[str, Any]:
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **PERSON, **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def act(admin: httpx.AsyncClient, rid: str, action: str) -> dict[str, Any]:
    r = await admin.post(f"/admin/registrations/{rid}/{action}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def request(event_id: str, n: int, now: datetime, tag: str) -> RegisterRequest:
    people = [AttendeeInput(name=f"{tag} {i}", email=f"{tag}{i}@example.org") for i in range(n)]
    return RegisterRequest(SYSTEM, uuid.UUID(event_id), people, now, source="intake")


# --- registrations -------------------------------------------------------------------------


async def test_a_registration_is_created_with_its_ids_and_states_and_its_pii_apart(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, *REGISTRATION_TYPES)
    event = await make_event(admin)
    ticket = await add_ticket(admin, event["id"], name="Standard")
    made = await attendee(admin, event["id"], event_ticket_id=ticket["id"], company_name="ACME")
    (fact,) = await facts(pool)
    assert fact["type"] == "registration.created"
    assert (fact["company_id"], str(fact["event_id"])) == (None, event["id"])
    data = fact["data"]
    assert data["registration_id"] == made["id"] and data["event_id"] == event["id"]
    assert data["event_ticket_id"] == ticket["id"] and data["event_slot_id"] is None
    assert (data["state"], data["active"], data["version"]) == ("open", True, 1)
    assert data["sale_status"] is None and data["origin"] is None
    # the verb's own time: the fact's, the row's creation and its opening alike
    assert fact["occurred_at"] == at(data["created_at"]) == at(data["date_open"])
    clean(fact, *PERSON.values(), "ACME", made["barcode"])
    assert fact["pii"] == {**PERSON, "company_name": "ACME", "barcode": made["barcode"]}


async def test_each_state_write_and_correction_records_what_changed(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    rid = (await attendee(admin, event["id"]))["id"]
    await hook(pool, *REGISTRATION_TYPES)

    async def moved(action: str) -> list[tuple[str, Any]]:
        view = await act(admin, rid, action)
        written = await facts(pool)
        await forget(pool)
        for fact in written:
            assert fact["data"]["registration_id"] == rid and fact["data"]["state"] == view["state"]
            assert fact["occurred_at"] == at(fact["data"]["updated_at"])
            clean(fact, *PERSON.values())
        return [(f["type"], (f["data"].get("from"), f["data"].get("to"))) for f in written]

    assert await moved("set-draft") == [("registration.state_changed", ("open", "draft"))]
    assert await moved("confirm") == [("registration.state_changed", ("draft", "open"))]
    assert await moved("confirm") == []  # re-confirming an open row writes nothing
    assert await moved("set-done") == [
        ("registration.state_changed", ("open", "done")),
        ("registration.checked_in", (None, None)),
    ]
    # archiving changes no state: from and to the same, `active` says which way
    assert await moved("archive") == [("registration.state_changed", ("done", "done"))]
    r = await admin.post(f"/admin/registrations/{rid}/unarchive")
    assert r.status_code == 200, r.text
    (back,) = await facts(pool)
    assert (back["data"]["active"], back["data"]["from"], back["data"]["to"]) == (
        True,
        "done",
        "done",
    )
    await forget(pool)
    # a correction names the fields it changed, never their values
    r = await correct(admin, rid, name="Ada King", email="ada.king@example.org", phone="")
    assert r.status_code == 200, r.text
    (fact,) = await facts(pool)
    assert fact["type"] == "registration.updated"
    assert fact["data"]["changed"] == ["email", "name", "phone"]
    assert fact["data"]["version"] == r.json()["version"]
    clean(fact, "Ada King", "ada.king@example.org")
    assert fact["pii"]["email"] == "ada.king@example.org"
    await forget(pool)
    # one that changes nothing, or is refused, writes nothing
    assert (await correct(admin, rid, name="Ada King")).status_code == 200
    stale = await admin.patch(
        f"/admin/registrations/{rid}", json={"reason": "x", "name": "B"}, headers={"If-Match": "1"}
    )
    assert stale.status_code == 412, stale.text
    assert await facts(pool) == []
    # cancel and reactivate are state changes
    assert (await cancel(admin, rid)).status_code == 200
    r = await admin.post(f"/admin/registrations/{rid}/reactivate", json={"reason": "back"})
    assert r.status_code == 200, r.text
    assert [(f["type"], f["data"]["from"], f["data"]["to"]) for f in await facts(pool)] == [
        ("registration.state_changed", "done", "cancel"),
        ("registration.state_changed", "cancel", "open"),
    ]
    await forget(pool)
    # the desk's check-in
    barcode = (await admin.get(f"/admin/registrations/{rid}")).json()["barcode"]
    r = await admin.post("/admin/desk/scan", json={"event_id": event["id"], "barcode": barcode})
    assert r.json()["outcome"] == "confirmed_registration", r.text
    assert [f["type"] for f in await facts(pool)] == [
        "registration.state_changed",
        "registration.checked_in",
    ]


async def test_nothing_is_written_when_no_endpoint_listens(
    api: Api, admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    client = await company_client(api, mine)
    try:
        event = await make_event(client)
        other = await make_event(client)
        await hook(pool, "registration.created", company=mine, active=False)
        await hook(pool, "registration.state_changed", "event.published", company=mine)
        await hook(pool, "registration.created", company=mine, event_id=other["id"])
        await hook(pool, "registration.created", company=theirs)
        rid = (await attendee(client, event["id"]))["id"]
        await act(client, rid, "set-draft")
        assert await facts(pool, "registration.created") == []
        # the state change has its listener: only it is written
        assert [f["type"] for f in await facts(pool)] == ["registration.state_changed"]
        # the other event's endpoint hears that event only; a platform endpoint hears all
        await attendee(client, other["id"])
        await hook(pool, "registration.created")
        await attendee(client, event["id"])
        written = await facts(pool, "registration.created")
        assert [(f["company_id"], str(f["event_id"])) for f in written] == [
            (mine, other["id"]),
            (mine, event["id"]),
        ]
    finally:
        await client.aclose()


async def test_the_fan_out_gives_a_company_s_fact_to_its_endpoints_and_the_platform_s_only(
    api: Api, pool: asyncpg.Pool
) -> None:
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    client = await company_client(api, mine)
    try:
        event = await make_event(client)
        await hook(pool, "registration.created", company=mine)
        await hook(pool, "registration.created", company=theirs)
        await hook(pool, "registration.created")  # a platform endpoint
        await hook(pool, "registration.created", company=mine, active=False)
        await attendee(client, event["id"])
        assert await attempts.fan_out(pool, datetime.now(UTC), 500) == (1, 2)
        reached = await pool.fetch(
            "SELECT w.company_id FROM event.webhook_messages m"
            " JOIN event.webhook_endpoints w ON w.id = m.endpoint_id"
            " ORDER BY w.company_id NULLS LAST"
        )
        assert [r["company_id"] for r in reached] == [mine, None]
    finally:
        await client.aclose()


async def test_a_refused_or_rolled_back_registration_leaves_no_fact(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, "registration.created")
    event = await make_event(admin, seats_max=1)
    taken = await attendee(admin, event["id"])
    r = await admin.post("/admin/registrations", json={"event_id": event["id"], **PERSON})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    assert [f["data"]["registration_id"] for f in await facts(pool)] == [taken["id"]]
    await forget(pool)
    roomy = await make_event(admin)
    with pytest.raises(RuntimeError):
        async with transaction(pool) as conn:
            now = datetime.now(UTC)
            await register_in(conn, request(roomy["id"], 2, now, "gone"))
            written = await conn.fetchval("SELECT count(*) FROM event.webhook_facts")
            assert written == 2  # in the transaction, with the rows
            raise RuntimeError("the caller fails after the write")
    assert await facts(pool) == []
    assert await pool.fetchval("SELECT count(*) FROM event.registrations") == 1


async def test_a_combined_batch_writes_one_fact_per_registration(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, "registration.created")
    event = await make_event(admin, seats_max=3)
    first = datetime.now(UTC)
    batch = [
        request(event["id"], 2, first, "group"),
        request(event["id"], 1, first + timedelta(milliseconds=3), "single"),
        request(event["id"], 1, first + timedelta(milliseconds=5), "late"),  # no seat left
    ]
    async with transaction(pool) as conn:
        results = await register_batch_in(conn, batch)
    assert [type(r).__name__ for r in results] == ["Registered", "Registered", "SeatsExhausted"]
    ids = [r["id"] for res in results if isinstance(res, Registered) for r in res.registrations]
    written = await facts(pool)
    assert sorted(uuid.UUID(f["data"]["registration_id"]) for f in written) == sorted(ids)
    # written by the batch's INSERT, each at its own request's time (its row's created_at)
    assert sorted(f["occurred_at"] for f in written) == [
        first,
        first,
        first + timedelta(milliseconds=3),
    ]
    for f in written:
        assert f["occurred_at"] == datetime.fromisoformat(f["data"]["created_at"])
    assert {f["data"]["state"] for f in written} == {"open"}


async def test_an_attendance_import_records_its_marks_once_each(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    people = [await attendee(admin, event["id"], name=n, email=f"{n}@example.org") for n in "abc"]
    await act(admin, people[2]["id"], "set-done")  # already marked: no second fact
    await hook(pool, "registration.state_changed", "registration.checked_in")
    codes = [p["barcode"] for p in people]
    r = await admin.post(
        f"/admin/events/{event['id']}/attendance-imports",
        content=("barcode\n" + "\n".join([*codes, codes[0]]) + "\n").encode(),
        headers={"content-type": "text/csv", "idempotency-key": "facts"},
    )
    assert r.status_code == 202, r.text
    r = await admin.post(f"/admin/attendance-imports/{r.json()['id']}/resume")
    assert (r.json()["state"], r.json()["marked"]) == ("completed", 2), r.text
    written = await facts(pool)
    marked = sorted(p["id"] for p in people[:2])
    for kind in ("registration.state_changed", "registration.checked_in"):
        mine = [f for f in written if f["type"] == kind]
        assert sorted(f["data"]["registration_id"] for f in mine) == marked
        assert {f["data"]["state"] for f in mine} == {"done"}
        assert all(f["occurred_at"] == at(f["data"]["date_closed"]) for f in mine)
    assert {(f["data"].get("from"), f["data"].get("to")) for f in written} == {
        ("open", "done"),
        (None, None),
    }


# --- the sale seam -------------------------------------------------------------------------


def order_line(event_id: str, n: int) -> dict[str, Any]:
    people = [{"name": f"Buyer {i}", "email": f"buyer{i}@example.org"} for i in range(n)]
    return {"line_id": str(uuid.uuid4()), "event_id": event_id, "attendees": people}


async def seam(admin: httpx.AsyncClient, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await admin.post(f"/admin/seam/orders/{verb}", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_an_applied_order_fact_is_recorded_once_with_ids_and_states(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, "order.applied", "registration.state_changed")
    event, other = await make_event(admin), await make_event(admin)
    order = {"order_id": str(uuid.uuid4()), "amount_total": "40.00", "currency": "EUR"}
    confirmed = {**order, "lines": [order_line(event["id"], 2)]}
    answer = await seam(admin, "confirmed", confirmed)
    (fact,) = await facts(pool)
    assert (fact["type"], fact["company_id"], str(fact["event_id"])) == (
        "order.applied",
        None,
        event["id"],
    )
    assert fact["data"] == {
        "order_id": order["order_id"],
        "fact": "confirmed",
        "order_state": "sent",
        "registration_ids": answer["registration_ids"],
        "skipped_ids": [],
        "overbooked": False,
        "event_ids": [event["id"]],
    }
    assert fact["pii"] == {}
    await forget(pool)
    # the same delivery again changes nothing and records nothing
    assert (await seam(admin, "confirmed", confirmed))["outcome"] == "already_applied"
    assert await facts(pool) == []
    # paid: the held drafts open (their own state facts), then the order's
    paid = await seam(admin, "paid", {"order_id": order["order_id"]})
    written = await facts(pool)
    assert [f["type"] for f in written] == [
        "registration.state_changed",
        "registration.state_changed",
        "order.applied",
    ]
    assert {(f["data"]["from"], f["data"]["to"]) for f in written[:2]} == {("draft", "open")}
    assert (written[2]["data"]["fact"], written[2]["data"]["order_state"]) == ("paid", "sale")
    assert written[2]["data"]["registration_ids"] == paid["registration_ids"]
    await forget(pool)
    # an order over two events names both, and no one event
    two = {
        "order_id": str(uuid.uuid4()),
        "amount_total": "0",
        "currency": "EUR",
        "lines": [order_line(event["id"], 1), order_line(other["id"], 1)],
    }
    await seam(admin, "confirmed", two)
    (fact,) = await facts(pool, "order.applied")
    assert fact["event_id"] is None
    assert fact["data"]["event_ids"] == sorted([event["id"], other["id"]])
    assert fact["data"]["order_state"] == "sale"
    await forget(pool)
    cancelled = await seam(admin, "cancelled", {"order_id": two["order_id"]})
    fact = (await facts(pool, "order.applied"))[0]
    assert (fact["data"]["fact"], fact["data"]["order_state"]) == ("cancelled", "cancel")
    assert sorted(fact["data"]["registration_ids"]) == sorted(cancelled["registration_ids"])
    for f in await facts(pool):
        clean(f, "Buyer", "buyer")
    await forget(pool)
    # a refused fact rolls back whole: nothing recorded
    refused = {**order, "order_id": str(uuid.uuid4())}
    refused["lines"] = [order_line(str(uuid.uuid4()), 1)]
    assert (await seam(admin, "confirmed", refused))["outcome"] == "not_found"
    assert await facts(pool) == []


# --- events and their operations -------------------------------------------------------------


async def test_publishing_editing_and_cancelling_an_event_are_recorded(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, *EVENT_TYPES)
    event = await make_event(admin)
    eid = event["id"]
    r = await admin.post(f"/admin/events/{eid}/publish", json={})
    assert r.status_code == 200, r.text
    (fact,) = await facts(pool)
    assert (fact["type"], str(fact["event_id"])) == ("event.published", eid)
    data = fact["data"]
    assert (data["event_id"], data["is_published"], data["revision"]) == (eid, True, 2)
    assert data["date_publish"] == r.json()["date_publish"].replace("Z", "+00:00")
    assert fact["occurred_at"] == at(data["updated_at"])
    await forget(pool)
    await admin.post(f"/admin/events/{eid}/publish", json={})  # again: no change, no fact
    assert await facts(pool) == []
    await admin.post(f"/admin/events/{eid}/unpublish")  # the publication pair cleared
    (fact,) = await facts(pool)
    assert fact["type"] == "event.updated"
    assert fact["data"]["changed"] == ["date_publish", "is_published"]
    assert fact["data"]["is_published"] is False
    await admin.post(f"/admin/events/{eid}/unpublish")  # again: nothing more
    assert len(await facts(pool)) == 1
    await forget(pool)
    r = await admin.patch(f"/admin/events/{eid}", json={"name": "PyCon", "location": "Porto"})
    assert r.status_code == 200, r.text
    (fact,) = await facts(pool)
    assert fact["type"] == "event.updated"
    assert fact["data"]["changed"] == ["location", "name"]
    assert (fact["data"]["name"], fact["data"]["location"]) == ("PyCon", "Porto")
    await forget(pool)
    assert (await admin.patch(f"/admin/events/{eid}", json={"name": "PyCon"})).status_code == 200
    assert await facts(pool) == []
    r = await admin.patch(f"/admin/events/{eid}", json={"kanban_state": "cancel"})
    assert r.status_code == 200, r.text
    written = await facts(pool)
    assert [f["type"] for f in written] == ["event.updated", "event.cancelled"]
    assert written[0]["data"]["changed"] == ["kanban_state"]
    assert written[1]["data"]["kanban_state"] == "cancel"
    assert "changed" not in written[1]["data"]


async def test_operations_record_their_event_change_and_their_completion(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    eid = event["id"]
    for name in ("Ann", "Bob"):
        await attendee(admin, eid, name=name, email=f"{name.lower()}@example.org")
    await hook(pool, *EVENT_TYPES)
    moved = await start(admin, await preview(admin, eid, "reschedule"))
    (fact,) = await facts(pool)
    assert fact["type"] == "event.updated"
    assert fact["data"]["changed"] == ["date_begin", "date_end"]
    assert fact["data"]["operation_id"] == moved["id"]
    assert fact["data"]["date_begin"].startswith("2027-06-10T09:00:00")
    await forget(pool)
    done = await finish(admin, moved)
    (fact,) = await facts(pool)
    assert (fact["type"], str(fact["event_id"])) == ("event.operation.completed", eid)
    assert fact["data"] == {
        "operation_id": moved["id"],
        "kind": "reschedule",
        "event_id": eid,
        "state": "completed",
        "finished_at": done["finished_at"].replace("Z", "+00:00"),
        "audience": 2,
        "processed": 2,
        "triggers_created": 2,
        "skipped_inactive": 0,
    }
    await forget(pool)
    # a cancellation: the event's change and its cancellation, naming the operation
    stop = await preview(admin, eid, "cancellation", reason="the venue closed")
    stop = await start(admin, stop)
    written = await facts(pool)
    assert [(f["type"], f["data"]["operation_id"]) for f in written] == [
        ("event.updated", stop["id"]),
        ("event.cancelled", stop["id"]),
    ]
    await forget(pool)
    # an empty audience completes at its start
    empty = await make_event(admin)
    quiet = await start(admin, await preview(admin, empty["id"], "reminder"))
    (fact,) = await facts(pool)
    assert fact["type"] == "event.operation.completed"
    assert (fact["data"]["operation_id"], fact["data"]["audience"]) == (quiet["id"], 0)


# --- the waiting list ------------------------------------------------------------------------


async def test_an_offer_and_its_acceptance_are_recorded_with_the_persons_data_apart(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 2)
    eid = event["id"]
    taken = await fill(public, eid, 2)
    person = {"name": "Wanda Waiter", "phone": "+351 21 000 0000"}
    entry = await joined(public, eid, "wanda@example.org", seats=2, **person)
    second = await joined(public, eid, "walt@example.org", name="Walt")
    await hook(pool, "waitlist.offered", "waitlist.accepted", *REGISTRATION_TYPES)
    for rid in taken:
        assert (await cancel(admin, rid)).status_code == 200
    await forget(pool)
    assert (await offer_pass(admin))["offers_made"] == 1  # two seats: the first entry's
    row = await pool.fetchrow(
        "SELECT * FROM event.waitlist_entry WHERE id = $1", uuid.UUID(entry["waitlist_entry_id"])
    )
    drafts = [str(r) for r in row["registration_ids"]]
    written = await facts(pool)
    assert [f["type"] for f in written] == [
        "registration.created",
        "registration.created",
        "waitlist.offered",
    ]
    assert {(f["data"]["state"], f["data"]["origin"]) for f in written[:2]} == {
        ("draft", "waitlist")
    }
    offered = written[2]
    assert str(offered["event_id"]) == eid
    assert offered["data"] == {
        "waitlist_entry_id": str(row["id"]),
        "event_id": eid,
        "event_ticket_id": None,
        "event_slot_id": None,
        "seats": 2,
        "status": "offered",
        "offered_at": offered["data"]["offered_at"],
        "offer_expires_at": offered["data"]["offer_expires_at"],
        "decided_at": None,
        "registration_ids": drafts,
    }
    assert at(offered["data"]["offer_expires_at"]) == row["offer_expires_at"]
    assert offered["pii"] == {"email": "wanda@example.org", **person}
    for fact in written:
        clean(fact, "Wanda", "wanda@example.org", person["phone"])
    await forget(pool)
    r = await public.post(link(entry["status_url"]) + "/accept")
    assert r.status_code == 200, r.text
    written = await facts(pool)
    assert [f["type"] for f in written] == [
        "registration.state_changed",
        "registration.state_changed",
        "waitlist.accepted",
    ]
    assert {(f["data"]["from"], f["data"]["to"]) for f in written[:2]} == {("draft", "open")}
    accepted = written[2]["data"]
    assert (accepted["status"], accepted["registration_ids"]) == ("accepted", drafts)
    assert accepted["decided_at"] is not None
    await forget(pool)
    # twice: the same answer, nothing new; a decline releases through the one transition
    assert (await public.post(link(entry["status_url"]) + "/accept")).status_code == 200
    assert await facts(pool) == []
    assert second["status"] == "waiting"
    r = await public.post(link(second["status_url"]) + "/decline")
    assert r.status_code == 200, r.text
    assert await facts(pool) == []  # it held no offer: no registration changed


async def test_marking_an_event_done_by_hand_or_by_the_sweep_is_an_update(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await hook(pool, *EVENT_TYPES)
    ended = (
        await admin.post("/admin/stages", json={"name": "Ended", "sequence": 5, "pipe_end": True})
    ).json()
    event = await make_event(admin)
    r = await admin.post(f"/admin/events/{event['id']}/mark-done")
    assert r.status_code == 200, r.text
    (fact,) = await facts(pool)
    assert (fact["type"], str(fact["event_id"])) == ("event.updated", event["id"])
    assert "stage_id" in fact["data"]["changed"] and fact["data"]["stage_id"] == ended["id"]
    await admin.post(f"/admin/events/{event['id']}/mark-done")  # there already: nothing
    assert len(await facts(pool)) == 1
    await forget(pool)
    past = await make_event(admin)
    await pool.execute(
        "UPDATE event.events SET date_begin = now() - interval '3 days',"
        " date_end = now() - interval '2 days' WHERE id = $1",
        uuid.UUID(past["id"]),
    )
    assert await sweep_done_events(pool, datetime.now(UTC)) == 1
    (swept,) = await facts(pool)
    assert (swept["type"], str(swept["event_id"])) == ("event.updated", past["id"])
    assert swept["data"]["stage_id"] == ended["id"]


async def test_a_fact_keeps_pii_only_when_an_endpoint_that_wants_it_takes_pii(
    admin: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await make_event(admin)
    other = await make_event(admin)
    await hook(pool, *REGISTRATION_TYPES, include_pii=False)
    # an endpoint with PII, but of another event: it does not want these facts
    await hook(pool, *REGISTRATION_TYPES, event_id=other["id"])
    made = await attendee(admin, event["id"], company_name="ACME")
    r = await correct(admin, made["id"], name="Ada Byron")
    assert r.status_code == 200, r.text
    written = await facts(pool)
    assert [f["type"] for f in written] == ["registration.created", "registration.updated"]
    for fact in written:  # nobody would receive it: not kept, not even until the fan-out
        assert fact["pii"] == {}
        clean(fact, *PERSON.values(), "Ada Byron", "ACME", made["barcode"])
    await forget(pool)
    # the endpoint opts in: the facts written from then on keep it
    await pool.execute("UPDATE event.webhook_endpoints SET include_pii = true")
    again = await attendee(admin, event["id"], company_name="ACME")
    (fact,) = await facts(pool)
    assert fact["pii"] == {**PERSON, "company_name": "ACME", "barcode": again["barcode"]}


async def test_an_offer_keeps_no_pii_when_no_endpoint_takes_it(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    (taken,) = await fill(public, event["id"], 1)
    person = {"name": "Wanda Waiter", "phone": "+351 21 000 0000"}
    await joined(public, event["id"], "wanda@example.org", **person)
    await hook(pool, "waitlist.offered", *REGISTRATION_TYPES, include_pii=False)
    assert (await cancel(admin, taken)).status_code == 200
    await forget(pool)
    assert (await offer_pass(admin))["offers_made"] == 1
    written = await facts(pool)
    assert [f["type"] for f in written] == ["registration.created", "waitlist.offered"]
    for fact in written:
        assert fact["pii"] == {}
        clean(fact, "Wanda Waiter", "wanda@example.org", person["phone"])
