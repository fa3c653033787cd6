"""The sale seam: exactly-once order facts, the mint fork, seats held for unpaid orders,
the forward-only heal, the cancel cascade (real PostgreSQL, real concurrency)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx

from events_svc.actors import SYSTEM
from events_svc.db import create_pool
from events_svc.models.sale import OrderConfirmed
from events_svc.verbs.sale import seam
from tests.probes.helpers import (
    Api,
    add_ticket,
    cancel,
    make_event,
    outbox,
    run,
    scheduler,
    template,
)

SEAM = "/admin/seam/orders"


def attendees(n: int, tag: str = "A") -> list[dict[str, str]]:
    return [{"name": f"{tag} {i}", "email": f"{tag.lower()}{i}@example.org"} for i in range(n)]


def confirmed(event_id: str, n: int = 2, *, total: str = "40.00", **over: Any) -> dict[str, Any]:
    """A confirmed fact: one line of `n` attendees on `event_id`, a fresh order."""
    line = {"line_id": str(uuid.uuid4()), "event_id": event_id, "attendees": attendees(n)}
    body = {"order_id": str(uuid.uuid4()), "amount_total": total, "currency": "EUR"}
    return {**body, "lines": [line], **over}


async def fact(admin: httpx.AsyncClient, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await admin.post(f"{SEAM}/{verb}", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def rows(api: Api, order_id: str) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return await conn.fetch(
            "SELECT id, state::text, sale_status::text, state_origin::text, sale_order_state::text"
            " FROM event.registrations WHERE sale_order_id = $1 ORDER BY created_at, id",
            uuid.UUID(order_id),
        )


async def seats(admin: httpx.AsyncClient, event_id: str) -> dict[str, Any]:
    return dict((await admin.get(f"/admin/events/{event_id}/seats")).json()["event"])


async def holding(api: Api, event_id: str) -> int:
    """The rows holding a seat, counted apart from the seat service's function."""
    async with api.pool.acquire() as conn:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM event.registrations WHERE event_id = $1 AND active"
                " AND (state IN ('open', 'done') OR (state = 'draft' AND sale_status = 'to_pay'))",
                uuid.UUID(event_id),
            )
        )


async def after_sub_line(admin: httpx.AsyncClient, event_id: str) -> str:
    tpl = await template(admin)
    line = await scheduler(
        admin, event_id, tpl, interval_kind="after_sub", interval_unit="now", interval_nbr=0
    )
    return str(line["id"])


async def test_the_mint_fork_free_paid_and_unparseable(api: Api, admin):
    ev = await make_event(admin, seats_max=20)
    line = await after_sub_line(admin, ev["id"])
    free_body = confirmed(ev["id"], 2, total="0.00")
    free = await fact(admin, "confirmed", free_body)
    assert free["outcome"] == "applied" and len(free["registration_ids"]) == 2
    assert free["skipped_ids"] == [] and free["overbooked"] is False
    assert free["delivery_key"] == f"confirmed:{free_body['order_id']}"
    unpaid_body = confirmed(ev["id"], 3, total="12.50")
    await fact(admin, "confirmed", unpaid_body)
    junk_body = confirmed(ev["id"], 1, total="twelve")
    ticket = await add_ticket(admin, ev["id"], seats_max=5)
    junk_body["lines"][0]["event_ticket_id"] = ticket["id"]
    await fact(admin, "confirmed", junk_body)
    assert [tuple(r)[1:] for r in await rows(api, free_body["order_id"])] == [
        ("open", "free", "sale", "sale")
    ] * 2
    assert [tuple(r)[1:] for r in await rows(api, unpaid_body["order_id"])] == [
        ("draft", "to_pay", "sale", "sent")
    ] * 3
    assert [tuple(r)[1:] for r in await rows(api, junk_body["order_id"])] == [
        ("draft", "to_pay", "sale", "sent")
    ]
    view = (await admin.get(f"/admin/registrations/{free['registration_ids'][0]}")).json()
    assert view["sale_order_id"] == free_body["order_id"] and view["state_origin"] == "sale"
    assert await seats(admin, ev["id"]) == {
        "limited": True,
        "cap": 20,
        "reserved": 2,
        "used": 0,
        "held": 4,
        "taken": 6,
        "available": 14,
    }
    by_ticket = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()["tickets"][0]
    assert (by_ticket["held"], by_ticket["taken"], by_ticket["available"]) == (1, 1, 4)
    await run(api, datetime.now(UTC))
    assert len(await outbox(api, line)) == 2  # only the free order's attendees were armed


async def test_a_redelivery_storm_over_several_pools_applies_the_fact_once(
    api: Api, admin, settings
):
    ev = await make_event(admin, seats_max=50)
    body = confirmed(ev["id"], 4, total="0", delivery_id="dlv-storm-1")
    cmd = OrderConfirmed.model_validate(body)
    assert settings.database_url
    pools = [await create_pool(settings.database_url, settings) for _ in range(4)]
    now = datetime.now(UTC)
    try:
        answers = await asyncio.gather(
            *(
                seam.deliver(
                    pools[i % 4],
                    SYSTEM,
                    "confirmed",
                    cmd,
                    lambda conn, order: seam.apply_confirmed(conn, SYSTEM, cmd, order, now),
                    now,
                )
                for i in range(200)
            )
        )
    finally:
        for p in pools:
            await p.close()
    outcomes = sorted(a["outcome"] for a in answers)
    assert outcomes == ["already_applied"] * 199 + ["applied"]
    assert {tuple(a["registration_ids"]) for a in answers} == {
        tuple(answers[0]["registration_ids"])
    }
    assert len(await rows(api, body["order_id"])) == 4
    again = await fact(admin, "confirmed", body)  # and through HTTP: the recorded answer
    assert again["outcome"] == "already_applied" and again["delivery_key"] == "dlv-storm-1"
    assert again["registration_ids"] == [str(i) for i in answers[0]["registration_ids"]]


async def test_two_deliveries_of_one_verb_and_order_are_two_facts(api: Api, admin):
    ev = await make_event(admin)
    body = confirmed(ev["id"], 1, total="0")
    first = await fact(admin, "confirmed", {**body, "delivery_id": "d-1"})
    second = await fact(admin, "confirmed", {**body, "delivery_id": "d-2"})
    assert (first["outcome"], second["outcome"]) == ("applied", "applied")
    assert first["registration_ids"] != second["registration_ids"]
    assert len(await rows(api, body["order_id"])) == 2
    # without a delivery id the key is "<verb>:<order_id>": a second fact is the same fact
    plain = confirmed(ev["id"], 1, total="0")
    assert (await fact(admin, "confirmed", plain))["outcome"] == "applied"
    assert (await fact(admin, "confirmed", plain))["outcome"] == "already_applied"
    # a key reused for another verb or order is refused, and records nothing
    r = await admin.post(f"{SEAM}/paid", json={"delivery_id": "d-1", "order_id": body["order_id"]})
    assert r.status_code == 409 and r.json()["error"]["code"] == "delivery_key_conflict"
    assert r.json()["error"]["delivery_key"] == "d-1"


async def test_an_unpaid_order_holds_seats_against_a_storm(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    held = await fact(admin, "confirmed", confirmed(ev["id"], 3, total="30"))
    assert held["outcome"] == "applied"
    storm = await asyncio.gather(
        *(admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(30))
    )
    codes = sorted(r.status_code for r in storm)
    assert codes == [201] * 7 + [409] * 23
    assert {r.json()["error"]["code"] for r in storm if r.status_code == 409} == {
        "event_seats_exhausted"
    }
    assert await seats(admin, ev["id"]) == {
        "limited": True,
        "cap": 10,
        "reserved": 7,
        "used": 0,
        "held": 3,
        "taken": 10,
        "available": 0,
    }


async def test_a_storm_across_an_order_cancelled_mid_storm_never_oversells(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    body = confirmed(ev["id"], 4, total="30")
    await fact(admin, "confirmed", body)
    plain = [admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(30)]
    cancel = admin.post(f"{SEAM}/cancelled", json={"order_id": body["order_id"]})
    results = await asyncio.gather(*plain[:15], cancel, *plain[15:])
    assert results[15].json()["outcome"] == "applied"
    won = sum(r.status_code == 201 for r in results if r is not results[15])
    assert all(r.status_code in (201, 409) for r in results[:15] + results[16:])
    assert await holding(api, ev["id"]) == won <= 10  # counted apart from the seat service
    after = await seats(admin, ev["id"])
    assert after["held"] == 0 and after["taken"] == won
    top_up = await asyncio.gather(
        *(admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(12))
    )
    assert sum(r.status_code == 201 for r in top_up) == 10 - won
    assert (await seats(admin, ev["id"]))["taken"] == 10
    assert [r["state"] for r in await rows(api, body["order_id"])] == ["cancel"] * 4


async def test_a_refused_delivery_is_recorded_and_answered_again(api: Api, admin):
    ev = await make_event(admin, seats_max=2)
    body = confirmed(ev["id"], 3, total="0", delivery_id="full-1")
    first = await fact(admin, "confirmed", body)
    assert first["outcome"] == "event_seats_exhausted" and first["registration_ids"] == []
    assert first["detail"]["available"] == 2 and first["detail"]["requested"] == 3
    line_id = body["lines"][0]["line_id"]
    assert first["detail"]["line_id"] == line_id
    again = await fact(admin, "confirmed", body)
    assert again == first  # the same answer, every time
    assert await rows(api, body["order_id"]) == []
    other = await make_event(admin)
    ticket = await add_ticket(admin, other["id"])
    bad = confirmed(ev["id"], 1, total="0")
    bad["lines"][0]["event_ticket_id"] = ticket["id"]
    assert (await fact(admin, "confirmed", bad))["outcome"] == "ticket_not_in_event"
    closed = await add_ticket(admin, ev["id"], end_sale_datetime="2020-01-01T00:00:00Z")
    late = confirmed(ev["id"], 1, total="0")
    late["lines"][0]["event_ticket_id"] = closed["id"]
    assert (await fact(admin, "confirmed", late))["outcome"] == "event_sale_window_closed"
    missing = confirmed(str(uuid.uuid4()), 1, total="0")
    assert (await fact(admin, "confirmed", missing))["outcome"] == "not_found"


async def test_one_delivery_is_all_or_nothing(api: Api, admin):
    roomy = await make_event(admin, seats_max=10)
    tight = await make_event(admin, seats_max=1)
    body = confirmed(roomy["id"], 2, total="0")
    body["lines"].append(
        {"line_id": str(uuid.uuid4()), "event_id": tight["id"], "attendees": attendees(2, "B")}
    )
    answer = await fact(admin, "confirmed", body)
    assert answer["outcome"] == "event_seats_exhausted"
    assert answer["detail"]["line_id"] == body["lines"][1]["line_id"]
    assert await rows(api, body["order_id"]) == []  # the first line's attendees are gone too
    assert (await seats(admin, roomy["id"]))["taken"] == 0


async def test_the_heal_is_forward_only_and_arms(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    line = await after_sub_line(admin, ev["id"])
    body = confirmed(ev["id"], 2, total="25")
    minted = await fact(admin, "confirmed", body)
    order = {"order_id": body["order_id"]}
    await run(api, datetime.now(UTC))
    assert await outbox(api, line) == []  # held drafts are sent nothing
    paid = await fact(admin, "paid", order)
    assert paid["outcome"] == "applied" and paid["overbooked"] is False
    assert sorted(paid["registration_ids"]) == sorted(minted["registration_ids"])
    assert [tuple(r)[1:] for r in await rows(api, body["order_id"])] == [
        ("open", "sold", "sale", "sale")
    ] * 2
    await run(api, datetime.now(UTC))
    assert len(await outbox(api, line)) == 2  # armed through the core arm rule
    done = minted["registration_ids"][0]
    assert (await admin.post(f"/admin/registrations/{done}/set-done")).status_code == 200
    again = await fact(admin, "paid", {**order, "delivery_id": "paid-again"})
    assert again["outcome"] == "applied" and again["registration_ids"] == []
    states = sorted(r["state"] for r in await rows(api, body["order_id"]))
    assert states == ["done", "open"]  # nothing regresses
    assert (await seats(admin, ev["id"]))["held"] == 0


async def test_cancel_keeps_the_sale_status_and_a_late_paid_fact_heals_forward(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    body = confirmed(ev["id"], 2, total="25")
    minted = await fact(admin, "confirmed", body)
    order = {"order_id": body["order_id"]}
    cancelled = await fact(admin, "cancelled", order)
    assert sorted(cancelled["registration_ids"]) == sorted(minted["registration_ids"])
    assert [tuple(r)[1:] for r in await rows(api, body["order_id"])] == [
        ("cancel", "to_pay", "sale", "cancel")
    ] * 2
    assert (await seats(admin, ev["id"]))["taken"] == 0  # a cancelled unpaid row holds nothing
    assert (await fact(admin, "cancelled", order))["outcome"] == "already_applied"
    healed = await fact(admin, "paid", order)
    assert sorted(healed["registration_ids"]) == sorted(minted["registration_ids"])
    assert [tuple(r)[1:] for r in await rows(api, body["order_id"])] == [
        ("open", "sold", "sale", "sale")
    ] * 2
    # a free order's cancellation keeps `free`
    free = confirmed(ev["id"], 1, total="0")
    await fact(admin, "confirmed", free)
    await fact(admin, "cancelled", {"order_id": free["order_id"]})
    assert [tuple(r)[1:3] for r in await rows(api, free["order_id"])] == [("cancel", "free")]


async def test_the_heal_skips_rows_an_officer_moved(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    body = confirmed(ev["id"], 3, total="25")
    minted = await fact(admin, "confirmed", body)
    kept, dropped, opened = minted["registration_ids"]
    r = await cancel(admin, dropped)
    assert r.status_code == 200 and r.json()["state_origin"] == "officer"
    r = await admin.post(f"/admin/registrations/{opened}/confirm")
    assert r.json()["state"] == "open" and r.json()["sale_status"] == "to_pay"
    healed = await fact(admin, "paid", {"order_id": body["order_id"]})
    assert healed["registration_ids"] == [kept]
    assert sorted(healed["skipped_ids"]) == sorted([dropped, opened])
    got = await rows(api, body["order_id"])
    state = {str(r["id"]): (r["state"], r["sale_status"]) for r in got}
    assert state == {
        kept: ("open", "sold"),
        dropped: ("cancel", "to_pay"),
        opened: ("open", "to_pay"),
    }
    # an officer's draft of a paid row holds no seat; an unpaid one still does
    r = await admin.post(f"/admin/registrations/{kept}/set-draft")
    assert r.json()["state_origin"] == "officer"
    assert (await seats(admin, ev["id"]))["held"] == 0
    r = await admin.post(f"/admin/registrations/{opened}/set-draft")
    assert (r.json()["state"], r.json()["sale_status"]) == ("draft", "to_pay")
    assert (await seats(admin, ev["id"]))["held"] == 1


async def test_a_heal_past_a_full_event_still_heals_and_says_so(api: Api, admin):
    ev = await make_event(admin, seats_max=2)
    body = confirmed(ev["id"], 2, total="25")
    await fact(admin, "confirmed", body)
    await fact(admin, "cancelled", {"order_id": body["order_id"]})
    for _ in range(2):  # the freed seats are sold to others
        r = await admin.post("/admin/registrations", json={"event_id": ev["id"]})
        assert r.status_code == 201
    healed = await fact(admin, "paid", {"order_id": body["order_id"]})
    assert healed["outcome"] == "applied" and healed["overbooked"] is True
    assert len(healed["registration_ids"]) == 2
    assert (await seats(admin, ev["id"]))["taken"] == 4
    async with api.pool.acquire() as conn:
        audit = await conn.fetchrow(
            "SELECT summary FROM event.event_audit_log WHERE verb = 'sale_order_paid'"
            " AND object_id = $1",
            uuid.UUID(body["order_id"]),
        )
        lifted = await conn.fetchval(
            "SELECT count(*) FROM event.event_audit_log WHERE verb = 'registration_confirmed'"
            " AND (summary->>'overbooked')::boolean AND event_id = $1",
            uuid.UUID(ev["id"]),
        )
    assert audit["summary"]["overbooked"] is True and lifted >= 1


async def test_a_paid_fact_before_its_confirmed_fact_is_kept(api: Api, admin):
    ev = await make_event(admin)
    body = confirmed(ev["id"], 2, total="25")
    early = await fact(admin, "paid", {"order_id": body["order_id"]})
    assert early["outcome"] == "applied" and early["registration_ids"] == []
    await fact(admin, "confirmed", body)
    assert [tuple(r)[1:3] for r in await rows(api, body["order_id"])] == [("open", "sold")] * 2


async def test_the_registrations_of_an_order_are_listed(api: Api, admin):
    ev = await make_event(admin)
    body = confirmed(ev["id"], 2, total="25")
    minted = await fact(admin, "confirmed", body)
    await fact(admin, "confirmed", confirmed(ev["id"], 1, total="25"))
    r = await admin.get("/admin/registrations", params={"sale_order_id": body["order_id"]})
    assert r.status_code == 200
    assert sorted(i["id"] for i in r.json()["items"]) == sorted(minted["registration_ids"])
    assert all(i["email"].startswith(("a***@",)) for i in r.json()["items"])  # masked
    both = {"sale_order_id": body["order_id"], "event_id": ev["id"], "state": "draft"}
    assert len((await admin.get("/admin/registrations", params=both)).json()["items"]) == 2
    r = await admin.get("/admin/registrations")
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_failed"


async def test_the_seam_needs_its_scope_and_a_well_formed_fact(api: Api, admin):
    ev = await make_event(admin)
    reader = await api.token("event:read", "registration:write")
    r = await api.client.post(f"{SEAM}/paid", json={"order_id": str(uuid.uuid4())}, headers=reader)
    assert r.status_code == 403 and r.json()["error"]["code"] == "missing_scope"
    r = await api.client.post(f"{SEAM}/paid", json={"order_id": str(uuid.uuid4())})
    assert r.status_code == 401
    body = confirmed(ev["id"], 1)
    for broken in (
        {**body, "state": "sale"},
        {**body, "lines": []},
        {**body, "lines": [{**body["lines"][0], "attendees": []}]},
        {**body, "lines": [{**body["lines"][0], "attendees": [{"name": ""}]}]},
        {**body, "lines": body["lines"] * 2},
        {**body, "amount_total": 12.5},
        {**body, "delivery_id": "x" * 201},
    ):
        r = await admin.post(f"{SEAM}/confirmed", json=broken)
        assert r.status_code == 422, broken
    assert await rows(api, body["order_id"]) == []
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.seam_inbox") == 0


async def test_a_company_actor_reaches_only_its_events(api: Api, admin):
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(theirs))
    token = await api.token("seam:write", company=ours)
    r = await api.client.post(f"{SEAM}/confirmed", json=confirmed(ev["id"], 1), headers=token)
    assert r.status_code == 200 and r.json()["outcome"] == "not_found"


async def booth(admin: httpx.AsyncClient, event_id: str) -> str:
    category = await admin.post("/admin/booth-categories", json={"name": "Stand"})
    assert category.status_code == 201, category.text
    body = {"event_id": event_id, "name": "B1", "booth_category_id": category.json()["id"]}
    r = await admin.post("/admin/booths", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def test_an_order_line_books_its_booths_and_the_paid_fact_latches_them(api: Api, admin):
    ev = await make_event(admin)
    stand = await booth(admin, ev["id"])
    body = confirmed(ev["id"], 1, total="500")
    body["lines"][0]["booth_ids"] = [stand]
    assert (await fact(admin, "confirmed", body))["outcome"] == "applied"
    view = (await admin.get(f"/admin/booths/{stand}")).json()
    assert [(b["status"], b["order_id"]) for b in view["bookings"]] == [
        ("pending", body["order_id"])
    ]
    assert view["is_paid"] is False
    await fact(admin, "cancelled", {"order_id": body["order_id"]})
    view = (await admin.get(f"/admin/booths/{stand}")).json()
    assert len(view["bookings"]) == 1 and view["state"] == "available"  # untouched
    await fact(admin, "paid", {"order_id": body["order_id"]})
    assert (await admin.get(f"/admin/booths/{stand}")).json()["is_paid"] is True
    # a booth-only line, and a booth of another event: refused, recorded, nothing kept
    other = await make_event(admin)
    foreign = await booth(admin, other["id"])
    mixed = confirmed(ev["id"], 1, total="0")
    mixed["lines"][0]["booth_ids"] = [foreign]
    answer = await fact(admin, "confirmed", mixed)
    assert answer["outcome"] == "booth_event_mismatch"
    assert answer["detail"]["line_id"] == mixed["lines"][0]["line_id"]
    assert await rows(api, mixed["order_id"]) == []
    only = confirmed(other["id"], 0, total="300")
    only["lines"][0]["booth_ids"] = [foreign]
    assert (await fact(admin, "confirmed", only))["outcome"] == "applied"
    assert len((await admin.get(f"/admin/booths/{foreign}")).json()["bookings"]) == 1


async def test_a_mint_racing_a_storm_of_plain_registrations_never_oversells(api: Api, admin):
    for _ in range(3):
        ev = await make_event(admin, seats_max=10)
        body = confirmed(ev["id"], 3, total="30")
        plain = [admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(20)]
        mint = admin.post(f"{SEAM}/confirmed", json=body)
        results = await asyncio.gather(*plain[:10], mint, *plain[10:])
        minted = results[10].json()
        won = sum(r.status_code == 201 for r in results[:10] + results[11:])
        held = 3 if minted["outcome"] == "applied" else 0
        assert minted["outcome"] in ("applied", "event_seats_exhausted")
        assert won + held == await holding(api, ev["id"]) == 10


async def test_an_overbooking_heal_racing_a_storm_stays_counted(api: Api, admin):
    ev = await make_event(admin, seats_max=5)
    body = confirmed(ev["id"], 2, total="30")
    await fact(admin, "confirmed", body)
    await fact(admin, "cancelled", {"order_id": body["order_id"]})
    plain = [admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(10)]
    paid = admin.post(f"{SEAM}/paid", json={"order_id": body["order_id"]})
    results = await asyncio.gather(*plain[:5], paid, *plain[5:])
    healed = results[5].json()
    won = sum(r.status_code == 201 for r in results[:5] + results[6:])
    assert len(healed["registration_ids"]) == 2  # the paid attendees are never stranded
    total = await holding(api, ev["id"])
    assert won <= 5 and total == won + 2
    assert healed["overbooked"] is (total > 5)


async def test_a_cancellation_before_its_confirmation_is_kept(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    body = confirmed(ev["id"], 2, total="30")
    early = await fact(admin, "cancelled", {"order_id": body["order_id"]})
    assert early["outcome"] == "applied" and early["registration_ids"] == []
    minted = await fact(admin, "confirmed", body)
    assert minted["outcome"] == "applied" and len(minted["registration_ids"]) == 2
    assert [tuple(r)[1:3] for r in await rows(api, body["order_id"])] == [("cancel", "to_pay")] * 2
    assert await holding(api, ev["id"]) == 0  # born cancelled: no seat held
    healed = await fact(admin, "paid", {"order_id": body["order_id"]})  # a late payment heals
    assert sorted(healed["registration_ids"]) == sorted(minted["registration_ids"])
    assert [tuple(r)[1:3] for r in await rows(api, body["order_id"])] == [("open", "sold")] * 2


async def test_a_reconfirmed_order_supersedes_its_cancelled_rows(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    body = confirmed(ev["id"], 2, total="30")
    old = await fact(admin, "confirmed", {**body, "delivery_id": "c-1"})
    await fact(admin, "cancelled", {"order_id": body["order_id"]})
    new = await fact(admin, "confirmed", {**body, "delivery_id": "c-2"})
    assert await holding(api, ev["id"]) == 2
    healed = await fact(admin, "paid", {"order_id": body["order_id"]})
    assert sorted(healed["registration_ids"]) == sorted(new["registration_ids"])
    assert sorted(healed["skipped_ids"]) == sorted(old["registration_ids"])
    assert await holding(api, ev["id"]) == 2  # never the old and the new attendees together


async def test_delivery_keys_are_per_company(api: Api, admin):
    one, two = uuid.uuid4(), uuid.uuid4()
    answers = []
    for company in (one, two):
        ev = await make_event(admin, company_id=str(company))
        token = await api.token("seam:write", company=company)
        body = confirmed(ev["id"], 1, total="0", delivery_id="same-key")
        r = await api.client.post(f"{SEAM}/confirmed", json=body, headers=token)
        answers.append(r.json())
    assert [a["outcome"] for a in answers] == ["applied", "applied"]
    assert answers[0]["registration_ids"] != answers[1]["registration_ids"]
