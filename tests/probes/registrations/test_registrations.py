"""The register verb, the state machine and attendee rules through the real HTTP app."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import EventSurface, create_app, errors
from events_svc.loops import PASSES
from events_svc.ports import PartnerContact, Ports
from events_svc.settings import Settings
from events_svc.verbs.registrations import register, take_seats
from tests.probes.helpers import (
    BASE,
    Api,
    Directory,
    add_slot,
    add_ticket,
    cancel,
    correct,
    make_event,
)


async def reg(admin: httpx.AsyncClient, event_id: str, **body: Any) -> httpx.Response:
    return await admin.post(
        "/admin/registrations", params={"pii": "full"}, json={"event_id": event_id, **body}
    )


def code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


async def test_register_answers_201_with_barcode_version_and_company(api: Api, admin):
    company = uuid.uuid4()
    ev = await make_event(admin, company_id=str(company))
    r = await reg(admin, ev["id"], name="Ada Lovelace", email="ada@example.org", phone="+44 1234")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["state"] == "open" and body["version"] == 1 and body["active"] is True
    assert body["barcode"].isdigit() and int(body["barcode"]) < 2**64
    assert body["company_id"] == str(company)  # copied from the event
    assert r.headers["etag"] == '"1"'
    assert body["email"] == "ada@example.org"  # pii=full with a '*' token


async def test_register_refusals(api: Api, admin: httpx.AsyncClient):
    multi = await make_event(admin, is_multi_slots=True)
    plain = await make_event(admin)
    other = await make_event(admin)
    slot = await add_slot(admin, multi["id"], 10)
    foreign_ticket = await add_ticket(admin, other["id"], name="X")
    closed = await add_ticket(
        admin, plain["id"], name="Early", end_sale_datetime="2020-01-01T00:00:00Z"
    )
    later = await add_ticket(
        admin, plain["id"], name="Late", start_sale_datetime="2099-01-01T00:00:00Z"
    )
    cases = [
        (multi["id"], {}, 422, "slot_required"),
        (plain["id"], {"event_slot_id": slot["id"]}, 422, "slot_not_in_event"),
        (multi["id"], {"event_slot_id": str(uuid.uuid4())}, 422, "slot_not_in_event"),
        (plain["id"], {"event_ticket_id": foreign_ticket["id"]}, 422, "ticket_not_in_event"),
        (plain["id"], {"event_ticket_id": closed["id"]}, 409, "event_sale_window_closed"),
        (plain["id"], {"event_ticket_id": later["id"]}, 409, "event_sale_window_closed"),
        (str(uuid.uuid4()), {}, 404, "not_found"),
        (plain["id"], {"state": "done"}, 422, "unknown_field"),
        (plain["id"], {"email": "not-an-email"}, 422, "validation_failed"),
    ]
    for event_id, extra, status, expected in cases:
        r = await reg(admin, event_id, name="X", **extra)
        assert r.status_code == status and code(r) == expected, (extra, r.text)
    await admin.patch(f"/admin/events/{plain['id']}", json={"kanban_state": "cancel"})
    r = await reg(admin, plain["id"], name="X")
    assert r.status_code == 409 and code(r) == "event_cancelled"
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.registrations") == 0


async def test_seats_exhausted_names_the_scope_and_the_missing_seats(admin: httpx.AsyncClient):
    ev = await make_event(admin, seats_max=1)
    assert (await reg(admin, ev["id"])).status_code == 201
    r = await reg(admin, ev["id"])
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["code"] == "event_seats_exhausted" and err["scope"] == "event"
    assert err["scope_id"] == ev["id"] and err["missing"] == 1 and err["available"] == 0
    t_ev = await make_event(admin, seats_limited=False)
    t = await add_ticket(admin, t_ev["id"], name="VIP", seats_max=1)
    assert (await reg(admin, t_ev["id"], event_ticket_id=t["id"])).status_code == 201
    r = await reg(admin, t_ev["id"], event_ticket_id=t["id"])
    assert r.json()["error"]["scope"] == "ticket" and r.json()["error"]["scope_id"] == t["id"]
    assert (await reg(admin, t_ev["id"])).status_code == 201  # the event itself is unlimited


async def test_unlimited_caps_never_refuse(admin: httpx.AsyncClient):
    ev = await make_event(admin, seats_limited=True, seats_max=0)  # 0 = unlimited
    for _ in range(5):
        assert (await reg(admin, ev["id"])).status_code == 201
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()
    assert seats["event"]["limited"] is False and seats["event"]["available"] is None
    assert seats["event"]["taken"] == 5 and seats["available_min"] is None


async def test_multi_slot_events_measure_the_cap_per_slot(admin: httpx.AsyncClient):
    ev = await make_event(admin, is_multi_slots=True, seats_max=1)
    slots = [(await add_slot(admin, ev["id"], hour))["id"] for hour in (10, 14)]
    assert (await reg(admin, ev["id"], event_slot_id=slots[0])).status_code == 201
    r = await reg(admin, ev["id"], event_slot_id=slots[0])
    assert r.status_code == 409 and r.json()["error"]["scope"] == "slot"
    assert (await reg(admin, ev["id"], event_slot_id=slots[1])).status_code == 201
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()
    assert seats["event"]["cap"] == 2 and seats["is_sold_out"] is True


async def test_state_machine_and_the_arm_rule(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin, seats_max=1)
    eid = uuid.UUID(ev["id"])
    async with api.pool.acquire() as conn:
        mail_id = await conn.fetchval(
            "INSERT INTO event.mails (event_id, interval_nbr, interval_unit, interval_kind,"
            " template_ref, mail_done) VALUES ($1, 2, 'hours', 'after_sub', $2, true)"
            " RETURNING id",
            eid,
            uuid.uuid4(),
        )

    async def mail() -> asyncpg.Record:
        async with api.pool.acquire() as conn:
            return await conn.fetchrow("SELECT * FROM event.mails WHERE id = $1", mail_id)

    first = (await reg(admin, ev["id"])).json()
    armed = await mail()
    assert armed["mail_done"] is False and armed["scheduled_date"] is not None
    url = f"/admin/registrations/{first['id']}"
    async with api.pool.acquire() as conn:  # the scheduler finished: a re-arm would show
        await conn.execute("UPDATE event.mails SET mail_done = true, scheduled_date = NULL")
    r = await admin.post(f"{url}/confirm")  # re-confirming an open row: no write, no arm
    assert r.json()["version"] == 1 and (await mail())["mail_done"] is True
    r = await admin.post(f"{url}/set-done")
    assert r.json()["state"] == "done" and r.json()["date_closed"] is not None
    assert r.json()["version"] == 2 and (await mail())["mail_done"] is True  # open→done: no arm
    closed_at = r.json()["date_closed"]
    r = await admin.post(f"{url}/set-draft", headers={"If-Match": '"1"'})
    assert r.status_code == 412 and code(r) == "stale_revision"
    r = await admin.post(f"{url}/set-draft", headers={"If-Match": '"2"'})
    assert r.json()["state"] == "draft" and r.json()["date_closed"] == closed_at
    second = (await reg(admin, ev["id"])).json()  # the freed seat is taken
    r = await admin.post(f"{url}/confirm")  # entering open re-checks seats
    assert r.status_code == 409 and code(r) == "event_seats_exhausted"
    await cancel(admin, second["id"])
    async with api.pool.acquire() as conn:
        await conn.execute("UPDATE event.mails SET mail_done = true, scheduled_date = NULL")
    r = await admin.post(f"{url}/confirm")  # draft → open arms
    assert r.json()["state"] == "open"
    assert (await mail())["mail_done"] is False
    async with api.pool.acquire() as conn:
        verbs = await conn.fetch(
            "SELECT verb FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
            uuid.UUID(first["id"]),
        )
    assert [v["verb"] for v in verbs] == [
        "registration_created",
        "registration_set_done",
        "registration_set_draft",
        "registration_confirmed",
    ]


async def test_archived_rows_leave_seats_and_unarchive_rechecks(admin: httpx.AsyncClient):
    ev = await make_event(admin, seats_max=1)
    first = (await reg(admin, ev["id"])).json()
    r = await admin.post(f"/admin/registrations/{first['id']}/archive")
    assert r.json()["active"] is False
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()
    assert seats["event"]["taken"] == 0
    assert (await reg(admin, ev["id"])).status_code == 201
    r = await admin.post(f"/admin/registrations/{first['id']}/unarchive")
    assert r.status_code == 409 and code(r) == "event_seats_exhausted"
    r = await admin.get("/admin/registrations", params={"event_id": ev["id"], "active": "false"})
    assert [x["id"] for x in r.json()["items"]] == [first["id"]]


async def test_patch_writes_attendee_fields_only(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    r = (await reg(admin, ev["id"], name="Grace")).json()
    url = f"/admin/registrations/{r['id']}"
    for field, value in (
        ("state", "done"),
        ("barcode", "1"),
        ("active", False),
        ("sale_status", "sold"),
        ("event_id", ev["id"]),
        ("partner_id", str(uuid.uuid4())),
    ):
        resp = await admin.patch(url, json={"reason": "x", field: value}, headers={"If-Match": "1"})
        assert resp.status_code == 422 and code(resp) == "field_not_writable"
        assert resp.json()["error"]["field"] == field
    resp = await correct(
        admin, r["id"], params={"pii": "full"}, name="Grace Hopper", company_name="Navy"
    )
    assert resp.json()["name"] == "Grace Hopper" and resp.json()["version"] == 2
    resp = await admin.patch(url, json={"reason": "x", "colour": "x"}, headers={"If-Match": "2"})
    assert resp.status_code == 422


async def test_reads_mask_pii_unless_scoped_and_asked(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin)
    r = (
        await reg(
            admin,
            ev["id"],
            name="Ada King Lovelace",
            email="ada@example.org",
            phone="+44 20 7946 0958",
            company_name="Analytical",
        )
    ).json()
    reader = await api.token("registration:read")
    got = (await api.client.get(f"/admin/registrations/{r['id']}", headers=reader)).json()
    assert got["name"] == "A*** K*** L***" and got["email"] == "a***@example.org"
    assert got["phone"] == "***58" and got["company_name"] == "Analytical"
    resp = await api.client.get(
        f"/admin/registrations/{r['id']}", params={"pii": "full"}, headers=reader
    )
    assert resp.status_code == 403 and resp.json()["error"]["scope"] == "registration:pii"
    full = await api.token("registration:read", "registration:pii")
    got = (
        await api.client.get(
            f"/admin/registrations/{r['id']}", params={"pii": "full"}, headers=full
        )
    ).json()
    assert got["email"] == "ada@example.org"
    listed = await api.client.get(
        "/admin/registrations", params={"event_id": ev["id"]}, headers=reader
    )
    assert listed.json()["items"][0]["email"] == "a***@example.org"
    async with api.pool.acquire() as conn:
        rows = await conn.fetch("SELECT verb, summary::text AS s FROM event.event_audit_log")
    assert [x["verb"] for x in rows].count("registration_pii_read") == 1
    assert not any("ada@" in x["s"] or "Lovelace" in x["s"] for x in rows)


async def test_a_masked_reader_cannot_rebuild_a_name_letter_by_letter(api: Api, admin):
    """The attack of issue 26 item 6: `q` matched any part of a name, so a reader without
    `registration:pii` rebuilt a masked name one letter at a time. Now it matches a whole
    name (case aside) or an exact barcode; parts of names and emails need the scope."""
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(mine))
    ada = (await reg(admin, ev["id"], name="Ada Lovelace", email="ada@example.org")).json()
    await reg(admin, ev["id"], name="Adam Smith", email="adam@example.org")
    masked = await api.token("registration:read", company=mine)
    full = await api.token("registration:read", "registration:pii", company=mine)
    outsider = await api.token("registration:read", "registration:pii", company=theirs)

    async def names(headers: dict[str, str], q: str) -> list[str]:
        r = await api.client.get(
            "/admin/registrations",
            params={"event_id": ev["id"], "q": q, "pii": "full" if headers is full else "masked"},
            headers=headers,
        )
        assert r.status_code == 200, r.text
        return sorted(x["name"] for x in r.json()["items"])

    # letter by letter, a word, an email: nothing for the masked reader
    for guess in ("A", "Ad", "Ada", "Ada ", "Lovelace", "ada@", "ada@example.org", "%", "_"):
        assert await names(masked, guess) == [], guess
    # the whole name, whatever its case, and the exact barcode
    for whole in ("Ada Lovelace", "ada lovelace", "ADA LOVELACE", " Ada Lovelace "):
        assert await names(masked, whole) == ["A*** L***"], whole
    assert await names(masked, ada["barcode"]) == ["A*** L***"]
    assert await names(masked, ada["barcode"][:-1]) == []
    # with registration:pii: today's search, parts of names and emails
    assert await names(full, "Ad") == ["Ada Lovelace", "Adam Smith"]
    assert await names(full, "love") == ["Ada Lovelace"]
    assert await names(full, "adam@") == ["Adam Smith"]
    # another company's reader finds nothing, not even by the whole name or barcode
    for q in ("Ada Lovelace", ada["barcode"], "Ad"):
        assert await names(outsider, q) == []


async def test_barcodes_are_unique_exact_match_and_retried_on_collision(api, admin, monkeypatch):
    ev = await make_event(admin)
    first = (await reg(admin, ev["id"])).json()
    minted = iter([first["barcode"], "424242"])
    monkeypatch.setattr(take_seats, "new_barcode", lambda: next(minted))
    second = (await reg(admin, ev["id"])).json()
    assert second["barcode"] == "424242"
    r = await admin.get("/admin/registrations", params={"event_id": ev["id"], "barcode": "42424"})
    assert r.json()["items"] == []  # exact match only
    r = await admin.get("/admin/registrations", params={"event_id": ev["id"], "barcode": "424242"})
    assert [x["id"] for x in r.json()["items"]] == [second["id"]]


async def test_answers_are_validated_against_the_event_questions(api: Api, admin):
    ev = await make_event(admin)
    choice = (
        await admin.post(
            "/admin/questions",
            json={"title": "Meal", "answers": [{"name": "Veg"}, {"name": "Fish"}]},
        )
    ).json()
    text = (
        await admin.post("/admin/questions", json={"title": "Notes", "question_type": "text_box"})
    ).json()
    ident = (
        await admin.post(
            "/admin/questions", json={"title": "Company", "question_type": "company_name"}
        )
    ).json()
    stray = (await admin.post("/admin/questions", json={"title": "Other"})).json()
    other_q = (
        await admin.post("/admin/questions", json={"title": "X", "answers": [{"name": "y"}]})
    ).json()
    for q in (choice, text, ident, other_q):
        await admin.post(f"/admin/events/{ev['id']}/questions", json={"question_id": q["id"]})
    bad = [
        ([{"question_id": stray["id"], "value_text": "x"}], "question_not_on_event"),
        ([{"question_id": choice["id"], "value_text": "Veg"}], "answer_invalid"),
        (
            [{"question_id": choice["id"], "value_answer_id": other_q["answers"][0]["id"]}],
            "answer_not_of_question",
        ),
        (
            [{"question_id": text["id"], "value_answer_id": choice["answers"][0]["id"]}],
            "answer_invalid",
        ),
    ]
    for answers, expected in bad:
        r = await reg(admin, ev["id"], answers=answers)
        assert r.status_code == 422 and code(r) == expected, answers
    good = await reg(
        admin,
        ev["id"],
        answers=[
            {"question_id": choice["id"], "value_answer_id": choice["answers"][1]["id"]},
            {"question_id": text["id"], "value_text": "Window seat"},
            {"question_id": ident["id"], "value_text": "Babbage & Co"},
        ],
    )
    assert good.status_code == 201
    body = good.json()
    assert body["company_name"] == "Babbage & Co"  # identity kinds fill the field, no row
    assert sorted(a["question_id"] for a in body["answers"]) == sorted([choice["id"], text["id"]])


# what the host's partner directory knows of every partner
PARTNER = PartnerContact(name="Partner Name", email="p@example.org", phone="+1 555 0100")


async def test_sync_from_partner_fills_empty_fields_only(settings: Settings, pool, api: Api):
    headers = await api.token("*")
    app = create_app(settings, ports=Ports(partner_directory=Directory(PARTNER)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            ev = await make_event(c)
            alone = (await reg(c, ev["id"], name="Kept Name")).json()
            resp = await c.post(f"/admin/registrations/{alone['id']}/sync-from-partner")
            assert resp.status_code == 409 and code(resp) == "registration_has_no_partner"
            r = (await reg(c, ev["id"], name="Kept Name", partner_id=str(uuid.uuid4()))).json()
            url = f"/admin/registrations/{r['id']}/sync-from-partner"
            resp = await c.post(url, params={"pii": "full"})
            body = resp.json()
            assert body["name"] == "Kept Name" and body["email"] == "p@example.org"
            assert body["phone"] == "+1 555 0100" and body["version"] == 2
            history = (await c.get(f"/admin/registrations/{r['id']}/revisions")).json()
            (sync,) = history["items"]
            assert (sync["verb"], sync["fields"]) == ("sync_from_partner", ["email", "phone"])
            assert sync["changes"]["email"] == {"before": "", "after": "p***@example.org"}
            # the integrators hear of it as of a correction (an endpoint listening)
            await pool.execute(
                "INSERT INTO event.webhook_endpoints (url, event_types, secret, created_at,"
                " updated_at) VALUES ('https://hooks.example.org/in',"
                " ARRAY['registration.updated'], 'whsec_probe', now(), now())"
            )
            fresh = (await reg(c, ev["id"], partner_id=str(uuid.uuid4()))).json()
            await c.post(f"/admin/registrations/{fresh['id']}/sync-from-partner")
            fact = await pool.fetchrow("SELECT type, data FROM event.webhook_facts")
            assert fact["type"] == "registration.updated"
            assert fact["data"]["changed"] == ["email", "name", "phone"]
            assert fact["data"]["registration_id"] == fresh["id"]
            await c.post(f"/admin/registrations/{fresh['id']}/sync-from-partner")  # nothing new
            assert await pool.fetchval("SELECT count(*) FROM event.webhook_facts") == 1


async def test_unwired_partner_directory_answers_503(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    r = (await reg(admin, ev["id"], partner_id=str(uuid.uuid4()))).json()
    resp = await admin.post(f"/admin/registrations/{r['id']}/sync-from-partner")
    assert resp.status_code == 503 and code(resp) == "partner_directory_not_composed"


async def test_the_seat_count_is_an_index_only_scan(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin)
    async with api.pool.acquire() as conn:
        others = [
            await conn.fetchval(
                "INSERT INTO event.events (name, date_begin, date_end) VALUES ('x', now(), now())"
                " RETURNING id"
            )
            for _ in range(20)
        ]
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, state)"
            " SELECT (ARRAY[$1::uuid] || $2::uuid[])[1 + g % 21], g::text,"
            " (ARRAY['open','done','draft','cancel'])[1 + g % 4]::event.registration_state"
            " FROM generate_series(1, 20000) g",
            uuid.UUID(ev["id"]),
            others,
        )
        await conn.execute("VACUUM ANALYZE event.registrations")
        from events_svc.verbs.registrations.seats import (
            _COUNT_EVENT,
            _COUNT_SLOT,
            _COUNT_SLOT_TICKET,
            _COUNT_TICKET,
        )

        plan = "\n".join(
            r[0] for r in await conn.fetch("EXPLAIN " + _COUNT_EVENT, uuid.UUID(ev["id"]))
        )
        # the rows held for good: counted from the index alone, nothing tested per row;
        # the held drafts: a range of their own index
        assert "Index Only Scan using registrations_seat_event_idx" in plan, plan
        assert "Index Only Scan using registrations_seat_held_idx" in plan, plan
        assert "Filter" not in plan, plan
        some = uuid.uuid4()
        for sql, args in (
            (_COUNT_TICKET, (some,)),
            (_COUNT_SLOT, (some,)),
            (_COUNT_SLOT_TICKET, (some, some)),
        ):
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
            assert "Seq Scan" not in plan, plan


async def test_the_two_halves_of_the_seat_count_are_holds_seat_at(api: Api):
    """`holds_seat_at` is the one definition; the locked counts read it in two halves
    (held for good, held and not ended): equal to it for every state, sale status,
    activity and hold, at random instants, row by row and counted."""
    async with api.pool.acquire() as conn:
        differ = await conn.fetchval(
            """
            WITH r AS (
                SELECT s::event.registration_state AS state, a AS active,
                       p::event.sale_status AS sale_status, h AS hold_expires_at
                FROM unnest(enum_range(NULL::event.registration_state)) s,
                     unnest(ARRAY[true, false]) a,
                     unnest(ARRAY[NULL] || enum_range(NULL::event.sale_status)::text[]) p,
                     unnest(ARRAY[NULL, now() - interval '1 day', now(),
                                  now() + interval '1 hour', now() + random() * interval '9 days']
                            ::timestamptz[]) h
            ), at AS (
                SELECT now() + (random() - 0.5) * interval '20 days' AS at
                FROM generate_series(1, 50)
                UNION ALL SELECT now()
            )
            SELECT count(*) FROM r, at
            WHERE event.holds_seat_at(state, active, sale_status, hold_expires_at, at)
                  IS DISTINCT FROM
                  (event.holds_seat_for_good(state, active, sale_status, hold_expires_at)
                   OR (event.holds_seat_held(state, active, sale_status, hold_expires_at)
                       AND hold_expires_at > at))
            """
        )
        assert differ == 0
        # counted: an event with rows in every state, some holds ended, some not
        event_id = await conn.fetchval(
            "INSERT INTO event.events (name, date_begin, date_end) VALUES ('x', now(), now())"
            " RETURNING id"
        )
        await conn.execute(
            "INSERT INTO event.registrations (event_id, barcode, state, active, sale_status,"
            " hold_expires_at, state_origin)"
            " SELECT $1, '66' || lpad(g::text, 12, '0'), st, g % 7 <> 0,"
            " (ARRAY[NULL, 'free', 'sold', 'to_pay'])[1 + (g / 4) % 4]::event.sale_status,"
            " CASE WHEN held THEN now() + (g % 11 - 5) * interval '1 hour' END,"
            " CASE WHEN held THEN 'waitlist' END::event.state_origin"
            " FROM generate_series(1, 3000) g,"
            " LATERAL (SELECT (ARRAY['open','done','draft','cancel'])[1 + g % 4]"
            "::event.registration_state AS st) s,"
            " LATERAL (SELECT st = 'draft' AND g % 3 = 0 AS held) h",
            event_id,
        )
        from events_svc.verbs.registrations.seats import _COUNT_EVENT

        async with conn.transaction():  # now(): one instant for both
            halves = await conn.fetchval(_COUNT_EVENT, event_id)
            truth = await conn.fetchval(
                "SELECT count(*) FROM event.registrations WHERE event_id = $1"
                " AND event.holds_seat_at(state, active, sale_status, hold_expires_at, now())",
                event_id,
            )
        assert halves == truth and 0 < truth < 3000


async def test_the_surface_reads_the_same_truth(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin, seats_max=3)
    r = (await reg(admin, ev["id"])).json()
    surface = EventSurface(api.pool, Settings())
    seats = await surface.seat_availability(uuid.UUID(ev["id"]))
    assert seats["event"]["available"] == 2
    pub = await surface.publication_state(uuid.UUID(ev["id"]))
    assert pub["is_published"] is False and pub["is_visible"] is False
    await admin.post(f"/admin/events/{ev['id']}/publish")
    assert (await surface.publication_state(uuid.UUID(ev["id"])))["is_visible"] is True
    state = await surface.registration_state(uuid.UUID(r["id"]))
    assert state["state"] == "open" and state["sale_status"] is None
    with pytest.raises(Exception, match="No such registration"):
        await surface.registration_state(uuid.uuid4())


async def test_groups_respect_the_per_order_cap_and_mandatory_answers(api: Api, admin):
    from datetime import UTC, datetime

    from events_svc.actors import SYSTEM
    from events_svc.errors import AnswerRequired, PerOrderCapExceeded
    from events_svc.models import AnswerInput, AttendeeInput

    ev = await make_event(admin)
    eid = uuid.UUID(ev["id"])
    t = await add_ticket(admin, ev["id"], name="Duo", limit_max_per_order=2)
    three = [AttendeeInput(name=f"A{i}") for i in range(3)]
    now = datetime.now(UTC)
    with pytest.raises(PerOrderCapExceeded) as caught:
        await register(api.pool, SYSTEM, eid, three, now, ticket_id=uuid.UUID(t["id"]))
    assert caught.value.fields == {"maximum": 2, "requested": 3}
    with pytest.raises(PerOrderCapExceeded):  # without a ticket cap: 30 at most
        await register(api.pool, SYSTEM, eid, [AttendeeInput() for _ in range(31)], now)
    q = (
        await admin.post(
            "/admin/questions",
            json={"title": "Why?", "question_type": "text_box", "is_mandatory_answer": True},
        )
    ).json()
    await admin.post(f"/admin/events/{ev['id']}/questions", json={"question_id": q["id"]})
    with pytest.raises(AnswerRequired):
        await register(api.pool, SYSTEM, eid, [AttendeeInput()], now, require_mandatory=True)
    answered = AttendeeInput(
        answers=[AnswerInput(question_id=uuid.UUID(q["id"]), value_text="Curious")]
    )
    done = await register(
        api.pool,
        SYSTEM,
        eid,
        [answered, answered],
        now,
        ticket_id=uuid.UUID(t["id"]),
        require_mandatory=True,
    )
    assert len(done.registrations) == 2
    assert all(r["answers"][0]["value_text"] == "Curious" for r in done.registrations)
    async with api.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM event.registrations") == 2


async def test_sync_from_an_unknown_partner_is_refused(settings: Settings, pool, api: Api):
    headers = await api.token("*")
    app = create_app(settings, ports=Ports(partner_directory=Directory(None)))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            ev = await make_event(c)
            r = (await reg(c, ev["id"], partner_id=str(uuid.uuid4()))).json()
            resp = await c.post(f"/admin/registrations/{r['id']}/sync-from-partner")
            assert resp.status_code == 422 and code(resp) == "partner_not_found"


async def test_a_failing_or_silent_partner_directory_answers_503_and_writes_nothing(
    settings: Settings, pool, api: Api, monkeypatch: pytest.MonkeyPatch, caplog
):
    """A wired directory that raises, or that does not answer within its bound, answers
    503 `partner_directory_unavailable` (Retry-After), never a 500 or a request that
    hangs; the registration is unchanged and the log names the error's class only."""
    from events_svc.verbs import partners

    monkeypatch.setattr(partners, "DIRECTORY_TIMEOUT_S", 0.2)

    class Flaky:
        def __init__(self) -> None:
            self.mode = "raise"

        async def contact(self, partner_id: uuid.UUID) -> PartnerContact | None:
            if self.mode == "raise":
                raise ConnectionError("directory.internal:5432 refused for p@example.org")
            await asyncio.Event().wait()  # never answers
            return None

    directory = Flaky()
    headers = await api.token("*")
    app = create_app(settings, ports=Ports(partner_directory=directory))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, headers=headers) as c:
            ev = await make_event(c)
            r = (await reg(c, ev["id"], name="", partner_id=str(uuid.uuid4()))).json()
            url = f"/admin/registrations/{r['id']}/sync-from-partner"
            for mode in ("raise", "hang"):
                directory.mode = mode
                resp = await asyncio.wait_for(c.post(url), 5)
                assert resp.status_code == 503 and code(resp) == "partner_directory_unavailable"
                assert resp.headers["retry-after"] == "5"
                assert "example.org" not in resp.text
            after = (await c.get(f"/admin/registrations/{r['id']}")).json()
            assert after["version"] == r["version"]
            history = (await c.get(f"/admin/registrations/{r['id']}/revisions")).json()
            assert history["items"] == []
    said = [f"{x.getMessage()} {getattr(x, 'fields', '')}" for x in caplog.records]
    assert any("partner directory unavailable" in line for line in said)
    assert not any("p@example.org" in line or "directory.internal" in line for line in said)


async def test_the_surface_registers_mints_and_runs_the_scheduler_without_http(
    api: Api, admin: httpx.AsyncClient
):
    from datetime import UTC, datetime

    from pydantic import ValidationError

    from events_svc.capabilities import ICS, MY_TICKETS, CapabilityCodec

    secret = "surface-secret-0123456789"
    ev = await make_event(
        admin, seats_max=5, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    surface = EventSurface(api.pool, Settings(capability_secrets=(secret,)))
    # the guarded intake: the route's own body model, so its allowlist holds here too
    ada = {"attendees": [{"name": "Ada", "email": "a@ex.org"}]}
    with pytest.raises(errors.EventNotPublished):
        await surface.register_intake(ev["id"], ada)  # unpublished by id: the uniform 404
    with pytest.raises(ValidationError):
        await surface.register_intake(ev["id"], {"attendees": [{"name": "No email"}]})
    with pytest.raises(ValidationError):
        await surface.register_intake(ev["id"], {**ada, "partner_id": str(uuid.uuid4())})
    # ... and open through a private intake link minted by the surface
    link = await surface.mint_capability("intake", uuid.UUID(ev["id"]), {"ttl_seconds": 3600})
    taken = await surface.register_intake(link["token"], ada)
    (row,) = taken["registrations"]
    assert row["state"] == "open"
    codec, now = CapabilityCodec((secret,)), datetime.now(UTC)
    tickets = codec.open(MY_TICKETS, taken["my_tickets_token"], now)
    assert tickets is not None and tickets["r"] == [str(row["registration_id"])]
    ics = await surface.mint_capability("ics", uuid.UUID(ev["id"]))
    assert codec.open(ICS, ics["token"], now) is not None and ics["expires_at"] > now
    with pytest.raises(ValidationError):  # the route's bounds: no link that is born expired
        await surface.mint_capability("ics", uuid.UUID(ev["id"]), {"ttl_seconds": -5})
    mine = await surface.mint_capability(
        "my_tickets", uuid.UUID(ev["id"]), {"registration_ids": [row["registration_id"]]}
    )
    assert mine["expires_at"] is None
    # the scheduler pass the routes and the loop run
    tpl = (await admin.post("/admin/templates", json={"name": "T", "body": "Hi"})).json()
    line = {
        "event_id": ev["id"],
        "template_ref": tpl["id"],
        "interval_kind": "after_sub",
        "interval_unit": "now",
        "interval_nbr": 0,
    }
    assert (await admin.post("/admin/mails", json=line)).status_code == 201
    ran = await surface.run_due_schedulers()
    assert ran["sent"] == 1 and [p["name"] for p in ran["passes"]] == list(PASSES)
    assert (await surface.seat_availability(uuid.UUID(ev["id"])))["event"]["taken"] == 1


async def test_nothing_enters_open_on_a_cancelled_event(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    draft = (await reg(admin, ev["id"])).json()
    await admin.post(f"/admin/registrations/{draft['id']}/set-draft")
    cancelled = (await reg(admin, ev["id"])).json()
    await cancel(admin, cancelled["id"])
    for way_back in ("confirm", "set-draft", "set-done"):  # only reactivate leaves cancel
        r = await admin.post(f"/admin/registrations/{cancelled['id']}/{way_back}")
        assert (r.status_code, code(r)) == (409, "use_reactivate"), way_back
    await admin.patch(f"/admin/events/{ev['id']}", json={"kanban_state": "cancel"})
    r = await admin.post(f"/admin/registrations/{draft['id']}/confirm")
    assert (r.status_code, code(r)) == (409, "event_cancelled")
    view = (await admin.get(f"/admin/registrations/{draft['id']}")).json()
    assert view["state"] == "draft"


async def test_date_closed_is_stamped_once_and_corrected_by_hand(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    r = (await reg(admin, ev["id"])).json()
    done = (await admin.post(f"/admin/registrations/{r['id']}/set-done")).json()
    stamped = done["date_closed"]
    assert stamped is not None
    await admin.post(f"/admin/registrations/{r['id']}/set-draft")
    again = (await admin.post(f"/admin/registrations/{r['id']}/set-done")).json()
    assert again["date_closed"] == stamped  # never overwritten
    by_hand = "2027-05-11T12:00:00Z"
    fixed = await correct(admin, r["id"], date_closed=by_hand)
    assert fixed.status_code == 200 and fixed.json()["date_closed"] == by_hand
    cleared = await correct(admin, r["id"], date_closed=None)
    assert cleared.json()["date_closed"] is None


async def test_a_general_question_is_answered_once_per_group(api: Api, admin):
    from datetime import UTC, datetime

    from events_svc.actors import SYSTEM
    from events_svc.errors import AnswerInvalid
    from events_svc.models import AnswerInput, AttendeeInput

    ev = await make_event(admin)
    body = {
        "title": "How did you hear of us?",
        "question_type": "text_box",
        "is_mandatory_answer": True,
    }
    general = (await admin.post("/admin/questions", json=body)).json()
    diet = {"title": "Diet", "question_type": "text_box"}
    specific = (await admin.post("/admin/questions", json=diet)).json()
    link = {"question_id": general["id"], "once_per_order": True}
    linked = await admin.post(f"/admin/events/{ev['id']}/questions", json=link)
    assert linked.status_code == 201
    assert [q["once_per_order"] for q in linked.json()["items"]] == [True]
    await admin.post(f"/admin/events/{ev['id']}/questions", json={"question_id": specific["id"]})
    heard = AnswerInput(question_id=uuid.UUID(general["id"]), value_text="A friend")
    vegan = AnswerInput(question_id=uuid.UUID(specific["id"]), value_text="Vegan")
    group = [AttendeeInput(name="A", answers=[heard, vegan]), AttendeeInput(name="B")]
    eid, now = uuid.UUID(ev["id"]), datetime.now(UTC)
    made = await register(api.pool, SYSTEM, eid, group, now, require_mandatory=True)
    answers = [
        {a["question_id"]: a["value_text"] for a in r["answers"]} for r in made.registrations
    ]
    assert answers == [
        {general["id"]: "A friend", specific["id"]: "Vegan"},
        {general["id"]: "A friend"},
    ]
    other = AnswerInput(question_id=uuid.UUID(general["id"]), value_text="The radio")
    differing = [AttendeeInput(name="C", answers=[heard]), AttendeeInput(name="D", answers=[other])]
    with pytest.raises(AnswerInvalid):
        await register(api.pool, SYSTEM, eid, differing, now)
