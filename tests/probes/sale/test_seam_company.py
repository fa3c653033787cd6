"""Seam orders are company-scoped (issue 26): an order is (company, order id). Each probe
is the attack as the issue wrote it, with two companies' tokens and one order id, through
the real HTTP app on a real PostgreSQL; the platform actor acts on the company of the
order's events."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import asyncpg
import httpx

from tests.probes.helpers import Api, make_event

SEAM = "/admin/seam/orders"


class Company:
    """A company's seam client (its own `seam:write` token) and its id."""

    def __init__(self, api: Api, company_id: uuid.UUID, headers: dict[str, str]) -> None:
        self.api, self.id, self.headers = api, company_id, headers

    async def post(self, verb: str, body: dict[str, Any]) -> httpx.Response:
        return await self.api.client.post(f"{SEAM}/{verb}", json=body, headers=self.headers)

    async def fact(self, verb: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await self.post(verb, body)
        assert r.status_code == 200, r.text
        return dict(r.json())


async def company(api: Api) -> Company:
    company_id = uuid.uuid4()
    return Company(api, company_id, await api.token("seam:write", company=company_id))


async def platform_fact(admin: httpx.AsyncClient, verb: str, body: dict[str, Any]) -> dict:
    r = await admin.post(f"{SEAM}/{verb}", json=body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def line(event_id: str, n: int = 2, *, line_id: str | None = None, **over: Any) -> dict:
    people = [{"name": f"P {i}", "email": f"p{i}@example.org"} for i in range(n)]
    return {
        "line_id": line_id or str(uuid.uuid4()),
        "event_id": event_id,
        "attendees": people,
        **over,
    }


def confirmed(order_id: str, *lines: dict[str, Any], total: str = "30.00") -> dict:
    return {"order_id": order_id, "amount_total": total, "currency": "EUR", "lines": list(lines)}


async def booth(admin: httpx.AsyncClient, event_id: str) -> str:
    category = await admin.post("/admin/booth-categories", json={"name": "Stand"})
    assert category.status_code == 201, category.text
    body = {"event_id": event_id, "name": "B1", "booth_category_id": category.json()["id"]}
    r = await admin.post("/admin/booths", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


async def states(api: Api, ids: list[str]) -> list[tuple[str, str]]:
    async with api.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT state::text, sale_status::text FROM event.registrations"
            " WHERE id = ANY($1::uuid[]) ORDER BY id",
            [uuid.UUID(i) for i in ids],
        )
    return [(r["state"], r["sale_status"]) for r in rows]


async def is_paid(admin: httpx.AsyncClient, booth_id: str) -> bool:
    return bool((await admin.get(f"/admin/booths/{booth_id}")).json()["is_paid"])


async def inbox_rows(api: Api) -> int:
    async with api.pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM event.seam_inbox"))


# --- the attacks of the issue ------------------------------------------------------------------


async def test_a_companys_paid_fact_never_latches_another_companys_booth(api: Api, admin):
    a, b = await company(api), await company(api)
    ev = await make_event(admin, company_id=str(b.id))
    stand = await booth(admin, ev["id"])
    order = str(uuid.uuid4())
    minted = await b.fact("confirmed", confirmed(order, line(ev["id"], 2, booth_ids=[stand])))
    assert minted["outcome"] == "applied"
    attack = await a.fact("paid", {"order_id": order})
    assert attack["outcome"] == "applied" and attack["registration_ids"] == []
    assert await is_paid(admin, stand) is False  # the one-way latch was not touched
    assert await states(api, minted["registration_ids"]) == [("draft", "to_pay")] * 2
    # B's own paid fact is not answered by A's: it applies, and latches B's booth
    healed = await b.fact("paid", {"order_id": order})
    assert healed["outcome"] == "applied"
    assert sorted(healed["registration_ids"]) == sorted(minted["registration_ids"])
    assert await is_paid(admin, stand) is True


async def test_a_companys_cancelled_fact_never_makes_another_companys_attendees_born_cancelled(
    api: Api, admin
):
    a, b = await company(api), await company(api)
    ev = await make_event(admin, company_id=str(b.id), seats_max=10)
    order = str(uuid.uuid4())
    attack = await a.fact("cancelled", {"order_id": order})
    assert attack["outcome"] == "applied" and attack["registration_ids"] == []
    minted = await b.fact("confirmed", confirmed(order, line(ev["id"], 3)))
    assert minted["outcome"] == "applied"
    assert await states(api, minted["registration_ids"]) == [("draft", "to_pay")] * 3
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()["event"]
    assert seats["held"] == 3  # born holding their seats, not cancelled
    # nor does A's cancellation after B's confirmation reach B's attendees
    again = await a.fact("cancelled", {"order_id": order, "delivery_id": "a-cancel-2"})
    assert again["outcome"] == "applied" and again["registration_ids"] == []
    assert await states(api, minted["registration_ids"]) == [("draft", "to_pay")] * 3


async def test_one_order_id_used_by_two_companies_is_two_independent_orders(api: Api, admin):
    a, b = await company(api), await company(api)
    ev_a = await make_event(admin, company_id=str(a.id), seats_max=10)
    ev_b = await make_event(admin, company_id=str(b.id), seats_max=10)
    shared = await make_event(admin, seats_max=10)  # company null: both companies see it
    booth_a, booth_b = await booth(admin, ev_a["id"]), await booth(admin, ev_b["id"])
    order, line_id = str(uuid.uuid4()), str(uuid.uuid4())  # one order id, one line id
    mint_a = await a.fact(
        "confirmed",
        confirmed(
            order, line(ev_a["id"], 2, line_id=line_id, booth_ids=[booth_a]), line(shared["id"], 1)
        ),
    )
    mint_b = await b.fact(
        "confirmed",
        confirmed(
            order, line(ev_b["id"], 2, line_id=line_id, booth_ids=[booth_b]), line(shared["id"], 1)
        ),
    )
    assert (mint_a["outcome"], mint_b["outcome"]) == ("applied", "applied")
    assert mint_a["delivery_key"] == mint_b["delivery_key"] == f"confirmed:{order}"
    rows_a, rows_b = mint_a["registration_ids"], mint_b["registration_ids"]
    assert len(rows_a) == len(rows_b) == 3 and not set(rows_a) & set(rows_b)

    paid = await a.fact("paid", {"order_id": order})
    assert sorted(paid["registration_ids"]) == sorted(rows_a)  # the shared event's row too
    assert await states(api, rows_a) == [("open", "sold")] * 3
    assert await states(api, rows_b) == [("draft", "to_pay")] * 3  # B's, on the shared event too
    assert (await is_paid(admin, booth_a), await is_paid(admin, booth_b)) == (True, False)

    cancelled = await b.fact("cancelled", {"order_id": order})
    assert sorted(cancelled["registration_ids"]) == sorted(rows_b)
    assert await states(api, rows_b) == [("cancel", "to_pay")] * 3
    assert await states(api, rows_a) == [("open", "sold")] * 3
    # each company's rows are listed under the order id; each company's order row is its own
    async with api.pool.acquire() as conn:
        orders = await conn.fetch(
            "SELECT company_id, state::text FROM event.sale_orders WHERE order_id = $1"
            " ORDER BY company_key",
            uuid.UUID(order),
        )
    assert {(r["company_id"], r["state"]) for r in orders} == {(a.id, "sale"), (b.id, "cancel")}
    # reading the rows by order id, each company sees its own order's rows only, the one on
    # the shared event included (the other's row there is visible to it, but not its order)
    for who, rows in ((a, rows_a), (b, rows_b)):
        reader = await api.token("registration:read", company=who.id)
        listed = await api.client.get(
            "/admin/registrations", params={"sale_order_id": order}, headers=reader
        )
        assert listed.status_code == 200, listed.text
        assert sorted(x["id"] for x in listed.json()["items"]) == sorted(rows)


async def test_another_companys_event_in_a_fact_answers_like_a_missing_event(api: Api, admin):
    a, b = await company(api), await company(api)
    ours = await make_event(admin, company_id=str(a.id))
    theirs = await make_event(admin, company_id=str(b.id), seats_max=5)
    their_booth = await booth(admin, theirs["id"])
    missing = str(uuid.uuid4())
    line_id = str(uuid.uuid4())

    def shapes(event_id: str) -> list[dict[str, Any]]:
        return [
            confirmed(str(uuid.uuid4()), line(event_id, 1, line_id=line_id)),  # one line
            confirmed(  # several lines: the events are locked first
                str(uuid.uuid4()), line(ours["id"], 1), line(event_id, 1, line_id=line_id)
            ),
            confirmed(  # a booth-only line
                str(uuid.uuid4()), line(event_id, 0, line_id=line_id, booth_ids=[their_booth])
            ),
        ]

    for foreign, unknown in zip(shapes(theirs["id"]), shapes(missing), strict=True):
        answered = await a.fact("confirmed", foreign)
        expected = await a.fact("confirmed", unknown)
        assert answered["outcome"] == expected["outcome"] == "not_found"
        assert answered["registration_ids"] == [] and answered["skipped_ids"] == []
        detail = dict(answered["detail"])
        if "event_id" in detail:
            assert detail.pop("event_id") == theirs["id"]
            assert expected["detail"].pop("event_id") == missing
        assert detail == expected["detail"]
    # B's event kept nothing: no seat, no booking
    seats = (await admin.get(f"/admin/events/{theirs['id']}/seats")).json()["event"]
    assert seats["taken"] == 0
    assert (await admin.get(f"/admin/booths/{their_booth}")).json()["bookings"] == []
    # B's booth named on A's own event answers like an unknown booth
    named = await a.fact(
        "confirmed",
        confirmed(str(uuid.uuid4()), line(ours["id"], 1, line_id=line_id, booth_ids=[their_booth])),
    )
    unknown = await a.fact(
        "confirmed",
        confirmed(str(uuid.uuid4()), line(ours["id"], 1, line_id=line_id, booth_ids=[missing])),
    )
    assert named["outcome"] == unknown["outcome"] == "booth_not_found"
    assert named["detail"].pop("booth_id") == their_booth
    assert unknown["detail"].pop("booth_id") == missing
    assert named["detail"] == unknown["detail"]


async def test_concurrent_deliveries_of_one_key_by_two_companies_apply_once_each(api: Api, admin):
    a, b = await company(api), await company(api)
    ev_a = await make_event(admin, company_id=str(a.id), seats_max=50)
    ev_b = await make_event(admin, company_id=str(b.id), seats_max=50)
    order = str(uuid.uuid4())
    body_a = {**confirmed(order, line(ev_a["id"], 2)), "delivery_id": "same-delivery"}
    body_b = {**confirmed(order, line(ev_b["id"], 2)), "delivery_id": "same-delivery"}
    answers = await asyncio.gather(
        *(a.fact("confirmed", body_a) for _ in range(15)),
        *(b.fact("confirmed", body_b) for _ in range(15)),
    )
    for mine in (answers[:15], answers[15:]):
        assert sorted(x["outcome"] for x in mine) == ["already_applied"] * 14 + ["applied"]
        assert len({tuple(x["registration_ids"]) for x in mine}) == 1
    async with api.pool.acquire() as conn:
        per_event = await conn.fetch(
            "SELECT event_id, count(*) AS n FROM event.registrations WHERE sale_order_id = $1"
            " GROUP BY event_id",
            uuid.UUID(order),
        )
    assert {(str(r["event_id"]), r["n"]) for r in per_event} == {(ev_a["id"], 2), (ev_b["id"], 2)}


# --- the platform actor: the company of the order's events -------------------------------------


async def test_the_platform_acts_on_the_order_of_its_events_company(api: Api, admin):
    a, b = await company(api), await company(api)
    ev_a = await make_event(admin, company_id=str(a.id))
    ev_b = await make_event(admin, company_id=str(b.id))
    stand = await booth(admin, ev_a["id"])
    order = str(uuid.uuid4())
    minted = await a.fact("confirmed", confirmed(order, line(ev_a["id"], 2, booth_ids=[stand])))
    paid = await platform_fact(admin, "paid", {"order_id": order})  # on A's order
    assert sorted(paid["registration_ids"]) == sorted(minted["registration_ids"])
    assert await is_paid(admin, stand) is True
    # the platform's fact is A's fact: A's redelivery of it is answered, not applied again
    again = await a.fact("paid", {"order_id": order})
    assert again["outcome"] == "already_applied"
    assert again["registration_ids"] == paid["registration_ids"]
    # and the other way round: the platform's confirmed fact on B's events is B's order
    other = str(uuid.uuid4())
    by_platform = await platform_fact(admin, "confirmed", confirmed(other, line(ev_b["id"], 1)))
    assert by_platform["outcome"] == "applied"
    redelivered = await b.fact("confirmed", confirmed(other, line(ev_b["id"], 1)))
    assert redelivered["outcome"] == "already_applied"
    assert redelivered["registration_ids"] == by_platform["registration_ids"]
    assert (await a.fact("paid", {"order_id": other}))["registration_ids"] == []  # not A's
    assert (await b.fact("paid", {"order_id": other}))["registration_ids"] == by_platform[
        "registration_ids"
    ]


async def test_a_platform_fact_whose_order_changed_meanwhile_is_busy_then_applies(
    api: Api, admin, monkeypatch
):
    """The platform's fact is decided to be about a platform order (no order of the id
    yet); A confirms its order of that id before the fact's transaction runs. The fact is
    not applied to the stale choice: 503 busy, nothing recorded; the retry acts on A's."""
    from events_svc.verbs.sale import inbox

    a = await company(api)
    ev = await make_event(admin, company_id=str(a.id))
    order = str(uuid.uuid4())
    opened, raced = inbox.transaction, []

    @contextlib.asynccontextmanager
    async def racing(pool: Any) -> Any:
        if not raced:  # after the decision, before the fact's transaction: A confirms
            raced.append({})
            raced[0] = await a.fact("confirmed", confirmed(order, line(ev["id"], 1)))
        async with opened(pool) as conn:
            yield conn

    monkeypatch.setattr(inbox, "transaction", racing)
    r = await admin.post(f"{SEAM}/paid", json={"order_id": order})
    assert (r.status_code, r.json()["error"]["code"]) == (503, "busy")
    async with api.pool.acquire() as conn:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM event.seam_inbox WHERE external_id = $1", f"paid:{order}"
            )
            == 0
        )
    paid = await platform_fact(admin, "paid", {"order_id": order})  # the retry: A's order
    assert paid["registration_ids"] == raced[0]["registration_ids"]


async def test_concurrent_deliveries_by_a_company_and_the_platform_apply_once(api: Api, admin):
    a = await company(api)
    ev = await make_event(admin, company_id=str(a.id), seats_max=50)
    body = confirmed(str(uuid.uuid4()), line(ev["id"], 2))
    answers = await asyncio.gather(
        *(a.fact("confirmed", body) for _ in range(10)),
        *(platform_fact(admin, "confirmed", body) for _ in range(10)),
    )
    assert sorted(x["outcome"] for x in answers) == ["already_applied"] * 19 + ["applied"]
    assert len({tuple(x["registration_ids"]) for x in answers}) == 1


async def test_the_platform_cannot_confirm_one_order_over_two_companies_events(api: Api, admin):
    a, b = await company(api), await company(api)
    ev_a = await make_event(admin, company_id=str(a.id))
    ev_b = await make_event(admin, company_id=str(b.id))
    body = confirmed(str(uuid.uuid4()), line(ev_a["id"], 1), line(ev_b["id"], 1))
    r = await admin.post(f"{SEAM}/confirmed", json=body)
    assert r.status_code == 422 and r.json()["error"]["code"] == "company_not_allowed"
    assert r.json()["error"]["field"] == "lines"
    assert await inbox_rows(api) == 0  # nothing recorded: the fact names no one order


async def test_the_platform_cannot_pick_between_two_companies_orders_of_one_id(api: Api, admin):
    a, b = await company(api), await company(api)
    ev_a = await make_event(admin, company_id=str(a.id))
    ev_b = await make_event(admin, company_id=str(b.id))
    order = str(uuid.uuid4())
    mint_a = await a.fact("confirmed", confirmed(order, line(ev_a["id"], 1)))
    mint_b = await b.fact("confirmed", confirmed(order, line(ev_b["id"], 1)))
    before = await inbox_rows(api)
    for verb in ("paid", "cancelled"):
        r = await admin.post(f"{SEAM}/{verb}", json={"order_id": order})
        assert r.status_code == 409 and r.json()["error"]["code"] == "conflict"
        assert r.json()["error"]["field"] == "order_id"
    assert await inbox_rows(api) == before
    ids = mint_a["registration_ids"] + mint_b["registration_ids"]
    assert await states(api, ids) == [("draft", "to_pay")] * 2


async def test_the_platforms_early_paid_fact_becomes_the_companys_when_it_confirms(api: Api, admin):
    a = await company(api)
    ev = await make_event(admin, company_id=str(a.id))
    order = str(uuid.uuid4())
    early = await platform_fact(admin, "paid", {"order_id": order})
    assert early["outcome"] == "applied" and early["registration_ids"] == []
    minted = await platform_fact(admin, "confirmed", confirmed(order, line(ev["id"], 2)))
    assert await states(api, minted["registration_ids"]) == [("open", "sold")] * 2
    # the kept fact moved to A's order with its key: every redelivery is answered
    assert (await platform_fact(admin, "paid", {"order_id": order}))["outcome"] == (
        "already_applied"
    )
    assert (await a.fact("paid", {"order_id": order}))["outcome"] == "already_applied"
    async with api.pool.acquire() as conn:
        owners = await conn.fetch(
            "SELECT company_id FROM event.sale_orders WHERE order_id = $1", uuid.UUID(order)
        )
    assert [r["company_id"] for r in owners] == [a.id]


async def test_an_officers_booking_of_an_order_is_latched_only_by_that_companys_paid_fact(
    api: Api, admin
):
    a, b = await company(api), await company(api)
    shared = await make_event(admin)  # a booth both companies see
    stand = await booth(admin, shared["id"])
    order, line_id = str(uuid.uuid4()), str(uuid.uuid4())
    officer_b = await api.token("booth:write", "event:read", company=b.id)
    r = await api.client.post(
        f"/admin/booths/{stand}/bookings",
        json={"order_id": order, "order_line_id": line_id},
        headers=officer_b,
    )
    assert r.status_code == 201, r.text
    # A's order line of the same id is A's: it books, and is not refused as B's
    other = await booth(admin, (await make_event(admin))["id"])
    officer_a = await api.token("booth:write", "event:read", company=a.id)
    r = await api.client.post(
        f"/admin/booths/{other}/bookings",
        json={"order_id": order, "order_line_id": line_id},
        headers=officer_a,
    )
    assert r.status_code == 201, r.text
    await a.fact("paid", {"order_id": order})
    assert (await is_paid(admin, stand), await is_paid(admin, other)) == (False, True)
    await b.fact("paid", {"order_id": order})
    assert await is_paid(admin, stand) is True


async def test_the_order_keys_hold_in_the_database(api: Api, admin):
    """The walls: one order row per (company, order id), one claim per (company, line)."""
    a = await company(api)
    order = uuid.uuid4()
    async with api.pool.acquire() as conn:
        insert = (
            "INSERT INTO event.sale_orders (company_id, order_id, state) VALUES ($1, $2, 'sent')"
        )
        await conn.execute(insert, None, order)
        await conn.execute(insert, a.id, order)
        for company_id in (None, a.id):
            try:
                await conn.execute(insert, company_id, order)
            except asyncpg.UniqueViolationError as exc:
                assert exc.constraint_name == "sale_orders_pkey"
            else:
                raise AssertionError("a second order row of one (company, order id)")
