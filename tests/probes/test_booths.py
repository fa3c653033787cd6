"""Booths through the real HTTP app on a real PostgreSQL: the exclusive confirm under real
concurrency (the partial unique index is the wall), release and re-confirm, the delete
fences, one event per order line, the template applied once, the paid latch, contacts,
masking, the linked-products read, scopes and the company fence."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import errors
from events_svc.settings import Settings
from events_svc.verbs.booths import book_for_order_line, latch_paid_booths
from tests.probes.helpers import BASE, Api, add_ticket, make_event

NOW = datetime(2027, 1, 1, tzinfo=UTC)


@pytest.fixture
def settings(db_url: str) -> Settings:
    # enough connections that the races happen in PostgreSQL, not in the pool queue
    return Settings(
        database_url=db_url, pool_min=4, pool_max=24, lock_timeout_ms=10000, scheduler_enabled=False
    )


async def _client(api: Api, *scopes: str, company: uuid.UUID | None = None) -> httpx.AsyncClient:
    headers = await api.token(*scopes, company=company)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app), base_url=BASE, headers=headers
    )


async def _category(admin: httpx.AsyncClient, product_ref: str | None = None) -> str:
    body: dict[str, Any] = {"name": "Corner", "description": "Two open sides"}
    if product_ref is not None:
        body["product_ref"] = product_ref
    r = await admin.post("/admin/booth-categories", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["product_ref"] == product_ref
    return str(r.json()["id"])


async def _booth(admin: httpx.AsyncClient, event_id: str, category: str, **over: Any) -> dict:
    body = {"event_id": event_id, "name": "B1", "booth_category_id": category, **over}
    r = await admin.post("/admin/booths", json=body)
    assert r.status_code == 201, r.text
    view = dict(r.json())
    assert (view["state"], view["is_paid"], view["bookings"]) == ("available", False, [])
    return view


async def _book(admin: httpx.AsyncClient, booth_id: str, status: int = 201, **body: Any) -> dict:
    r = await admin.post(f"/admin/booths/{booth_id}/bookings", json=body)
    assert r.status_code == status, r.text
    return dict(r.json())


async def _setup(admin: httpx.AsyncClient, **booth: Any) -> tuple[dict, str, dict]:
    """An event, a category and one booth of it: (event, category id, booth)."""
    ev = await make_event(admin)
    category = await _category(admin)
    return ev, category, await _booth(admin, ev["id"], category, **booth)


async def _get(admin: httpx.AsyncClient, booth_id: str, **params: str) -> dict:
    r = await admin.get(f"/admin/booths/{booth_id}", params=params)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == code, error
    return error


async def _statuses(api: Api, booth_id: str) -> Counter[str]:
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT status::text FROM event.booth_bookings WHERE event_booth_id = $1",
            uuid.UUID(booth_id),
        )
    return Counter(r["status"] for r in rows)


# --- the exclusive confirm -------------------------------------------------------------------


async def test_32_concurrent_confirms_have_one_winner_and_31_pending_losers(api: Api, admin):
    _, _, booth = await _setup(admin)
    bookings = [await _book(admin, booth["id"], contact_name=f"Exhibitor {i}") for i in range(32)]
    answers = await asyncio.gather(
        *(admin.post(f"/admin/booth-bookings/{b['id']}/confirm") for b in bookings)
    )
    outcome = Counter((r.status_code, r.json().get("error", {}).get("code")) for r in answers)
    assert outcome == {(200, None): 1, (409, "booth_already_confirmed"): 31}
    for r in answers:
        if r.status_code == 409:
            assert r.json()["error"]["booth_id"] == booth["id"]
        else:
            won = r.json()
            assert (won["status"], won["booth_id"]) == ("confirmed", booth["id"])
            assert won["booth"]["state"] == "unavailable"
    assert await _statuses(api, booth["id"]) == {"confirmed": 1, "pending": 31}
    assert (await _get(admin, booth["id"]))["state"] == "unavailable"


async def test_the_unique_index_decides_when_the_pre_check_sees_nothing(api: Api, admin):
    """A confirm whose pre-check ran before a rival's commit fails on the index itself."""
    _, _, booth = await _setup(admin)
    first, second = [await _book(admin, booth["id"]) for _ in range(2)]
    async with api.pool.acquire() as rival:
        tx = rival.transaction()
        await tx.start()
        await rival.execute(
            "UPDATE event.booth_bookings SET status = 'confirmed' WHERE id = $1",
            uuid.UUID(first["id"]),
        )
        racer = asyncio.create_task(admin.post(f"/admin/booth-bookings/{second['id']}/confirm"))
        await _until_a_lock_is_awaited(api)  # the racer waits on the rival's index entry
        await tx.commit()
        r = await racer
    assert _error(r, 409, "booth_already_confirmed")["booth_id"] == booth["id"]
    assert await _statuses(api, booth["id"]) == {"confirmed": 1, "pending": 1}


_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


async def _until_a_lock_is_awaited(api: Api) -> None:
    for _ in range(250):
        async with api.pool.acquire() as conn:
            if await conn.fetchval(_WAITING):
                return
        await asyncio.sleep(0.02)
    raise AssertionError("no transaction waited")


async def test_confirming_a_confirmed_booking_answers_it_again(admin):
    _, _, booth = await _setup(admin)
    booking = await _book(admin, booth["id"])
    url = f"/admin/booth-bookings/{booking['id']}/confirm"
    first, again = (await admin.post(url)), (await admin.post(url))
    assert first.status_code == again.status_code == 200
    assert first.json()["status"] == again.json()["status"] == "confirmed"
    assert first.json()["confirmed_at"] == again.json()["confirmed_at"]
    _error(await admin.post(f"/admin/booth-bookings/{uuid.uuid4()}/confirm"), 404, "not_found")


async def test_release_is_the_way_back_and_the_booth_confirms_again(api: Api, admin):
    _, _, booth = await _setup(admin)
    a, b = await _book(admin, booth["id"]), await _book(admin, booth["id"])
    assert (await admin.post(f"/admin/booth-bookings/{a['id']}/confirm")).status_code == 200
    _error(
        await admin.post(f"/admin/booth-bookings/{b['id']}/confirm"), 409, "booth_already_confirmed"
    )
    r = await admin.post(f"/admin/booths/{booth['id']}/release")
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["bookings"]) == ("available", [])
    assert await _statuses(api, booth["id"]) == {}
    # the released booking is gone; a new one confirms
    _error(await admin.post(f"/admin/booth-bookings/{b['id']}/confirm"), 404, "not_found")
    c = await _book(admin, booth["id"])
    assert (await admin.post(f"/admin/booth-bookings/{c['id']}/confirm")).status_code == 200
    assert (await _get(admin, booth["id"]))["state"] == "unavailable"
    # release of an available booth without bookings changes nothing
    await admin.post(f"/admin/booths/{booth['id']}/release")
    again = await admin.post(f"/admin/booths/{booth['id']}/release")
    assert (again.status_code, again.json()["state"]) == (200, "available")


async def test_confirm_fills_only_the_empty_contacts_and_release_keeps_them(admin):
    _, _, booth = await _setup(admin, contact_name="Owner Ltd")
    booking = await _book(
        admin,
        booth["id"],
        contact_name="Ada Lovelace",
        contact_email="ada@example.org",
        contact_phone="+44 20 7946 0958",
    )
    await admin.post(f"/admin/booth-bookings/{booking['id']}/confirm")
    shown = await _get(admin, booth["id"], pii="full")
    assert (shown["contact_name"], shown["contact_email"], shown["contact_phone"]) == (
        "Owner Ltd",
        "ada@example.org",
        "+44 20 7946 0958",
    )
    masked = await _get(admin, booth["id"])  # the booth's own contacts are masked too
    assert (masked["contact_name"], masked["contact_email"]) == ("O*** L***", "a***@example.org")
    release = f"/admin/booths/{booth['id']}/release"
    released = (await admin.post(release, params={"pii": "full"})).json()
    assert (released["contact_name"], released["contact_email"]) == ("Owner Ltd", "ada@example.org")


# --- delete fences -------------------------------------------------------------------------


async def test_a_booth_with_bookings_is_released_before_it_is_deleted(admin):
    _, _, booth = await _setup(admin)
    await _book(admin, booth["id"], contact_name="Ada")
    r = await admin.delete(f"/admin/booths/{booth['id']}")
    assert _error(r, 409, "booth_has_bookings")["booth_id"] == booth["id"]
    await admin.post(f"/admin/booths/{booth['id']}/release")
    assert (await admin.delete(f"/admin/booths/{booth['id']}")).status_code == 204
    _error(await admin.get(f"/admin/booths/{booth['id']}"), 404, "not_found")


async def test_a_booth_an_order_line_booked_is_never_deleted(admin):
    _, _, booth = await _setup(admin)
    booked = await _book(
        admin, booth["id"], order_id=str(uuid.uuid4()), order_line_id=str(uuid.uuid4())
    )
    assert booked["booth"]["sale_linked"] is True
    _error(await admin.delete(f"/admin/booths/{booth['id']}"), 409, "booth_sale_linked")
    released = (await admin.post(f"/admin/booths/{booth['id']}/release")).json()
    assert (released["bookings"], released["sale_linked"]) == ([], True)
    _error(await admin.delete(f"/admin/booths/{booth['id']}"), 409, "booth_sale_linked")


async def test_events_and_categories_with_booths_are_fenced(admin):
    ev, category, booth = await _setup(admin)
    _error(await admin.delete(f"/admin/events/{ev['id']}"), 409, "event_has_booths")
    r = await admin.delete(f"/admin/booth-categories/{category}")
    _error(r, 409, "booth_category_in_use")
    assert (await admin.delete(f"/admin/booths/{booth['id']}")).status_code == 204
    assert (await admin.delete(f"/admin/booth-categories/{category}")).status_code == 204
    assert (await admin.delete(f"/admin/events/{ev['id']}")).status_code == 204


# --- order lines: one booking per (line, booth), one event per line ---------------------------


async def test_an_order_line_books_a_booth_once_and_booths_of_one_event(api: Api, admin):
    ev, category, booth = await _setup(admin)
    other_ev = await make_event(admin, name="Other")
    other = await _booth(admin, other_ev["id"], category)
    order, line = str(uuid.uuid4()), str(uuid.uuid4())
    first = await _book(admin, booth["id"], order_id=order, order_line_id=line)
    again = await _book(admin, booth["id"], status=200, order_id=order, order_line_id=line)
    assert again["id"] == first["id"]
    assert await _statuses(api, booth["id"]) == {"pending": 1}
    r = await admin.post(
        f"/admin/booths/{other['id']}/bookings", json={"order_id": order, "order_line_id": line}
    )
    assert _error(r, 422, "booth_event_mismatch")["field"] == "order_line_id"
    assert await _statuses(api, other["id"]) == {}
    # a second booth of the same event is fine for that line
    second = await _booth(admin, ev["id"], category, name="B2")
    await _book(admin, second["id"], order_id=order, order_line_id=line)


async def test_the_seam_books_for_an_order_line_inside_its_transaction(api: Api, admin):
    ev, category, booth = await _setup(admin)
    b2 = await _booth(admin, ev["id"], category, name="B2")
    other = await _booth(admin, (await make_event(admin, name="Other"))["id"], category)
    event_id, order, line = uuid.UUID(ev["id"]), uuid.uuid4(), uuid.uuid4()
    ids = [uuid.UUID(booth["id"]), uuid.UUID(b2["id"])]
    contact = {"name": "Ada", "email": "ada@example.org", "phone": ""}

    async def book(booth_ids: list[uuid.UUID], line_id: uuid.UUID = line) -> list[uuid.UUID]:
        async with api.pool.acquire() as conn, conn.transaction():
            return await book_for_order_line(
                conn,
                booth_ids=booth_ids,
                event_id=event_id,
                order_id=order,
                order_line_id=line_id,
                contact=contact,
                now=NOW,
            )

    made = await book(ids)
    assert len(made) == 2 and await book(list(reversed(ids))) == list(reversed(made))
    with pytest.raises(errors.BoothEventMismatch):
        await book([uuid.UUID(other["id"])], uuid.uuid4())
    with pytest.raises(errors.BoothNotFound) as missing:
        await book([uuid.uuid4()])
    assert missing.value.code == "booth_not_found" and missing.value.status == 422
    shown = await _get(admin, booth["id"], pii="full")
    assert shown["sale_linked"] is True
    assert shown["bookings"][0]["contact_email"] == "ada@example.org"
    assert shown["bookings"][0]["order_line_id"] == str(line)


async def test_two_events_racing_for_one_order_line_leave_one_claim(api: Api, admin):
    category = await _category(admin)
    evs = [await make_event(admin, name=f"E{i}") for i in range(2)]
    booths = [await _booth(admin, ev["id"], category) for ev in evs]
    line = uuid.uuid4()

    async def book(i: int) -> Any:
        async with api.pool.acquire() as conn, conn.transaction():
            return await book_for_order_line(
                conn,
                booth_ids=[uuid.UUID(booths[i]["id"])],
                event_id=uuid.UUID(evs[i]["id"]),
                order_id=uuid.uuid4(),
                order_line_id=line,
                contact=None,
                now=NOW,
            )

    results = await asyncio.gather(*(book(i % 2) for i in range(8)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, Exception)]
    assert all(isinstance(r, errors.BoothEventMismatch) for r in refused), refused
    async with api.pool.acquire() as conn:
        events = await conn.fetch(
            "SELECT DISTINCT event_id FROM event.booth_bookings WHERE order_line_id = $1", line
        )
    assert len(events) == 1 and len(refused) == 4


# --- the paid latch ------------------------------------------------------------------------


async def test_is_paid_latches_for_the_order_and_survives_release(api: Api, admin):
    ev, category, booth = await _setup(admin)
    unrelated = await _booth(admin, ev["id"], category, name="B2")
    order = uuid.uuid4()
    await _book(admin, booth["id"], order_id=str(order), order_line_id=str(uuid.uuid4()))
    await _book(admin, unrelated["id"], order_id=str(uuid.uuid4()))
    async with api.pool.acquire() as conn, conn.transaction():
        assert await latch_paid_booths(conn, order) == [uuid.UUID(booth["id"])]
    async with api.pool.acquire() as conn, conn.transaction():
        assert await latch_paid_booths(conn, order) == [uuid.UUID(booth["id"])]  # one-way
    assert (await _get(admin, booth["id"]))["is_paid"] is True
    assert (await _get(admin, unrelated["id"]))["is_paid"] is False
    released = (await admin.post(f"/admin/booths/{booth['id']}/release")).json()
    assert (released["state"], released["is_paid"]) == ("available", True)
    r = await admin.patch(f"/admin/booths/{booth['id']}", json={"is_paid": False})
    _error(r, 422, "unknown_field")


# --- the template, applied once --------------------------------------------------------------


async def test_a_types_booth_lines_are_copied_once_at_event_create(admin):
    category = await _category(admin, "PROD-CORNER")
    kind = (await admin.post("/admin/types", json={"name": "Fair"})).json()
    r = await admin.post(
        f"/admin/types/{kind['id']}/booths", json={"name": "Hall A", "booth_category_id": category}
    )
    assert r.status_code == 201, r.text
    assert [(b["name"], b["booth_category_id"]) for b in r.json()["booths"]] == [
        ("Hall A", category)
    ]
    r = await admin.post(
        f"/admin/types/{kind['id']}/booths",
        json={"name": "X", "booth_category_id": str(uuid.uuid4())},
    )
    assert _error(r, 422, "reference_not_found")["field"] == "booth_category_id"
    ev = await make_event(admin, event_type_id=kind["id"])
    listed = (await admin.get("/admin/booths", params={"event_id": ev["id"]})).json()["items"]
    assert [(b["name"], b["booth_category_id"], b["state"], b["is_paid"]) for b in listed] == [
        ("Hall A", category, "available", False)
    ]
    assert listed[0]["contact_name"] == "" and listed[0]["bookings"] == []
    # a later type line never reaches the existing event; a new event gets both
    await admin.post(
        f"/admin/types/{kind['id']}/booths", json={"name": "Hall B", "booth_category_id": category}
    )
    listed = (await admin.get("/admin/booths", params={"event_id": ev["id"]})).json()["items"]
    assert [b["name"] for b in listed] == ["Hall A"]
    fresh = await make_event(admin, event_type_id=kind["id"])
    listed = (await admin.get("/admin/booths", params={"event_id": fresh["id"]})).json()["items"]
    assert sorted(b["name"] for b in listed) == ["Hall A", "Hall B"]
    # a type booth line is removed like the others; the events keep their copies
    line = (await admin.get(f"/admin/types/{kind['id']}")).json()["booths"][0]["id"]
    r = await admin.delete(f"/admin/types/{kind['id']}/booths/{line}")
    assert r.status_code == 200 and len(r.json()["booths"]) == 1
    assert (
        len((await admin.get("/admin/booths", params={"event_id": ev["id"]})).json()["items"]) == 1
    )


# --- masking, scopes, the company fence ------------------------------------------------------


async def test_booking_contacts_are_masked_unless_pii_full(api: Api, admin):
    _, _, booth = await _setup(admin)
    contact = {"contact_name": "Ada Lovelace", "contact_email": "ada@example.org"}
    booking = await _book(admin, booth["id"], **contact, contact_phone="+44 20 7946 0958")
    assert (booking["contact_name"], booking["contact_email"], booking["contact_phone"]) == (
        "A*** L***",
        "a***@example.org",
        "***58",
    )
    masked = (await _get(admin, booth["id"]))["bookings"][0]
    assert masked["contact_email"] == "a***@example.org"
    full = (await _get(admin, booth["id"], pii="full"))["bookings"][0]
    assert (full["contact_name"], full["contact_email"]) == ("Ada Lovelace", "ada@example.org")
    listed = (await admin.get("/admin/booths", params={"pii": "full"})).json()["items"]
    assert listed[0]["bookings"][0]["contact_phone"] == "+44 20 7946 0958"
    reader = await _client(api, "event:read")
    r = await reader.get(f"/admin/booths/{booth['id']}", params={"pii": "full"})
    assert _error(r, 403, "missing_scope")["scope"] == "registration:pii"
    assert (await reader.get(f"/admin/booths/{booth['id']}")).status_code == 200
    await reader.aclose()
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT verb, summary::text AS s FROM event.event_audit_log WHERE verb LIKE 'booth%'"
        )
    assert {r["verb"] for r in rows} >= {"booth_created", "booth_booking_created", "booth_pii_read"}
    # no contact in the audit rows (ids are hex: "ada" alone can be part of one)
    leaks = ("ada@", "lovelace", "7946 0958", "79460958")
    assert not any(leak in r["s"].lower() for r in rows for leak in leaks)


async def test_writes_need_booth_write_and_reads_event_read(api: Api, admin):
    ev, category, booth = await _setup(admin)
    booking = await _book(admin, booth["id"])
    new_booth = {"event_id": ev["id"], "name": "X", "booth_category_id": category}
    reader = await _client(api, "event:read")
    writer = await _client(api, "booth:write")
    try:
        for r in (
            await reader.post("/admin/booths", json=new_booth),
            await reader.patch(f"/admin/booths/{booth['id']}", json={"name": "Y"}),
            await reader.delete(f"/admin/booths/{booth['id']}"),
            await reader.post(f"/admin/booths/{booth['id']}/bookings", json={}),
            await reader.post(f"/admin/booth-bookings/{booking['id']}/confirm"),
            await reader.post(f"/admin/booths/{booth['id']}/release"),
            await reader.post("/admin/booth-categories", json={"name": "C"}),
            await reader.delete(f"/admin/booth-categories/{category}"),
        ):
            assert _error(r, 403, "missing_scope")["scope"] == "booth:write"
        for r in (
            await writer.get("/admin/booths"),
            await writer.get(f"/admin/booths/{booth['id']}"),
            await writer.get("/admin/booth-categories"),
            await writer.get("/admin/linked-products"),
        ):
            assert _error(r, 403, "missing_scope")["scope"] == "event:read"
        assert (await reader.get("/admin/booths")).status_code == 200
        r = await writer.post(f"/admin/booth-bookings/{booking['id']}/confirm")
        assert r.status_code == 200, r.text
        line = {"name": "X", "booth_category_id": category}
        r = await writer.post(f"/admin/types/{uuid.uuid4()}/booths", json=line)
        assert _error(r, 403, "missing_scope")["scope"] == "event:write"
    finally:
        await reader.aclose()
        await writer.aclose()


async def test_another_companys_booths_are_404(api: Api, admin):
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(theirs))
    category = await _category(admin, "PROD-1")
    booth = await _booth(admin, ev["id"], category)
    booking = await _book(admin, booth["id"])
    await add_ticket(admin, ev["id"], product_ref="PROD-2")
    new_booth = {"event_id": ev["id"], "name": "X", "booth_category_id": category}
    other = await _client(api, "*", company=mine)
    try:
        for r in (
            await other.get(f"/admin/booths/{booth['id']}"),
            await other.patch(f"/admin/booths/{booth['id']}", json={"name": "Y"}),
            await other.delete(f"/admin/booths/{booth['id']}"),
            await other.post(f"/admin/booths/{booth['id']}/bookings", json={}),
            await other.post(f"/admin/booth-bookings/{booking['id']}/confirm"),
            await other.post(f"/admin/booths/{booth['id']}/release"),
            await other.get("/admin/booths", params={"event_id": ev["id"]}),
            await other.get("/admin/linked-products", params={"event_id": ev["id"]}),
            await other.post("/admin/booths", json=new_booth),
        ):
            _error(r, 404, "not_found")
        assert (await other.get("/admin/booths")).json()["items"] == []
        assert (await other.get("/admin/linked-products")).json()["items"] == []
        # categories are shared configuration
        assert (await other.get(f"/admin/booth-categories/{category}")).status_code == 200
        owner = await _client(api, "*", company=theirs)
        assert len((await owner.get("/admin/booths")).json()["items"]) == 1
        await owner.aclose()
    finally:
        await other.aclose()
    assert (await _get(admin, booth["id"]))["bookings"][0]["status"] == "pending"


# --- the linked-products read ----------------------------------------------------------------


async def test_linked_products_are_the_distinct_refs_of_tickets_and_booth_categories(
    api: Api, admin
):
    ev = await make_event(admin)
    other = await make_event(admin, name="Other")
    await add_ticket(admin, ev["id"], name="Std", product_ref="P-TICKET")
    await add_ticket(admin, ev["id"], name="VIP", product_ref="P-BOTH")
    await add_ticket(admin, ev["id"], name="Free")  # no product
    await add_ticket(admin, other["id"], product_ref="P-OTHER")
    both = await _category(admin, "P-BOTH")
    corner = await _category(admin, "P-BOOTH")
    await _category(admin, "P-UNUSED")
    await _booth(admin, ev["id"], both)
    await _booth(admin, ev["id"], corner, name="B2")
    await _booth(admin, ev["id"], corner, name="B3")
    r = await admin.get("/admin/linked-products", params={"event_id": ev["id"]})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "items": [
            {"product_ref": "P-BOOTH", "sources": ["booth_category"]},
            {"product_ref": "P-BOTH", "sources": ["ticket", "booth_category"]},
            {"product_ref": "P-TICKET", "sources": ["ticket"]},
        ],
        "next_cursor": None,
    }
    everywhere = (await admin.get("/admin/linked-products")).json()["items"]
    assert [i["product_ref"] for i in everywhere] == ["P-BOOTH", "P-BOTH", "P-OTHER", "P-TICKET"]
    first = (await admin.get("/admin/linked-products", params={"limit": 2})).json()
    rest = await admin.get("/admin/linked-products", params={"cursor": first["next_cursor"]})
    assert len(first["items"]) == 2
    paged = [i["product_ref"] for i in first["items"] + rest.json()["items"]]
    assert paged == ["P-BOOTH", "P-BOTH", "P-OTHER", "P-TICKET"]
    r = await admin.get("/admin/linked-products", params={"event_id": str(uuid.uuid4())})
    _error(r, 404, "not_found")
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT product_ref, source FROM event.event_linked_products WHERE event_id = $1"
            " ORDER BY product_ref, source",
            uuid.UUID(ev["id"]),
        )
    assert [tuple(r) for r in rows] == [
        ("P-BOOTH", "booth_category"),
        ("P-BOTH", "booth_category"),
        ("P-BOTH", "ticket"),
        ("P-TICKET", "ticket"),
    ]


async def test_ticket_product_refs_are_written_read_and_bounded(admin):
    ev = await make_event(admin)
    ticket = await add_ticket(admin, ev["id"], product_ref="SKU-1")
    assert ticket["product_ref"] == "SKU-1"
    r = await admin.patch(f"/admin/tickets/{ticket['id']}", json={"product_ref": "SKU-2"})
    assert r.json()["product_ref"] == "SKU-2"
    r = await admin.patch(f"/admin/tickets/{ticket['id']}", json={"product_ref": None})
    assert r.json()["product_ref"] is None
    body = {"event_id": ev["id"], "name": "T", "product_ref": "x" * 257}
    r = await admin.post("/admin/tickets", json=body)
    assert _error(r, 422, "validation_failed")["field"] == "product_ref"
    r = await admin.post("/admin/booth-categories", json={"name": "C", "product_ref": ""})
    assert _error(r, 422, "validation_failed")["field"] == "product_ref"


# --- the other refusals --------------------------------------------------------------------


async def test_booth_bodies_are_checked(admin):
    ev, category, booth = await _setup(admin)
    body = {"event_id": ev["id"], "name": "B", "booth_category_id": str(uuid.uuid4())}
    r = await admin.post("/admin/booths", json=body)
    assert _error(r, 422, "reference_not_found")["field"] == "booth_category_id"
    r = await admin.post(
        "/admin/booths", json={**body, "booth_category_id": category, "state": "x"}
    )
    assert _error(r, 422, "unknown_field")["field"] == "state"
    r = await admin.post("/admin/booths", json={**body, "event_id": str(uuid.uuid4())})
    _error(r, 404, "not_found")
    r = await admin.post(
        "/admin/booths", json={**body, "booth_category_id": category, "name": "a\x00"}
    )
    _error(r, 422, "validation_failed")
    r = await admin.patch(f"/admin/booths/{booth['id']}", json={"event_id": str(uuid.uuid4())})
    _error(r, 422, "unknown_field")
    r = await admin.patch(f"/admin/booths/{booth['id']}", json={"name": None})
    assert _error(r, 422, "validation_failed")["field"] == "name"
    r = await admin.patch(f"/admin/booths/{booth['id']}", json={"contact_phone": "call me"})
    _error(r, 422, "phone_invalid")
    r = await admin.post(f"/admin/booths/{booth['id']}/bookings", json={"contact_email": "nope"})
    _error(r, 422, "validation_failed")
    r = await admin.post(f"/admin/booths/{uuid.uuid4()}/bookings", json={})
    _error(r, 404, "not_found")
    r = await admin.patch(
        f"/admin/booths/{booth['id']}",
        json={"name": "Renamed", "contact_name": "Grace"},
        params={"pii": "full"},
    )
    assert (r.status_code, r.json()["name"], r.json()["contact_name"]) == (200, "Renamed", "Grace")
    r = await admin.patch(f"/admin/booths/{booth['id']}", json={"contact_name": None})
    assert r.json()["contact_name"] == ""


async def test_booth_categories_crud_and_lists_page(admin):
    ids = [await _category(admin, f"P{i}") for i in range(3)]
    first = (await admin.get("/admin/booth-categories", params={"limit": 2})).json()
    rest = (
        await admin.get("/admin/booth-categories", params={"cursor": first["next_cursor"]})
    ).json()
    assert sorted(c["id"] for c in first["items"] + rest["items"]) == sorted(ids)
    r = await admin.patch(f"/admin/booth-categories/{ids[0]}", json={"product_ref": None})
    assert (r.status_code, r.json()["product_ref"]) == (200, None)
    r = await admin.patch(f"/admin/booth-categories/{ids[0]}", json={"name": None})
    _error(r, 422, "validation_failed")
    assert (await admin.delete(f"/admin/booth-categories/{ids[0]}")).status_code == 204
    _error(await admin.get(f"/admin/booth-categories/{ids[0]}"), 404, "not_found")
    ev = await make_event(admin)
    made = [await _booth(admin, ev["id"], ids[1], name=f"B{i}") for i in range(3)]
    page = (await admin.get("/admin/booths", params={"event_id": ev["id"], "limit": 2})).json()
    more = (await admin.get("/admin/booths", params={"cursor": page["next_cursor"]})).json()
    assert [b["id"] for b in page["items"] + more["items"]] == [b["id"] for b in made]
    await _book(admin, made[0]["id"])
    booking = (await _get(admin, made[0]["id"]))["bookings"][0]
    await admin.post(f"/admin/booth-bookings/{booking['id']}/confirm")
    taken = (await admin.get("/admin/booths", params={"state": "unavailable"})).json()["items"]
    assert [b["id"] for b in taken] == [made[0]["id"]]


async def test_the_database_refuses_what_the_verbs_would(api: Api, admin):
    """The walls behind the verbs: EBS-1, EBS-2 and EBS-4 in SQL."""
    ev, category, booth = await _setup(admin)
    other = await _booth(admin, (await make_event(admin, name="O"))["id"], category)
    line = uuid.uuid4()
    await _book(admin, booth["id"], order_id=str(uuid.uuid4()), order_line_id=str(line))
    bid, eid = uuid.UUID(booth["id"]), uuid.UUID(ev["id"])
    async with api.pool.acquire() as conn:
        with pytest.raises(asyncpg.UniqueViolationError) as ebs2:
            await conn.execute(
                "INSERT INTO event.booth_bookings (event_booth_id, event_id, order_line_id)"
                " VALUES ($1, $2, $3)",
                bid,
                eid,
                line,
            )
        assert ebs2.value.constraint_name == "booth_bookings_order_line_booth_key"
        with pytest.raises(asyncpg.ForeignKeyViolationError) as ebs4:
            await conn.execute(
                "INSERT INTO event.booth_bookings (event_booth_id, event_id, order_line_id)"
                " VALUES ($1, $2, $3)",
                uuid.UUID(other["id"]),
                uuid.UUID(other["event_id"]),
                line,
            )
        assert ebs4.value.constraint_name == "booth_bookings_order_line_event_fkey"
        await conn.execute(
            "INSERT INTO event.booth_bookings (event_booth_id, event_id, status)"
            " VALUES ($1, $2, 'confirmed')",
            bid,
            eid,
        )
        with pytest.raises(asyncpg.UniqueViolationError) as ebs1:
            await conn.execute(
                "INSERT INTO event.booth_bookings (event_booth_id, event_id, status)"
                " VALUES ($1, $2, 'confirmed')",
                bid,
                eid,
            )
        assert ebs1.value.constraint_name == "booths_confirmed_exclusivity"
