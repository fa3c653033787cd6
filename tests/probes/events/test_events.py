"""Event administration through the real HTTP app on a real PostgreSQL."""

from __future__ import annotations

import uuid

import httpx

from tests.probes.helpers import Api, event_body, insert_registration, make_event


async def test_create_event_answers_201_with_revision_etag_and_seats(admin: httpx.AsyncClient):
    r = await admin.post("/admin/events", json=event_body())
    assert r.status_code == 201
    ev = r.json()
    assert r.headers["etag"] == '"1"'
    assert r.headers["cache-control"] == "no-store"
    assert ev["revision"] == 1 and ev["ics_sequence"] == 0
    assert ev["is_published"] is False and ev["date_publish"] is None
    assert ev["kanban_state"] == "normal" and ev["is_finished"] is False
    assert ev["seats"]["event"] == {
        "limited": True,
        "cap": 100,
        "reserved": 0,
        "used": 0,
        "held": 0,
        "taken": 0,
        "available": 100,
    }
    assert ev["seats"]["available_min"] == 100 and ev["seats"]["is_sold_out"] is False
    got = await admin.get(f"/admin/events/{ev['id']}")
    assert got.status_code == 200 and got.json()["name"] == "PyCon Lisbon"


async def test_unknown_field_is_refused_naming_it(admin: httpx.AsyncClient):
    r = await admin.post("/admin/events", json=event_body(colour="red"))
    assert r.status_code == 422
    assert r.json()["error"] == {
        "code": "unknown_field",
        "detail": "Unknown field: colour.",
        "field": "colour",
    }


async def test_nul_bytes_in_text_are_a_422_not_a_500(admin: httpx.AsyncClient):
    r = await admin.post("/admin/events", json=event_body(name="bad\x00name"))
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "validation_failed"
    r = await admin.get("/admin/events", params={"q": "x\x00"})
    assert r.status_code == 422


async def test_naive_datetimes_and_bad_timezones_are_refused(admin: httpx.AsyncClient):
    r = await admin.post("/admin/events", json=event_body(date_begin="2027-05-10T09:00:00"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_failed"
    r = await admin.post("/admin/events", json=event_body(date_tz="Mars/Olympus"))
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_timezone"


async def test_schema_guards_answer_typed_422(admin: httpx.AsyncClient):
    cases = [
        ({"date_end": "2027-05-01T00:00:00Z"}, "date_order"),
        ({"seats_max": -5}, "validation_failed"),  # the model's bound, naming seats_max
        ({"event_url": "www.example.org/x"}, "event_url_not_absolute"),
        ({"name": " "}, "validation_failed"),
        ({"event_type_id": str(uuid.uuid4())}, "reference_not_found"),
        ({"stage_id": str(uuid.uuid4())}, "reference_not_found"),
        ({"tag_ids": [str(uuid.uuid4())]}, "reference_not_found"),
    ]
    for over, code in cases:
        r = await admin.post("/admin/events", json=event_body(**over))
        assert r.status_code == 422, (over, r.text)
        assert r.json()["error"]["code"] == code, over
        if "seats_max" in over:
            assert r.json()["error"]["field"] == "seats_max"


async def test_template_applies_once_at_create_and_never_repropagates(admin: httpx.AsyncClient):
    kind = {"name": "Conference", "date_tz": "Europe/Paris", "seats_limited": True, "seats_max": 40}
    t = (await admin.post("/admin/types", json=kind)).json()
    diet = {"title": "Diet", "answers": [{"name": "Vegan"}, {"name": "None"}]}
    q = (await admin.post("/admin/questions", json=diet)).json()
    tid = t["id"]
    reminder = {"name": "Reminder", "body": "See you, {{ registration.name }}"}
    ref = (await admin.post("/admin/templates", json=reminder)).json()["id"]
    mail_line = {
        "interval_nbr": 1,
        "interval_unit": "days",
        "interval_kind": "before_event",
        "template_ref": ref,
    }
    assert (await admin.post(f"/admin/types/{tid}/mails", json=mail_line)).status_code == 201
    line = {"name": "Standard", "seats_max": 30, "limit_max_per_order": 5}
    assert (await admin.post(f"/admin/types/{tid}/tickets", json=line)).status_code == 201
    r = await admin.post(f"/admin/types/{tid}/questions", json={"question_id": q["id"]})
    assert r.status_code == 201 and len(r.json()["mails"]) == 1

    body = event_body(event_type_id=tid)
    del body["date_tz"], body["seats_limited"], body["seats_max"]
    ev = (await admin.post("/admin/events", json=body)).json()
    assert ev["date_tz"] == "Europe/Paris" and ev["seats_max"] == 40 and ev["seats_limited"]
    tickets = (await admin.get("/admin/tickets", params={"event_id": ev["id"]})).json()["items"]
    assert [(k["name"], k["seats_max"], k["limit_max_per_order"]) for k in tickets] == [
        ("Standard", 30, 5)
    ]
    qs = (await admin.get(f"/admin/events/{ev['id']}/questions")).json()["items"]
    assert [x["id"] for x in qs] == [q["id"]]

    # later edits of the type change nothing on the event
    await admin.post(f"/admin/types/{tid}/tickets", json={"name": "VIP"})
    await admin.patch(f"/admin/types/{tid}", json={"seats_max": 999})
    tickets = (await admin.get("/admin/tickets", params={"event_id": ev["id"]})).json()["items"]
    assert len(tickets) == 1
    assert (await admin.get(f"/admin/events/{ev['id']}")).json()["seats_max"] == 40


async def test_patch_fences_publication_and_read_only_fields(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    for field, value in (("is_published", True), ("date_publish", "2027-01-01T00:00:00Z")):
        r = await admin.patch(f"/admin/events/{ev['id']}", json={field: value})
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "publish_fenced" and r.json()["error"]["field"] == field
    for field in ("revision", "ics_sequence", "is_ongoing", "seats"):
        r = await admin.patch(f"/admin/events/{ev['id']}", json={field: 3})
        assert r.status_code == 422 and r.json()["error"]["code"] == "field_not_writable"
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"name": None})
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_failed"
    assert (await admin.get(f"/admin/events/{ev['id']}")).json()["revision"] == 1


async def test_patch_bumps_revision_and_honours_if_match(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    url = f"/admin/events/{ev['id']}"
    r = await admin.patch(url, json={"description": "More"}, headers={"If-Match": '"1"'})
    assert r.status_code == 200 and r.json()["revision"] == 2 and r.headers["etag"] == '"2"'
    r = await admin.patch(url, json={"description": "Stale"}, headers={"If-Match": '"1"'})
    assert r.status_code == 412 and r.json()["error"]["code"] == "stale_revision"
    assert (await admin.get(url)).json()["description"] == "More"
    r = await admin.patch(url, json={"seats_max": 50})  # without If-Match: last writer wins
    assert r.json()["revision"] == 3


async def test_ics_sequence_moves_only_with_calendar_visible_changes(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    url = f"/admin/events/{ev['id']}"
    assert (await admin.patch(url, json={"seats_max": 10})).json()["ics_sequence"] == 0
    assert (await admin.patch(url, json={"location": "Room 1"})).json()["ics_sequence"] == 1
    r = await admin.patch(url, json={"date_end": "2027-05-13T18:00:00Z"})
    assert r.json()["ics_sequence"] == 2
    assert (await admin.patch(url, json={"kanban_state": "cancel"})).json()["ics_sequence"] == 3


async def test_stage_change_resets_kanban_but_cancel_is_sticky(admin: httpx.AsyncClient):
    s1 = (await admin.post("/admin/stages", json={"name": "New", "sequence": 1})).json()
    s2 = (await admin.post("/admin/stages", json={"name": "Booked", "sequence": 2})).json()
    ev = await make_event(admin)
    assert ev["stage_id"] == s1["id"]  # the first non-terminal stage is the default
    url = f"/admin/events/{ev['id']}"
    await admin.patch(url, json={"kanban_state": "blocked"})
    r = await admin.patch(url, json={"stage_id": s2["id"]})
    assert r.json()["kanban_state"] == "normal"
    await admin.patch(url, json={"kanban_state": "cancel"})
    r = await admin.patch(url, json={"stage_id": s1["id"]})
    assert r.json()["kanban_state"] == "cancel" and r.json()["stage_id"] == s1["id"]


async def test_publish_and_unpublish_are_the_only_writers_and_are_audited(api: Api, admin):
    ev = await make_event(admin)
    r = await admin.post(f"/admin/events/{ev['id']}/publish")
    assert r.status_code == 200
    pub = r.json()
    assert pub["is_published"] is True and pub["date_publish"] is not None
    assert pub["revision"] == 2
    r = await admin.post(f"/admin/events/{ev['id']}/unpublish")
    assert r.json()["is_published"] is False and r.json()["date_publish"] is None
    async with api.pool.acquire() as conn:
        verbs = await conn.fetch(
            "SELECT verb, summary FROM event.event_audit_log WHERE event_id = $1 ORDER BY id",
            uuid.UUID(ev["id"]),
        )
    assert [v["verb"] for v in verbs] == ["event_created", "event_published", "event_unpublished"]


async def test_publish_of_an_archived_event_is_refused_and_audited(api: Api, admin):
    ev = await make_event(admin, active=False)
    r = await admin.post(f"/admin/events/{ev['id']}/publish")
    assert r.status_code == 409 and r.json()["error"]["code"] == "event_archived"
    async with api.pool.acquire() as conn:
        verb = await conn.fetchval(
            "SELECT verb FROM event.event_audit_log WHERE event_id = $1 ORDER BY id DESC LIMIT 1",
            uuid.UUID(ev["id"]),
        )
    assert verb == "publish_refused"


async def test_mark_done_moves_to_first_pipe_end_stage(admin: httpx.AsyncClient):
    ev = await make_event(admin)
    r = await admin.post(f"/admin/events/{ev['id']}/mark-done")
    assert r.status_code == 409 and r.json()["error"]["code"] == "no_pipe_end_stage"
    await admin.post("/admin/stages", json={"name": "Ended late", "sequence": 9, "pipe_end": True})
    first = (
        await admin.post("/admin/stages", json={"name": "Ended", "sequence": 5, "pipe_end": True})
    ).json()
    r = await admin.post(f"/admin/events/{ev['id']}/mark-done")
    assert r.status_code == 200 and r.json()["stage_id"] == first["id"]


async def test_delete_refuses_events_with_registrations(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin)
    other = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    r = await admin.delete(f"/admin/events/{ev['id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "event_has_registrations"
    assert (await admin.delete(f"/admin/events/{other['id']}")).status_code == 204
    assert (await admin.get(f"/admin/events/{other['id']}")).status_code == 404


async def test_derived_ongoing_and_finished_from_instants(admin: httpx.AsyncClient):
    past = await make_event(
        admin, date_begin="2020-01-01T09:00:00Z", date_end="2020-01-01T10:00:00Z"
    )
    assert past["is_finished"] is True and past["is_ongoing"] is False
    now = await make_event(
        admin, date_begin="2020-01-01T09:00:00Z", date_end="2099-01-01T10:00:00Z"
    )
    assert now["is_ongoing"] is True and now["is_finished"] is False


async def test_list_filters_and_paginates_with_an_opaque_cursor(admin: httpx.AsyncClient):
    for i in range(5):
        await make_event(
            admin,
            name=f"Meetup {i}",
            date_begin=f"2027-0{i + 1}-01T10:00:00Z",
            date_end=f"2027-0{i + 1}-01T12:00:00Z",
        )
    await make_event(admin, name="Gala")
    r = await admin.get("/admin/events", params={"q": "meetup", "limit": 2})
    page1 = r.json()
    assert [e["name"] for e in page1["items"]] == ["Meetup 0", "Meetup 1"]
    assert "seats" in page1["items"][0]
    r = await admin.get(
        "/admin/events", params={"q": "meetup", "limit": 2, "cursor": page1["next_cursor"]}
    )
    assert [e["name"] for e in r.json()["items"]] == ["Meetup 2", "Meetup 3"]
    r = await admin.get(
        "/admin/events",
        params={"date_from": "2027-04-15T00:00:00Z", "date_to": "2027-05-11T00:00:00Z"},
    )
    assert sorted(e["name"] for e in r.json()["items"]) == ["Gala", "Meetup 4"]
    r = await admin.get("/admin/events", params={"published": "true"})
    assert r.json() == {"items": [], "next_cursor": None}
    r = await admin.get("/admin/events", params={"cursor": "garbage!"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_cursor"
    r = await admin.get("/admin/events", params={"limit": 500})
    assert r.status_code == 422


async def test_seats_read_model_counts_open_done_and_held_active_rows(api: Api, admin):
    ev = await make_event(admin, seats_max=10)
    eid = uuid.UUID(ev["id"])
    early = {"event_id": ev["id"], "name": "Early", "seats_max": 3}
    ticket = (await admin.post("/admin/tickets", json=early)).json()
    tid = uuid.UUID(ticket["id"])
    await insert_registration(api.pool, eid, ticket=tid)
    await insert_registration(api.pool, eid, ticket=tid, state="done")
    await insert_registration(api.pool, eid, state="draft")  # an officer's draft: no seat
    await insert_registration(api.pool, eid, state="cancel")
    await insert_registration(api.pool, eid, state="draft", sale_status="to_pay")  # held
    await insert_registration(api.pool, eid, state="draft", sale_status="sold")  # no seat
    await insert_registration(api.pool, eid, state="cancel", sale_status="to_pay")  # no seat
    r = await admin.get(f"/admin/events/{ev['id']}/seats")
    seats = r.json()
    assert seats["event"] == {
        "limited": True,
        "cap": 10,
        "reserved": 1,
        "used": 1,
        "held": 1,
        "taken": 3,
        "available": 7,
    }
    assert seats["tickets"][0]["available"] == 1 and seats["available_min"] == 1
    await insert_registration(api.pool, eid, ticket=tid)
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()
    assert seats["tickets"][0]["is_sold_out"] is True and seats["is_sold_out"] is True


async def test_a_lock_wait_beyond_lock_timeout_answers_busy(api: Api, admin):
    ev = await make_event(admin)
    async with api.pool.acquire() as holder, holder.transaction():
        await holder.execute(
            "SELECT 1 FROM event.events WHERE id = $1 FOR UPDATE", uuid.UUID(ev["id"])
        )
        r = await admin.patch(f"/admin/events/{ev['id']}", json={"name": "Renamed"})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "busy" and r.headers["retry-after"] == "1"
    assert (await admin.get(f"/admin/events/{ev['id']}")).json()["name"] == "PyCon Lisbon"


async def test_a_terminal_stage_is_reached_only_through_mark_done(admin: httpx.AsyncClient):
    end = (await admin.post("/admin/stages", json={"name": "Ended", "pipe_end": True})).json()
    r = await admin.post("/admin/events", json=event_body(stage_id=end["id"]))
    assert r.status_code == 422
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("use_mark_done", "stage_id")
    ev = await make_event(admin)
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"stage_id": end["id"]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "use_mark_done"
    done = await admin.post(f"/admin/events/{ev['id']}/mark-done")
    assert done.status_code == 200 and done.json()["stage_id"] == end["id"]
    again = await admin.patch(f"/admin/events/{ev['id']}", json={"name": "Renamed"})
    assert again.status_code == 200  # an event already there may be edited


async def test_the_done_sweep_reaches_archived_events(api: Api, admin: httpx.AsyncClient):
    from datetime import UTC, datetime

    from events_svc.verbs.events.lifecycle import sweep_done_events

    end = (await admin.post("/admin/stages", json={"name": "Ended", "pipe_end": True})).json()
    past = event_body(date_begin="2020-01-01T00:00:00Z", date_end="2020-01-02T00:00:00Z")
    archived = await make_event(admin, **{**past, "active": False})
    assert await sweep_done_events(api.pool, datetime.now(UTC)) == 1
    view = (await admin.get(f"/admin/events/{archived['id']}")).json()
    assert view["stage_id"] == end["id"] and view["active"] is False


async def test_registrations_follow_their_events_company(api: Api, admin: httpx.AsyncClient):
    acme, other = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(acme))
    r = (await admin.post("/admin/registrations", json={"event_id": ev["id"]})).json()
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    moved = await admin.patch(f"/admin/events/{ev['id']}", json={"company_id": str(other)})
    assert moved.status_code == 200
    async with api.pool.acquire() as conn:
        companies = await conn.fetch(
            "SELECT DISTINCT company_id FROM event.registrations WHERE event_id = $1",
            uuid.UUID(ev["id"]),
        )
    assert [c["company_id"] for c in companies] == [other]
    theirs = await api.token("registration:read", company=other)
    seen = await api.client.get(f"/admin/registrations/{r['id']}", headers=theirs)
    assert seen.status_code == 200  # the new company sees it, through the one fence
    mine = await api.token("registration:read", company=acme)
    gone = await api.client.get(f"/admin/registrations/{r['id']}", headers=mine)
    assert gone.status_code == 404
