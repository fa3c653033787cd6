"""The waiting list through the real app: joining and its refusals, the queue's order,
offers made of held drafts, accept, decline, expiry (the clock moved through the
database), the queue before the intake, the operators' routes, masking and the fence."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc.capabilities import MY_TICKETS, WAITLIST, CapabilityCodec
from events_svc.settings import Settings
from tests.probes.helpers import (
    BASE,
    Api,
    add_slot,
    add_ticket,
    company_client,
    heard_nothing_more,
    make_event,
    preview,
    start,
    until_lock_waiters,
)
from tests.probes.waitlist.kit import (
    SECRET,
    cancel,
    entries,
    fill,
    join,
    joined,
    link,
    listed_event,
    offer_pass,
    register,
    run_out,
    seats_taken,
    waitlist_settings,
)


@pytest.fixture
def settings(db_url: str) -> Settings:
    return waitlist_settings(db_url)


async def seat_view(admin: httpx.AsyncClient, event_id: str) -> dict[str, Any]:
    return dict((await admin.get(f"/admin/events/{event_id}/seats")).json()["event"])


async def status_of(public: httpx.AsyncClient, entry: dict[str, Any]) -> dict[str, Any]:
    r = await public.get(link(entry["status_url"]))
    assert r.status_code == 200, r.text
    return dict(r.json())


# --- joining ---------------------------------------------------------------------------


async def test_joining_refusals_follow_the_contract(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 2)
    eid = event["id"]
    r = await join(public, eid, "early@example.org")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_needed")
    await fill(public, eid, 2)
    first = await joined(public, eid, "ann@example.org")
    assert first["position"] == 1 and first["status"] == "waiting"
    assert first["status_url"].startswith(f"{BASE}/public/waitlist/")
    again = await join(public, eid, "ANN@example.org")  # the same address, any case
    assert (again.status_code, again.json()["error"]["code"]) == (409, "waitlist_already_joined")
    assert "ann" not in again.text.lower()
    second = await joined(public, eid, "bob@example.org", seats=2)
    assert second["position"] == 2
    # the intake's allowlist and bounds
    for body, code in (
        ({"name": "X", "email": "x@example.org", "seats": 0}, "validation_failed"),
        ({"name": "X", "email": "x@example.org", "seats": 31}, "validation_failed"),
        ({"name": "X", "email": "not-an-email"}, None),
        ({"name": "X", "email": "x@example.org", "partner_id": str(uuid.uuid4())}, "unknown_field"),
        ({"name": "X", "email": "x@example.org", "state": "open"}, "unknown_field"),
        ({"name": "", "email": "x@example.org"}, "validation_failed"),
        ({"name": "X", "email": "x@example.org", "phone": "call me"}, None),
    ):
        r = await public.post(f"/intake/{eid}/waitlist", json=body)
        assert r.status_code == 422, (body, r.text)
        if code is not None:
            assert r.json()["error"]["code"] == code, (body, r.text)
    r = await join(public, eid, "eleven@example.org", seats=11)  # 1-10 without a ticket
    assert (r.status_code, r.json()["error"]["code"]) == (422, "per_order_cap_exceeded")
    # the list is off
    r = await admin.put(f"/admin/events/{eid}/waitlist-settings", json={"enabled": False})
    assert r.json() == {
        "event_id": eid,
        "enabled": False,
        "offer_hours": 48,
        "offer_template_id": None,
    }
    r = await join(public, eid, "late@example.org")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_disabled")
    # an unpublished event by id answers as a missing one: the uniform 404
    hidden = await make_event(admin, seats_max=1)
    r = await join(public, hidden["id"], "h@example.org")
    assert (r.status_code, r.json()["error"]["code"]) == (404, "event_not_published")
    missing = await join(public, str(uuid.uuid4()), "m@example.org")
    assert missing.status_code == 404 and missing.json() == r.json()


async def test_a_ticket_and_slot_scope_is_checked_as_the_intake_checks_it(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 2, is_multi_slots=True)
    eid = event["id"]
    slot = await add_slot(admin, eid)
    ticket = await add_ticket(admin, eid, name="Standard", limit_max_per_order=2)
    r = await join(public, eid, "s@example.org")
    assert (r.status_code, r.json()["error"]["code"]) == (422, "slot_required")
    r = await join(public, eid, "s@example.org", event_slot_id=str(uuid.uuid4()))
    assert (r.status_code, r.json()["error"]["code"]) == (422, "slot_not_in_event")
    scope = {"event_slot_id": slot["id"], "event_ticket_id": ticket["id"]}
    r = await join(public, eid, "s@example.org", **scope)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_needed")
    r = await register(public, eid, "taker@example.org", n=2, **scope)
    assert r.status_code == 201, r.text
    r = await join(public, eid, "s@example.org", seats=3, **scope)
    assert (r.status_code, r.json()["error"]["code"]) == (422, "per_order_cap_exceeded")
    entry = await joined(public, eid, "s@example.org", seats=2, **scope)
    assert entry["position"] == 1
    # the same address for another ticket is another queue
    other = await add_ticket(admin, eid, name="Other")
    other_entry = await joined(
        public, eid, "s@example.org", event_slot_id=slot["id"], event_ticket_id=other["id"]
    )
    assert other_entry["position"] == 1


async def test_joining_is_throttled_like_the_intake(
    db_url: str, settings: Settings, pool: asyncpg.Pool
) -> None:
    from events_svc import create_app

    tight = dataclasses.replace(settings, rate_limit_ip="3/minute")
    app = create_app(tight)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE, headers=await api.token("*")
        ) as admin:
            event = await listed_event(admin, 1)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=BASE
        ) as public:
            codes = [
                (await join(public, event["id"], f"t{i}@example.org")).status_code for i in range(5)
            ]
        await api.client.aclose()
    assert codes[:3] == [409, 409, 409] and codes[3:] == [429, 429]


# --- the queue's order and the offers ----------------------------------------------------


async def test_offers_go_in_queue_order_and_a_bigger_entry_waits_for_its_seats(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 5)
    eid = event["id"]
    taken = await fill(public, eid, 5)
    queue = []
    for i in range(10):
        queue.append(await joined(public, eid, f"q{i}@example.org", seats=2 if i == 1 else 1))
    assert [e["position"] for e in queue] == list(range(1, 11))
    offered_order: list[int] = []
    for n, rid in enumerate(taken):
        await cancel(admin, rid)
        summary = await offer_pass(admin)
        assert summary["offers_made"] == 1, (n, summary)
        rows = await entries(pool, eid)
        offered_now = [i for i, row in enumerate(rows) if row["status"] == "offered"]
        new = [i for i in offered_now if i not in offered_order]
        assert len(new) == 1
        offered_order.extend(new)
        assert await seats_taken(pool, eid) == 5  # an offer holds the freed seat
    # entry 1 (two seats) waited while only one seat was free each time: the later,
    # smaller entries were served in order meanwhile, and it kept its place
    assert offered_order == [0, 2, 3, 4, 5]
    rows = await entries(pool, eid)
    assert rows[1]["status"] == "waiting"
    waiting = await status_of(public, queue[1])
    assert waiting["status"] == "waiting" and waiting["position"] == 1
    assert (await status_of(public, queue[6]))["position"] == 2
    view = await seat_view(admin, eid)
    assert (view["reserved"], view["held"], view["taken"], view["available"]) == (0, 5, 5, 0)
    # each offer is one held draft per seat, of origin waitlist, with the offer's deadline
    for row in rows:
        if row["status"] == "offered":
            assert len(row["registration_ids"]) == row["seats"]
            regs = await pool.fetch(
                "SELECT state::text, state_origin::text, hold_expires_at, name, email"
                " FROM event.registrations WHERE id = ANY($1::uuid[])",
                row["registration_ids"],
            )
            assert [(r["state"], r["state_origin"]) for r in regs] == [("draft", "waitlist")]
            assert regs[0]["hold_expires_at"] == row["offer_expires_at"]
            assert regs[0]["email"] == row["email"]


async def test_an_offer_of_several_seats_names_the_guests(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 3)
    taken = await fill(public, event["id"], 3)
    entry = await joined(public, event["id"], "group@example.org", seats=3, name="Grace Hopper")
    for rid in taken:
        await cancel(admin, rid)
    assert (await offer_pass(admin))["offers_made"] == 1
    (row,) = await entries(pool, event["id"])
    names = await pool.fetch(
        "SELECT name, email FROM event.registrations WHERE id = ANY($1::uuid[]) ORDER BY name",
        row["registration_ids"],
    )
    assert [r["name"] for r in names] == [
        "Grace Hopper",
        "Grace Hopper (guest 1)",
        "Grace Hopper (guest 2)",
    ]
    assert {r["email"] for r in names} == {"group@example.org"}
    status = await status_of(public, entry)
    assert status["status"] == "offered" and status["seats"] == 3
    assert status["offer_expires_at"] is not None and status["position"] is None


async def test_an_entry_joined_with_control_characters_before_they_were_refused_is_offered(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    """Names with control characters are refused since; an entry that holds one (joined
    before) keeps its place: its offer is made, the drafts' names written without them."""
    event = await listed_event(admin, 2)
    taken = await fill(public, event["id"], 2)
    await joined(public, event["id"], "old@example.org", seats=2, name="Old Timer")
    await pool.execute(
        "UPDATE event.waitlist_entry SET name = $2 WHERE event_id = $1",
        uuid.UUID(event["id"]),
        "Old\x1b[31m Timer\x07",
    )
    for rid in taken:
        await cancel(admin, rid)
    assert (await offer_pass(admin))["offers_made"] == 1
    (row,) = await entries(pool, event["id"])
    names = await pool.fetch(
        "SELECT name FROM event.registrations WHERE id = ANY($1::uuid[]) ORDER BY name",
        row["registration_ids"],
    )
    assert [r["name"] for r in names] == ["Old[31m Timer", "Old[31m Timer (guest 1)"]


async def test_accepting_opens_the_held_drafts_and_arms_them(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool, api: Api
) -> None:
    event = await listed_event(admin, 1)
    eid = event["id"]
    # an after-subscription mail line: an accepted attendee is armed like any new one
    tpl = await admin.post(
        "/admin/templates", json={"name": "Welcome", "subject": "Hi", "body": "Welcome"}
    )
    line = await admin.post(
        "/admin/mails",
        json={
            "event_id": eid,
            "interval_nbr": 0,
            "interval_unit": "now",
            "interval_kind": "after_sub",
            "template_ref": tpl.json()["id"],
            "notification_channel": "mail",
        },
    )
    assert line.status_code == 201, line.text
    (rid,) = await fill(public, eid, 1)
    entry = await joined(public, eid, "acc@example.org", name="Ada Lovelace")
    await cancel(admin, rid)
    await offer_pass(admin)
    r = await public.post(link(entry["status_url"]) + "/accept")
    assert r.status_code == 200, r.text
    accepted = r.json()
    assert accepted["status"] == "accepted"
    assert accepted["my_tickets_url"].startswith(f"{BASE}/public/my-tickets/")
    again = await public.post(link(entry["status_url"]) + "/accept")
    assert again.status_code == 200 and again.json() == accepted  # twice: the same answer
    (row,) = await entries(pool, eid)
    reg = await pool.fetchrow(
        "SELECT state::text, state_origin::text, hold_expires_at, date_open, name"
        " FROM event.registrations WHERE id = $1",
        row["registration_ids"][0],
    )
    assert (reg["state"], reg["state_origin"], reg["hold_expires_at"]) == ("open", "waitlist", None)
    assert reg["date_open"] is not None and reg["name"] == "Ada Lovelace"
    tickets = await public.get(link(accepted["my_tickets_url"]), params={"format": "json"})
    assert tickets.status_code == 200
    assert [t["name"] for t in tickets.json()["registrations"]] == ["Ada Lovelace"]
    view = await seat_view(admin, eid)
    assert (view["reserved"], view["held"], view["available"]) == (1, 0, 0)
    assert (await status_of(public, entry))["my_tickets_url"] == accepted["my_tickets_url"]
    # armed: the after-subscription line now owes the attendee its mail
    await offer_pass(admin)
    sent = await pool.fetch(
        "SELECT recipient, subject FROM event.outbox_messages WHERE event_id = $1"
        " ORDER BY created_at",
        uuid.UUID(eid),
    )
    assert [(m["recipient"], m["subject"]) for m in sent][-1] == ("acc@example.org", "Hi")
    audit = await pool.fetch(
        "SELECT verb FROM event.event_audit_log WHERE object_id = $1 ORDER BY at",
        row["id"],
    )
    assert "waitlist_accepted" in [a["verb"] for a in audit]
    # declining an accepted entry is refused: the tickets stay
    r = await public.post(link(entry["status_url"]) + "/decline")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_offered")


async def test_declining_frees_the_seats_for_the_next_entry(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    eid = event["id"]
    (rid,) = await fill(public, eid, 1)
    first = await joined(public, eid, "first@example.org")
    second = await joined(public, eid, "second@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    # the second cannot accept what it was not offered
    r = await public.post(link(second["status_url"]) + "/accept")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_offered")
    r = await public.post(link(first["status_url"]) + "/decline")
    assert r.status_code == 200 and r.json()["status"] == "declined"
    again = await public.post(link(first["status_url"]) + "/decline")
    assert again.status_code == 200 and again.json()["status"] == "declined"
    rows = await entries(pool, eid)
    draft = await pool.fetchrow(
        "SELECT state::text FROM event.registrations WHERE id = $1", rows[0]["registration_ids"][0]
    )
    assert draft["state"] == "cancel"
    assert (await offer_pass(admin))["offers_made"] == 1
    assert (await status_of(public, second))["status"] == "offered"
    # a waiting entry may leave the queue too
    third = await joined(public, eid, "third@example.org")
    r = await public.post(link(third["status_url"]) + "/decline")
    assert r.json()["status"] == "declined"


async def test_an_expired_offer_is_released_and_the_next_entry_offered(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1, offer_hours=1)
    eid = event["id"]
    (rid,) = await fill(public, eid, 1)
    late = await joined(public, eid, "late@example.org")
    nxt = await joined(public, eid, "next@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    rows = await entries(pool, eid)
    assert rows[0]["offer_expires_at"] - rows[0]["offered_at"] == timedelta(hours=1)
    await run_out(pool, rows[0]["id"])
    # past the deadline, before the pass: the link says so and accepting is refused
    assert (await status_of(public, late))["status"] == "expired"
    r = await public.post(link(late["status_url"]) + "/accept")
    assert (r.status_code, r.json()["error"]["code"]) == (410, "waitlist_offer_expired")
    summary = await offer_pass(admin)
    assert (summary["offers_expired"], summary["offers_made"]) == (1, 1)
    rows = await entries(pool, eid)
    assert [r["status"] for r in rows] == ["expired", "offered"]
    cancelled = await pool.fetchrow(
        "SELECT state::text FROM event.registrations WHERE id = $1", rows[0]["registration_ids"][0]
    )
    assert cancelled["state"] == "cancel"
    reason = await pool.fetchval(
        "SELECT summary->>'reason' FROM event.event_audit_log"
        " WHERE object_id = $1 AND verb = 'registration_cancelled'",
        rows[0]["registration_ids"][0],
    )
    assert reason == "waitlist_offer_expired"
    r = await public.post(link(late["status_url"]) + "/accept")
    assert (r.status_code, r.json()["error"]["code"]) == (410, "waitlist_offer_expired")
    assert (await status_of(public, nxt))["status"] == "offered"
    assert await seats_taken(pool, eid) == 1


# --- the queue comes first ---------------------------------------------------------------


async def test_the_public_intake_waits_behind_the_queue_but_officers_do_not(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 3)
    eid = event["id"]
    taken = await fill(public, eid, 3)
    await joined(public, eid, "w@example.org", seats=1)
    await cancel(admin, taken[0])
    await cancel(admin, taken[1])  # two seats free, one waiting: the intake gets one
    r = await register(public, eid, "two@example.org", n=2)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    assert r.json()["error"]["available"] == 1
    r = await register(public, eid, "one@example.org")
    assert r.status_code == 201, r.text
    r = await register(public, eid, "none@example.org")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    # an officer is not held back by the queue
    r = await admin.post("/admin/registrations", json={"event_id": eid, "name": "Officer's guest"})
    assert r.status_code == 201, r.text
    assert await seats_taken(pool, eid) == 3
    # nothing is left for the waiting entry: the pass offers nothing
    assert (await offer_pass(admin))["offers_made"] == 0


async def test_the_combined_intake_applies_the_same_rule(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 10)
    eid = event["id"]
    taken = await fill(public, eid, 10)
    for i in range(4):
        await joined(public, eid, f"w{i}@example.org")
    for rid in taken[:6]:
        await cancel(admin, rid)
    answers = await asyncio.gather(
        *(register(public, eid, f"storm{i}@example.org") for i in range(12))
    )
    codes = sorted(a.status_code for a in answers)
    assert codes.count(201) == 2 and codes.count(409) == 10  # 6 free, 4 for the queue
    assert (await offer_pass(admin))["offers_made"] == 4
    assert await seats_taken(pool, eid) == 10


# --- links ---------------------------------------------------------------------------------


async def test_a_tampered_or_foreign_link_answers_the_uniform_404(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 1)
    await fill(public, event["id"], 1)
    entry = await joined(public, event["id"], "x@example.org")
    path = link(entry["status_url"])
    token = path.rsplit("/", 1)[1]
    codec = CapabilityCodec((SECRET,))
    other_purpose = codec.mint(
        MY_TICKETS, {"w": entry["waitlist_entry_id"], "e": event["id"]}, None
    )
    unknown = codec.mint(WAITLIST, {"w": str(uuid.uuid4()), "e": event["id"]}, None)
    wrong_event = codec.mint(
        WAITLIST, {"w": entry["waitlist_entry_id"], "e": str(uuid.uuid4())}, None
    )
    forged = CapabilityCodec(("another-secret-0123456789",)).mint(
        WAITLIST, {"w": entry["waitlist_entry_id"], "e": event["id"]}, None
    )
    bodies = set()
    for bad in (token[:-2] + "xx", other_purpose, unknown, wrong_event, forged, "x" * 3000):
        for method, suffix in (("GET", ""), ("POST", "/accept"), ("POST", "/decline")):
            r = await public.request(method, f"/public/waitlist/{bad}{suffix}")
            assert r.status_code == 404, (bad, suffix, r.text)
            bodies.add(r.text)
    assert len(bodies) == 1 and "event_not_published" in bodies.pop()
    assert (await public.get(path)).headers["cache-control"] == "no-store"


async def test_a_browser_gets_the_offer_page_and_its_buttons_work(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 1)
    (rid,) = await fill(public, event["id"], 1)
    entry = await joined(public, event["id"], "page@example.org")
    html = {"Accept": "text/html"}
    page = await public.get(link(entry["status_url"]), headers=html)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "number 1 in the queue" in page.text and "Leave the list" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    await cancel(admin, rid)
    await offer_pass(admin)
    page = await public.get(link(entry["status_url"]), headers=html)
    assert "Accept the offer" in page.text and "held for you until" in page.text
    r = await public.post(link(entry["status_url"]) + "/accept", headers=html)
    assert r.status_code == 303
    assert "/public/my-tickets/" in r.headers["location"]
    again = await public.post(link(entry["status_url"]) + "/decline", headers=html)
    assert again.status_code == 303 and "/public/waitlist/" in again.headers["location"]


# --- operators -----------------------------------------------------------------------------


async def test_the_settings_are_bounded_and_the_offer_template_checked(
    admin: httpx.AsyncClient,
) -> None:
    event = await make_event(admin)
    eid = event["id"]
    r = await admin.get(f"/admin/events/{eid}/waitlist-settings")
    assert r.json() == {
        "event_id": eid,
        "enabled": False,
        "offer_hours": 48,
        "offer_template_id": None,
    }
    for body in ({"offer_hours": 0}, {"offer_hours": 337}, {"enabled": []}, {"extra": 1}):
        r = await admin.put(f"/admin/events/{eid}/waitlist-settings", json=body)
        assert r.status_code == 422, (body, r.text)
    sms = await admin.post(
        "/admin/templates", json={"kind": "sms", "name": "S", "subject": "", "body": "Hi"}
    )
    r = await admin.put(
        f"/admin/events/{eid}/waitlist-settings", json={"offer_template_id": sms.json()["id"]}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (422, "channel_kind_mismatch")
    r = await admin.put(
        f"/admin/events/{eid}/waitlist-settings", json={"offer_template_id": str(uuid.uuid4())}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (422, "template_not_found")
    r = await admin.put(f"/admin/events/{uuid.uuid4()}/waitlist-settings", json={})
    assert r.status_code == 404


async def test_an_offer_template_renders_the_offer_links_and_deadline(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    body = (
        "{{ registration.name }}: {{ waitlist.seats }} seat(s) until {{ waitlist.expires_at }}"
        " accept {{ waitlist.offer_url }} decline {{ waitlist.decline_url }}"
    )
    tpl = await admin.post(
        "/admin/templates", json={"name": "Offer", "subject": "Your seat", "body": body}
    )
    assert tpl.status_code == 201, tpl.text
    event = await listed_event(admin, 1)
    eid = event["id"]
    r = await admin.put(
        f"/admin/events/{eid}/waitlist-settings",
        json={"enabled": True, "offer_hours": 24, "offer_template_id": tpl.json()["id"]},
    )
    assert r.status_code == 200 and r.json()["offer_template_id"] == tpl.json()["id"]
    (rid,) = await fill(public, eid, 1)
    entry = await joined(public, eid, "tpl@example.org", name="Tess")
    await cancel(admin, rid)
    await offer_pass(admin)
    mail = await pool.fetchrow(
        "SELECT recipient, subject, body FROM event.outbox_messages"
        " WHERE event_id = $1 AND recipient = 'tpl@example.org'",
        uuid.UUID(eid),
    )
    token = entry["status_url"].rsplit("/", 1)[1]
    assert mail["subject"] == "Your seat"
    assert mail["body"].startswith("Tess: 1 seat(s) until 20")
    assert (
        f"accept https://tickets.example.org/api/v1/event/public/waitlist/{token} " in mail["body"]
    )
    assert f"/public/waitlist/{token}?choice=decline" in mail["body"]


async def test_the_built_in_offer_mail_says_what_is_held_and_until_when(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 2)
    taken = await fill(public, event["id"], 2)
    await joined(public, event["id"], "builtin@example.org", seats=2, name="Bea")
    for rid in taken:
        await cancel(admin, rid)
    await offer_pass(admin)
    mail = await pool.fetchrow(
        "SELECT subject, body FROM event.outbox_messages WHERE recipient = 'builtin@example.org'"
    )
    assert mail["subject"] == "A seat is free for you: PyCon Lisbon"
    assert "Hello Bea," in mail["body"] and "2 seats are free for you" in mail["body"]
    assert "Europe/Lisbon" in mail["body"] and "Accept the offer: https://" in mail["body"]


async def test_operators_list_masked_offer_out_of_turn_and_remove(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool, api: Api
) -> None:
    event = await listed_event(admin, 2)
    eid = event["id"]
    taken = await fill(public, eid, 2)
    first = await joined(
        public, eid, "first@example.org", name="Fiona First", phone="+351912345678"
    )
    second = await joined(public, eid, "second@example.org", name="Sam Second")
    r = await admin.get(f"/admin/events/{eid}/waitlist")
    items = r.json()["items"]
    assert [(i["name"], i["email"], i["phone"], i["position"]) for i in items] == [
        ("F*** F***", "f***@example.org", "***78", 1),
        ("S*** S***", "s***@example.org", "", 2),
    ]
    full = await admin.get(f"/admin/events/{eid}/waitlist", params={"pii": "full"})
    assert full.json()["items"][0]["email"] == "first@example.org"
    reader = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app),
        base_url=BASE,
        headers=await api.token("registration:read"),
    )
    r = await reader.get(f"/admin/events/{eid}/waitlist", params={"pii": "full"})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "missing_scope")
    r = await reader.post(f"/admin/waitlist/{second['waitlist_entry_id']}/offer")
    assert r.status_code == 403
    await reader.aclose()
    # out of turn: no seat free yet
    r = await admin.post(f"/admin/waitlist/{second['waitlist_entry_id']}/offer")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    await cancel(admin, taken[0])
    r = await admin.post(f"/admin/waitlist/{second['waitlist_entry_id']}/offer")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "offered" and len(r.json()["registration_ids"]) == 1
    r = await admin.post(f"/admin/waitlist/{second['waitlist_entry_id']}/offer")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_entry_not_waiting")
    # removing an offered entry releases its seat
    r = await admin.delete(f"/admin/waitlist/{second['waitlist_entry_id']}")
    assert r.status_code == 200 and r.json()["status"] == "removed"
    assert (await status_of(public, second))["status"] == "removed"
    assert await seats_taken(pool, eid) == 1
    r = await admin.delete(f"/admin/waitlist/{second['waitlist_entry_id']}")
    assert r.status_code == 200 and r.json()["status"] == "removed"  # as it is
    listed = await admin.get(f"/admin/events/{eid}/waitlist", params={"status": "removed"})
    assert [i["id"] for i in listed.json()["items"]] == [second["waitlist_entry_id"]]
    assert (await offer_pass(admin))["offers_made"] == 1  # the first is served now
    assert (await status_of(public, first))["status"] == "offered"
    audit = await pool.fetch(
        "SELECT verb, summary::text AS summary FROM event.event_audit_log"
        " WHERE object_kind = 'waitlist_entry'"
    )
    verbs = {a["verb"] for a in audit}
    assert {"waitlist_joined", "waitlist_offered", "waitlist_removed"} <= verbs
    assert not any("example.org" in a["summary"] or "+351" in a["summary"] for a in audit)


async def test_a_foreign_company_sees_nothing_of_the_list(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, api: Api
) -> None:
    mine = uuid.uuid4()
    owner = await company_client(api, mine)
    event = await listed_event(owner, 1)
    await fill(public, event["id"], 1)
    entry = await joined(public, event["id"], "f@example.org")
    other = await company_client(api, uuid.uuid4())
    missing = uuid.uuid4()
    for method, path in (
        ("GET", f"/admin/events/{event['id']}/waitlist"),
        ("GET", f"/admin/events/{event['id']}/waitlist-settings"),
        ("PUT", f"/admin/events/{event['id']}/waitlist-settings"),
        ("POST", f"/admin/waitlist/{entry['waitlist_entry_id']}/offer"),
        ("DELETE", f"/admin/waitlist/{entry['waitlist_entry_id']}"),
        ("POST", f"/admin/waitlist/{missing}/offer"),
        ("DELETE", f"/admin/waitlist/{missing}"),
    ):
        r = await other.request(method, path, json={} if method == "PUT" else None)
        assert r.status_code == 404, (method, path, r.text)
    r = await owner.get(f"/admin/events/{event['id']}/waitlist")
    assert len(r.json()["items"]) == 1
    await owner.aclose()
    await other.aclose()


async def test_freeing_seats_where_somebody_waits_wakes_the_offer_pass(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, settings: Settings
) -> None:
    event = await listed_event(admin, 2)
    first, second = await fill(public, event["id"], 2)
    assert settings.database_url
    listener = await asyncpg.connect(settings.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("event_waitlist_due", lambda *a: heard.put_nowait(a[3]))
    try:
        await cancel(admin, first)  # nobody waits: no wake-up
        assert await heard_nothing_more(listener, heard, "event_waitlist_due")
        await fill(public, event["id"], 1)
        await joined(public, event["id"], "wake@example.org")
        await cancel(admin, second)  # a seat freed where somebody waits
        assert await asyncio.wait_for(heard.get(), 5) == event["id"]
        await offer_pass(admin)
        await joined(public, event["id"], "wake2@example.org")
        r = await admin.patch(f"/admin/events/{event['id']}", json={"seats_max": 3})
        assert r.status_code == 200, r.text  # a raised cap
        assert await asyncio.wait_for(heard.get(), 5) == event["id"]
    finally:
        await listener.close()


async def test_the_metrics_show_the_live_entries_and_the_offers_made(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 1)
    (rid,) = await fill(public, event["id"], 1)
    await joined(public, event["id"], "m1@example.org")
    await joined(public, event["id"], "m2@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    text = (await admin.get("/metrics")).text
    assert 'events_waitlist_entries{status="waiting"} 1.0' in text
    assert 'events_waitlist_entries{status="offered"} 1.0' in text
    assert 'events_waitlist_offers_total{result="offered"} 1.0' in text
    assert "m1@example.org" not in text


async def test_a_held_draft_reads_like_any_registration_with_its_hold(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    (rid,) = await fill(public, event["id"], 1)
    await joined(public, event["id"], "held@example.org", name="Hal Held")
    await cancel(admin, rid)
    await offer_pass(admin)
    (row,) = await entries(pool, event["id"])
    held = await admin.get(f"/admin/registrations/{row['registration_ids'][0]}")
    assert held.status_code == 200, held.text
    view = held.json()
    assert (view["state"], view["state_origin"], view["name"]) == ("draft", "waitlist", "H*** H***")
    assert view["hold_expires_at"] is not None
    listed = await admin.get("/admin/registrations", params={"event_id": event["id"]})
    assert listed.status_code == 200 and len(listed.json()["items"]) == 2


async def test_a_join_racing_a_cancel_never_leaves_the_freed_seat_idle(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, settings: Settings, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 2)
    first, _ = await fill(public, event["id"], 2)
    assert settings.database_url
    listener = await asyncpg.connect(settings.database_url)
    heard: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("event_waitlist_due", lambda *a: heard.put_nowait(a[3]))
    side = await asyncpg.connect(settings.database_url)
    try:
        # the same person's entry, not committed yet: the join waits on it after its read
        tx = side.transaction()
        await tx.start()
        await side.execute(
            "INSERT INTO event.waitlist_entry (event_id, seats, name, email)"
            " VALUES ($1, 1, 'Late', 'late@example.org')",
            uuid.UUID(event["id"]),
        )
        joining = asyncio.create_task(join(public, event["id"], "late@example.org"))
        await until_lock_waiters(pool, 1)  # the join waits on the uncommitted entry
        cancelling = asyncio.create_task(cancel(admin, first))
        await until_lock_waiters(pool, 2)  # the cancel waits on the join's event lock
        assert not joining.done()
        await tx.rollback()
        assert (await joining).status_code == 201
        await cancelling
        # whichever came first, the freed seat wakes the pass
        assert await asyncio.wait_for(heard.get(), 5) == event["id"]
    finally:
        await side.close()
        await listener.close()
    assert (await offer_pass(admin))["offers_made"] == 1


async def test_the_pass_is_due_within_a_minute_while_anyone_waits(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    from datetime import UTC, datetime

    from events_svc.verbs.waitlist import next_offer_due

    now = datetime.now(UTC)
    assert await next_offer_due(pool, now) is None
    event = await listed_event(admin, 1)
    await fill(public, event["id"], 1)
    await joined(public, event["id"], "due@example.org")
    assert await next_offer_due(pool, now) == now + timedelta(minutes=1)


# --- what the review of the first version found ---------------------------------------------


async def test_a_join_for_more_seats_than_a_cap_could_ever_hold_is_refused(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 5)
    await fill(public, event["id"], 5)
    r = await join(public, event["id"], "big@example.org", seats=6)
    assert r.status_code == 422
    error = r.json()["error"]
    assert (error["code"], error["field"], error["maximum"]) == (
        "per_order_cap_exceeded",
        "seats",
        5,
    )
    assert (await join(public, event["id"], "fits@example.org", seats=5)).status_code == 201


async def test_waiters_of_a_full_ticket_do_not_hold_back_another_ticket(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 10)
    eid = event["id"]
    a = await add_ticket(admin, eid, name="A", seats_max=2)
    b = await add_ticket(admin, eid, name="B")
    for i in range(2):
        r = await register(public, eid, f"a{i}@example.org", event_ticket_id=a["id"])
        assert r.status_code == 201, r.text
    await joined(public, eid, "wants-a@example.org", event_ticket_id=a["id"])
    # ticket B has 8 seats and nobody waits for them: register instead
    r = await join(public, eid, "b@example.org", event_ticket_id=b["id"])
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_needed")
    for i in range(8):  # A's waiter waits for A: B's intake takes every seat left
        r = await register(public, eid, f"b{i}@example.org", event_ticket_id=b["id"])
        assert r.status_code == 201, r.text
    assert await seats_taken(pool, eid) == 10
    # a waiter of A whose ticket has room holds its seat against B's intake
    listed = await listed_event(admin, 3)
    lid = listed["id"]
    a2 = await add_ticket(admin, lid, name="A", seats_max=2)
    b2 = await add_ticket(admin, lid, name="B")
    taken = [
        (await register(public, lid, f"x{i}@example.org", event_ticket_id=b2["id"])).json()
        for i in range(3)
    ]
    await joined(public, lid, "wants-a2@example.org", event_ticket_id=a2["id"])
    await cancel(admin, taken[0]["registration_id"])
    r = await register(public, lid, "late-b@example.org", event_ticket_id=b2["id"])
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    assert (await offer_pass(admin))["offers_made"] == 1


async def test_a_cancelled_event_closes_its_list_and_releases_its_offers(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    eid = event["id"]
    (rid,) = await fill(public, eid, 1)
    offered = await joined(public, eid, "o@example.org")
    waiting = await joined(public, eid, "w@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    operation = await preview(admin, eid, "cancellation")  # the event is cancelled
    await start(admin, operation)  # no attendee yet (the offer is a draft): done at once
    await offer_pass(admin)
    assert [row["status"] for row in await entries(pool, eid)] == ["removed", "removed"]
    assert (await status_of(public, offered))["status"] == "removed"
    assert (await status_of(public, waiting))["status"] == "removed"
    assert await seats_taken(pool, eid) == 0
    reason = await pool.fetchval(
        "SELECT summary->>'reason' FROM event.event_audit_log WHERE verb = 'registration_cancelled'"
        " AND event_id = $1 ORDER BY at DESC LIMIT 1",
        uuid.UUID(eid),
    )
    assert reason == "waitlist_event_closed"


async def test_accepting_an_offer_whose_seats_were_withdrawn_is_refused(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    (rid,) = await fill(public, event["id"], 1)
    entry = await joined(public, event["id"], "w@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    (row,) = await entries(pool, event["id"])
    await cancel(admin, str(row["registration_ids"][0]))  # an operator withdraws the seat
    r = await public.post(link(entry["status_url"]) + "/accept")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "waitlist_not_offered")


async def test_a_hold_that_ended_stops_counting_before_the_pass_sweeps_it(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    eid = event["id"]
    (rid,) = await fill(public, eid, 1)
    entry = await joined(public, eid, "w@example.org")
    await cancel(admin, rid)
    await offer_pass(admin)
    assert (await seat_view(admin, eid))["held"] == 1
    (row,) = await entries(pool, eid)
    await run_out(pool, row["id"])
    await pool.execute(
        "UPDATE event.registrations SET hold_expires_at = clock_timestamp() - interval '1 minute'"
        " WHERE id = ANY($1::uuid[])",
        row["registration_ids"],
    )
    view = await seat_view(admin, eid)
    assert (view["held"], view["available"]) == (0, 1)
    r = await register(public, eid, "walk-in@example.org")  # nobody waits: the seat is free
    assert r.status_code == 201, r.text
    r = await public.post(link(entry["status_url"]) + "/accept")
    assert (r.status_code, r.json()["error"]["code"]) == (410, "waitlist_offer_expired")
    assert (await offer_pass(admin))["offers_expired"] == 1
    assert await seats_taken(pool, eid) == 1


async def test_an_offer_never_outlasts_its_tickets_sale(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    from datetime import UTC, datetime

    end = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
    event = await listed_event(admin, 1)
    eid = event["id"]
    ticket = await add_ticket(admin, eid, name="Std", end_sale_datetime=end.isoformat())
    r = await register(public, eid, "t@example.org", event_ticket_id=ticket["id"])
    assert r.status_code == 201, r.text
    await joined(public, eid, "w@example.org", event_ticket_id=ticket["id"])
    await cancel(admin, r.json()["registration_id"])
    await offer_pass(admin)
    (row,) = await entries(pool, eid)
    assert row["status"] == "offered" and row["offer_expires_at"] == end


async def test_one_failing_event_does_not_stop_the_pass_for_the_others(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    from datetime import UTC, datetime

    from events_svc.loops import offer_options
    from events_svc.verbs.waitlist import run_offer_pass
    from tests.probes.helpers import ports

    held, served = await listed_event(admin, 1), await listed_event(admin, 1)
    for event in (held, served):
        (rid,) = await fill(public, event["id"], 1)
        await joined(public, event["id"], f"w-{event['id'][:6]}@example.org")
        await cancel(admin, rid)
    assert settings.database_url
    blocker = await asyncpg.connect(settings.database_url)
    try:
        async with blocker.transaction():  # holds one event's row past the lock timeout
            await blocker.execute(
                "SELECT 1 FROM event.events WHERE id = $1 FOR UPDATE", uuid.UUID(held["id"])
            )
            summary = await run_offer_pass(
                pool, ports(pool), offer_options(settings), datetime.now(UTC)
            )
    finally:
        await blocker.close()
    assert (summary.failed, summary.offered) == (1, 1)
    assert [r["status"] for r in await entries(pool, served["id"])] == ["offered"]
    assert [r["status"] for r in await entries(pool, held["id"])] == ["waiting"]


async def test_an_event_whose_offers_fail_backs_off_alone_and_says_so_once(
    admin: httpx.AsyncClient,
    public: httpx.AsyncClient,
    pool: asyncpg.Pool,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fault in one event's offer (its entry cannot be written) backs that event off
    (5 s, then 10 s: `backoff.OFFERS`), logged once as an error; the other event's offer
    is made at once, a pass during the back-off leaves the failing event alone and logs
    nothing, and once the fault is gone the event is served and its recovery said once."""
    import logging
    from datetime import UTC, datetime

    from events_svc.loops import offer_options
    from events_svc.verbs.waitlist import next_offer_due, run_offer_pass
    from tests.probes.helpers import ports

    broken, served = await listed_event(admin, 1), await listed_event(admin, 1)
    for event in (broken, served):
        (rid,) = await fill(public, event["id"], 1)
        await joined(public, event["id"], f"w-{event['id'][:6]}@example.org")
        await cancel(admin, rid)
    await pool.execute(
        "CREATE FUNCTION event.probe_offer_fault() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'probe fault'; END $$;"
        " CREATE TRIGGER probe_offer_fault BEFORE UPDATE ON event.waitlist_entry"
        f" FOR EACH ROW WHEN (NEW.event_id = '{broken['id']}') EXECUTE FUNCTION"
        " event.probe_offer_fault()"
    )
    caplog.set_level(logging.DEBUG, logger="events_svc.waitlist")
    options, now = offer_options(settings), datetime.now(UTC)

    first = await run_offer_pass(pool, ports(pool), options, now)
    assert (first.failed, first.offered) == (1, 1)
    row = await pool.fetchrow(
        "SELECT offer_failures, offer_retry_at, offer_error FROM event.waitlist_settings"
        " WHERE event_id = $1",
        uuid.UUID(broken["id"]),
    )
    assert row["offer_failures"] == 1 and row["offer_retry_at"] == now + timedelta(seconds=5)
    assert row["offer_error"] == "RaiseError"  # the error's class, never its text
    assert await next_offer_due(pool, now) == now + timedelta(seconds=5)

    during = await run_offer_pass(pool, ports(pool), options, now + timedelta(seconds=4))
    assert (during.failed, during.offered, during.events) == (0, 0, 0)  # left alone
    again = await run_offer_pass(pool, ports(pool), options, now + timedelta(seconds=5))
    assert again.failed == 1
    retry_at = await pool.fetchval(
        "SELECT offer_retry_at FROM event.waitlist_settings WHERE event_id = $1",
        uuid.UUID(broken["id"]),
    )
    assert retry_at == now + timedelta(seconds=5 + 10)  # the second failure: 10 s

    await pool.execute("DROP TRIGGER probe_offer_fault ON event.waitlist_entry")
    healed = await run_offer_pass(pool, ports(pool), options, now + timedelta(seconds=15))
    assert (healed.failed, healed.offered) == (0, 1)
    assert [r["status"] for r in await entries(pool, broken["id"])] == ["offered"]
    cleared = await pool.fetchrow(
        "SELECT offer_failures, offer_retry_at, offer_error FROM event.waitlist_settings"
        " WHERE event_id = $1",
        uuid.UUID(broken["id"]),
    )
    assert tuple(cleared) == (0, None, None)
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "events_svc.waitlist" and r.levelno >= logging.INFO
    ]
    assert said == [
        (logging.ERROR, "waitlist offer pass failed for an event"),
        (logging.INFO, "waitlist offers recovered for an event"),
    ]


async def test_deleting_the_offer_template_falls_back_to_the_built_in_text(
    admin: httpx.AsyncClient,
) -> None:
    tpl = await admin.post("/admin/templates", json={"name": "O", "subject": "S", "body": "B"})
    event = await listed_event(admin, 1)
    r = await admin.put(
        f"/admin/events/{event['id']}/waitlist-settings",
        json={"enabled": True, "offer_template_id": tpl.json()["id"]},
    )
    assert r.status_code == 200
    gone = await admin.delete(f"/admin/templates/{tpl.json()['id']}")
    assert gone.status_code == 200 and gone.json()["waitlist_offer_templates_unset"] == 1
    r = await admin.get(f"/admin/events/{event['id']}/waitlist-settings")
    assert r.json()["offer_template_id"] is None and r.json()["enabled"] is True


async def test_joins_count_in_the_email_window_like_registrations(
    db_url: str, settings: Settings, pool: asyncpg.Pool
) -> None:
    from events_svc import create_app

    tight = dataclasses.replace(settings, rate_limit_email="2/hour")
    app = create_app(tight)
    async with app.router.lifespan_context(app):
        api = Api(app, pool)
        async with (
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url=BASE, headers=await api.token("*")
            ) as admin,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as public,
        ):
            event = await listed_event(admin, 1)
            tickets = [(await add_ticket(admin, event["id"], name=f"T{i}"))["id"] for i in range(3)]
            await admin.post("/admin/registrations", json={"event_id": event["id"], "name": "X"})
            codes = [
                (await join(public, event["id"], "same@example.org", event_ticket_id=t)).status_code
                for t in tickets
            ]
        await api.client.aclose()
    assert codes == [201, 201, 429]


async def test_a_freed_seat_of_a_ticket_stays_with_its_bigger_waiting_entry(
    admin: httpx.AsyncClient, public: httpx.AsyncClient
) -> None:
    event = await listed_event(admin, 10)
    eid = event["id"]
    a = await add_ticket(admin, eid, name="A", seats_max=3)
    taken = [
        (await register(public, eid, f"a{i}@example.org", event_ticket_id=a["id"])).json()
        for i in range(3)
    ]
    await joined(public, eid, "pair@example.org", seats=2, event_ticket_id=a["id"])
    await cancel(admin, taken[0]["registration_id"])
    assert (await offer_pass(admin))["offers_made"] == 0  # one seat is too few for two
    r = await register(public, eid, "jumper@example.org", event_ticket_id=a["id"])
    assert (r.status_code, r.json()["error"]["code"]) == (409, "event_seats_exhausted")
    # somebody waits for it: joining is what is left
    assert (await join(public, eid, "next@example.org", event_ticket_id=a["id"])).status_code == 201
    await cancel(admin, taken[1]["registration_id"])
    assert (await offer_pass(admin))["offers_made"] == 1  # now two at once: the pair


async def test_an_archived_event_holds_its_list_and_serves_it_once_unarchived(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 1)
    eid = event["id"]
    (rid,) = await fill(public, eid, 1)
    await joined(public, eid, "w@example.org")
    await cancel(admin, rid)
    await pool.execute("UPDATE event.events SET active = false WHERE id = $1", uuid.UUID(eid))
    summary = await offer_pass(admin)
    assert (summary["offers_made"], summary["offers_closed"]) == (0, 0)
    assert [r["status"] for r in await entries(pool, eid)] == ["waiting"]
    await pool.execute("UPDATE event.events SET active = true WHERE id = $1", uuid.UUID(eid))
    assert (await offer_pass(admin))["offers_made"] == 1


async def test_accepting_counts_the_seats_an_operator_already_confirmed(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    event = await listed_event(admin, 2)
    taken = await fill(public, event["id"], 2)
    entry = await joined(public, event["id"], "pair@example.org", seats=2)
    for rid in taken:
        await cancel(admin, rid)
    await offer_pass(admin)
    (row,) = await entries(pool, event["id"])
    first = str(sorted(row["registration_ids"])[0])
    r = await admin.post(f"/admin/registrations/{first}/confirm")
    assert r.status_code == 200, r.text
    r = await public.post(link(entry["status_url"]) + "/accept")
    assert r.status_code == 200 and r.json()["status"] == "accepted"
    states = await pool.fetch(
        "SELECT state::text FROM event.registrations WHERE id = ANY($1::uuid[])",
        row["registration_ids"],
    )
    assert sorted(s["state"] for s in states) == ["open", "open"]


async def test_an_events_offer_back_off_is_written_even_without_a_settings_row(
    admin: httpx.AsyncClient, public: httpx.AsyncClient, pool: asyncpg.Pool, settings: Settings
) -> None:
    """The back-off lives on the event's settings row: an event whose entries outlived
    that row (its defaults apply) gets one written with the failure, so the next pass
    leaves it alone instead of failing again at once."""
    from datetime import UTC, datetime

    from events_svc.loops import offer_options
    from events_svc.verbs.waitlist import run_offer_pass
    from tests.probes.helpers import ports

    class Down:
        async def contact(self, partner_id: uuid.UUID) -> Any:
            raise ConnectionError("the directory is down")

    event = await listed_event(admin, 1, organizer_id=str(uuid.uuid4()))
    (rid,) = await fill(public, event["id"], 1)
    await joined(public, event["id"], "w-row@example.org")
    await cancel(admin, rid)
    event_id = uuid.UUID(event["id"])
    await pool.execute("DELETE FROM event.waitlist_settings WHERE event_id = $1", event_id)
    down = dataclasses.replace(ports(pool), partner_directory=Down())
    options, now = offer_options(settings), datetime.now(UTC)

    assert (await run_offer_pass(pool, down, options, now)).failed == 1
    row = await pool.fetchrow(
        "SELECT enabled, offer_failures, offer_retry_at, offer_error"
        " FROM event.waitlist_settings WHERE event_id = $1",
        event_id,
    )
    assert dict(row) == {
        "enabled": False,
        "offer_failures": 1,
        "offer_retry_at": now + timedelta(seconds=5),
        "offer_error": "ConnectionError",
    }
    during = await run_offer_pass(pool, down, options, now + timedelta(seconds=1))
    assert (during.failed, during.events) == (0, 0)  # backing off, not failing again


async def test_an_offer_out_of_turn_with_the_directory_down_answers_503_and_offers_nothing(
    settings: Settings, pool: asyncpg.Pool, api: Api
) -> None:
    """The offer mail's sender is asked of the partner directory before any lock: when it
    fails, the operator gets 503 `partner_directory_unavailable` and the entry still
    waits, its seat free for the next try."""
    from events_svc import create_app
    from events_svc.ports import Ports

    class Down:
        async def contact(self, partner_id: uuid.UUID) -> Any:
            raise ConnectionError("the directory is down")

    app = create_app(settings, ports=Ports(partner_directory=Down()))
    headers = await api.token("*")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as admin,
            httpx.AsyncClient(transport=transport, base_url=BASE) as public,
        ):
            event = await listed_event(admin, 1, organizer_id=str(uuid.uuid4()))
            (rid,) = await fill(public, event["id"], 1)
            entry = await joined(public, event["id"], "down@example.org")
            await cancel(admin, rid)
            r = await admin.post(f"/admin/waitlist/{entry['waitlist_entry_id']}/offer")
            assert (r.status_code, r.json()["error"]["code"]) == (
                503,
                "partner_directory_unavailable",
            )
            assert [e["status"] for e in await entries(pool, event["id"])] == ["waiting"]
            assert await seats_taken(pool, event["id"]) == 0
