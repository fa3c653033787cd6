"""The trigger feed: creation order across operations and events, a stored cursor that
neither misses nor re-reads a trigger while operations write more, a cursor that is never
null, the event filter and the company fence, refused cursors, and the shape of a trigger
(ids and a typed context, never a message or an address) (real PostgreSQL through the
real HTTP app)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx

from events_svc.verbs.operations import OperationOptions, run_operation_pass
from events_svc.verbs.operations.batch import run_batch
from tests.probes.helpers import (
    BASE,
    Api,
    add_slot,
    make_event,
    preview,
    seed,
    start,
    trigger_rows,
)

TRIGGER_KEYS = {
    "id",
    "event_slot_id",
    "operation_id",
    "event_id",
    "registration_id",
    "purpose",
    "event_revision",
    "registration_version",
    "ics_sequence",
    "ics_method",
    "context",
    "created_at",
}
NEVER = ("template", "subject", "body", "sender", "email", "phone", "name", "recipient")


async def page(
    client: httpx.AsyncClient, after: str | None = None, limit: int = 50, **params: Any
) -> dict[str, Any]:
    query = {"limit": limit, **params}
    if after is not None:
        query["after"] = after
    r = await client.get("/admin/triggers", params=query)
    assert r.status_code == 200, r.text
    body = dict(r.json())
    assert isinstance(body["next_cursor"], str) and body["next_cursor"]
    return body


async def read_all(
    client: httpx.AsyncClient, after: str | None = None, limit: int = 50, **params: Any
) -> tuple[list[dict[str, Any]], str]:
    """Every trigger after `after`, page by page; (them, the cursor after the last)."""
    items: list[dict[str, Any]] = []
    while True:
        got = await page(client, after, limit, **params)
        if not got["items"]:
            assert after is None or got["next_cursor"] == after
            return items, got["next_cursor"]
        items += got["items"]
        after = got["next_cursor"]


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


async def test_the_feed_is_creation_order_across_operations_and_events(api: Api, admin):
    one, two = await make_event(admin), await make_event(admin)
    await seed(api, one["id"], 4)
    await seed(api, two["id"], 3, base=1000)
    moved = await start(admin, await preview(admin, one["id"]))
    reminded = await start(admin, await preview(admin, two["id"], "reminder"))
    options, now = OperationOptions(batch=2), datetime.now(UTC)
    for op in (moved, reminded, moved, reminded):
        assert await run_batch(api.pool, options, now, uuid.UUID(op["id"])) is not None
    items, _ = await read_all(admin, limit=3)
    assert [i["operation_id"] for i in items] == [moved["id"]] * 2 + [reminded["id"]] * 2 + [
        moved["id"]
    ] * 2 + [reminded["id"]]
    assert [i["id"] for i in items] == [str(t["id"]) for t in await trigger_rows(api.pool)]
    # one event's feed is the same order, filtered
    mine, _ = await read_all(admin, limit=2, event_id=one["id"])
    assert [i["id"] for i in mine] == [i["id"] for i in items if i["event_id"] == one["id"]]
    assert len(mine) == 4
    theirs, _ = await read_all(admin, event_id=two["id"])
    assert {i["purpose"] for i in theirs} == {"event_reminder"} and len(theirs) == 3


async def test_a_stored_cursor_never_misses_or_rereads_while_operations_write(api: Api, admin):
    one, two = await make_event(admin), await make_event(admin)
    await seed(api, one["id"], 120)
    await seed(api, two["id"], 90, base=1000)
    first = await page(admin)
    assert first["items"] == []
    ops = [
        await start(admin, await preview(admin, one["id"])),
        await start(admin, await preview(admin, two["id"], "cancellation")),
    ]
    writing = True

    async def write(op: dict[str, Any]) -> None:
        options, now = OperationOptions(batch=3, cap=1), datetime.now(UTC)
        while (
            await run_operation_pass(api.pool, options, now, operation_id=uuid.UUID(op["id"]))
        ).batches:
            await asyncio.sleep(0)

    async def writers() -> None:
        nonlocal writing
        try:
            await asyncio.gather(*(write(op) for op in ops))
        finally:
            writing = False

    seen: list[dict[str, Any]] = []
    pages = 0

    async def reader() -> None:
        nonlocal pages
        cursor = first["next_cursor"]
        while True:
            still_writing = writing  # read before the page: an empty page after it is final
            got = await page(admin, cursor, limit=5)
            pages += 1
            seen.extend(got["items"])
            if not got["items"]:
                assert got["next_cursor"] == cursor  # the same position again
                if not still_writing:
                    return
            cursor = got["next_cursor"]
            await asyncio.sleep(0)

    await asyncio.gather(writers(), reader())
    ids = [s["id"] for s in seen]
    stored = [str(t["id"]) for t in await trigger_rows(api.pool)]
    assert len(stored) == 210
    assert ids == stored  # none missed, none read twice, in creation order
    assert pages > 42  # the reader paged while the writers wrote
    for op in ops:
        assert (await admin.get(f"/admin/operations/{op['id']}")).json()["state"] == "completed"


async def test_the_cursor_is_never_null_and_refuses_what_it_did_not_issue(api: Api, admin):
    ev = await make_event(admin)
    empty = await page(admin)
    assert empty["items"] == []
    assert (await page(admin, empty["next_cursor"]))["next_cursor"] == empty["next_cursor"]
    await seed(api, ev["id"], 3)
    op = await start(admin, await preview(admin, ev["id"]))
    await admin.post(f"/admin/operations/{op['id']}/resume")
    # the cursor of the empty feed reads what was written after it
    items, last = await read_all(admin, empty["next_cursor"], limit=2)
    assert len(items) == 3
    again = await page(admin, last)
    assert again == {"items": [], "next_cursor": last}
    assert (await page(admin, last, event_id=ev["id"]))["next_cursor"] == last
    # cursors the service never issued
    forged = [
        "not-a-cursor",
        "%%%",
        base64.urlsafe_b64encode(b"[1]").decode(),
        base64.urlsafe_b64encode(json.dumps(["x", str(uuid.uuid4())]).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps([1, "not-a-uuid"]).encode()).decode(),
    ]
    for cursor in forged:
        r = await admin.get("/admin/triggers", params={"after": cursor})
        assert error(r) == (422, "invalid_cursor"), (cursor, r.text)
    for limit in (0, 201):
        r = await admin.get("/admin/triggers", params={"limit": limit})
        assert r.status_code == 422, limit


async def test_the_event_filter_and_the_company_fence(api: Api, admin):
    theirs, ours = uuid.uuid4(), uuid.uuid4()
    their_event = await make_event(admin, company_id=str(theirs))
    our_event = await make_event(admin, company_id=str(ours))
    for base, ev in enumerate((their_event, our_event)):
        await seed(api, ev["id"], 2, base=base * 1000)
        op = await start(admin, await preview(admin, ev["id"]))
        await admin.post(f"/admin/operations/{op['id']}/resume")
    headers = await api.token("event:operate", company=ours)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    ) as outsider:
        r = await outsider.get("/admin/triggers", params={"event_id": their_event["id"]})
        assert error(r) == (404, "not_found")
        visible, _ = await read_all(outsider)
        assert {v["event_id"] for v in visible} == {our_event["id"]} and len(visible) == 2
    r = await admin.get("/admin/triggers", params={"event_id": str(uuid.uuid4())})
    assert error(r) == (404, "not_found")
    everything, _ = await read_all(admin)
    assert len(everything) == 4
    r = await api.client.get("/admin/triggers", headers=await api.token("event:read"))
    assert error(r) == (403, "missing_scope")


async def test_a_trigger_carries_ids_and_a_context_never_a_message_or_an_address(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 2)  # G1 <g1@example.org>, G2 <g2@example.org>
    params = {
        "date_begin": "2027-06-10T09:00:00+02:00",
        "date_end": "2027-06-12T18:00:00+02:00",
        "date_tz": "Europe/Paris",
        "location": "Porto",
    }
    op = await start(admin, await preview(admin, ev["id"], "reschedule", **params))
    await admin.post(f"/admin/operations/{op['id']}/resume")
    r = await admin.get("/admin/triggers", params={"event_id": ev["id"]})
    for item in r.json()["items"]:
        assert set(item) == TRIGGER_KEYS
        assert item["context"] == {
            "date_begin": "2027-06-10T07:00:00Z",
            "date_end": "2027-06-12T16:00:00Z",
            "date_tz": "Europe/Paris",
            "location": "Porto",
            "slot_begin": None,
            "slot_end": None,
        }
        assert item["event_slot_id"] is None
        assert (item["purpose"], item["ics_method"], item["ics_sequence"]) == (
            "event_rescheduled",
            "REQUEST",
            1,
        )
        assert (item["event_id"], item["operation_id"]) == (ev["id"], op["id"])
        assert (item["event_revision"], item["registration_version"]) == (2, 1)
    assert "example.org" not in r.text and '"G1"' not in r.text
    async with api.pool.acquire() as conn:
        columns = await conn.fetch(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'event' AND table_name = 'triggers'"
        )
    names = {c["column_name"] for c in columns}
    assert names and not {n for n in names for word in NEVER if word in n}


async def test_a_cursor_past_the_feeds_range_is_refused_not_a_server_error(admin):
    # a position beyond what a trigger's seq (bigint) can hold names no position of the feed
    for position in (2**63, 10**30, -(2**63) - 1):
        raw = json.dumps([position, str(uuid.uuid4())]).encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        r = await admin.get("/admin/triggers", params={"after": cursor})
        assert error(r) == (422, "invalid_cursor"), (position, r.status_code, r.text)


async def test_a_slot_registrations_trigger_names_its_slot_and_the_slots_times(admin):
    """A registration of a slot has its own calendar entry (the slot's UID and times): its
    trigger carries the slot and its times, so a consumer needs nothing else."""
    ev = await make_event(admin, is_multi_slots=True)
    slot = await add_slot(admin, ev["id"], hour=10)
    body = {"event_id": ev["id"], "event_slot_id": slot["id"], "name": "Ada"}
    r = await admin.post("/admin/registrations", json=body)
    assert r.status_code == 201, r.text
    op = await start(admin, await preview(admin, ev["id"], "cancellation"))
    await admin.post(f"/admin/operations/{op['id']}/resume")
    (item,) = (await admin.get("/admin/triggers", params={"event_id": ev["id"]})).json()["items"]
    assert (item["purpose"], item["ics_method"]) == ("event_cancelled", "CANCEL")
    assert item["event_slot_id"] == slot["id"]
    assert (item["context"]["slot_begin"], item["context"]["slot_end"]) == (
        "2027-05-10T10:00:00Z",
        "2027-05-10T11:00:00Z",
    )
    assert item["context"]["date_begin"] == "2027-05-10T09:00:00Z"
