"""Configuration nouns: stages, tags, types, questions, tickets, slots, and their guards."""

from __future__ import annotations

import uuid

import asyncpg
import httpx
import pytest

from tests.probes.helpers import Api, insert_registration, make_event


async def assert_wall(work, constraint: str) -> None:
    """The schema itself refuses the write, naming the constraint."""
    with pytest.raises(asyncpg.IntegrityConstraintViolationError) as caught:
        await work
    assert caught.value.constraint_name == constraint


async def test_stage_crud_and_stage_in_use(admin: httpx.AsyncClient):
    r = await admin.post("/admin/stages", json={"name": "Draft", "sequence": 1})
    assert r.status_code == 201
    stage = r.json()
    r = await admin.patch(f"/admin/stages/{stage['id']}", json={"fold": True})
    assert r.json()["fold"] is True
    assert (await admin.get("/admin/stages")).json()["items"][0]["id"] == stage["id"]
    await make_event(admin, stage_id=stage["id"])
    r = await admin.delete(f"/admin/stages/{stage['id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "stage_in_use", r.text
    spare = (await admin.post("/admin/stages", json={"name": "Spare"})).json()
    assert (await admin.delete(f"/admin/stages/{spare['id']}")).status_code == 204
    assert (await admin.get(f"/admin/stages/{spare['id']}")).status_code == 404


async def test_tags_belong_to_categories_and_events_carry_them(admin: httpx.AsyncClient):
    cat = (await admin.post("/admin/tag-categories", json={"name": "Audience"})).json()
    r = await admin.post("/admin/tags", json={"category_id": str(uuid.uuid4()), "name": "X"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "reference_not_found"
    tag = (await admin.post("/admin/tags", json={"category_id": cat["id"], "name": "Dev"})).json()
    assert tag["color"] is None  # never a random colour
    r = await admin.post("/admin/tags", json={"category_id": cat["id"], "name": "Y", "color": 99})
    assert r.status_code == 422
    ev = await make_event(admin, tag_ids=[tag["id"]])
    assert ev["tag_ids"] == [tag["id"]]
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"tag_ids": []})
    assert r.json()["tag_ids"] == []
    assert (await admin.delete(f"/admin/tag-categories/{cat['id']}")).status_code == 204
    assert (await admin.get(f"/admin/tags/{tag['id']}")).status_code == 404


async def test_types_validate_timezone_and_seats(admin: httpx.AsyncClient):
    r = await admin.post("/admin/types", json={"name": "T", "date_tz": "Nowhere/City"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_timezone"
    r = await admin.post("/admin/types", json={"name": "T", "seats_max": -1})  # the model's bound
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_failed"
    assert r.json()["error"]["field"] == "seats_max"
    t = (await admin.post("/admin/types", json={"name": "T"})).json()
    r = await admin.post(
        f"/admin/types/{t['id']}/tickets", json={"name": "A", "limit_max_per_order": 31}
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "limit_max_per_order"
    r = await admin.post(
        f"/admin/types/{t['id']}/tickets",
        json={"name": "A", "seats_max": 2, "limit_max_per_order": 3},
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "per_order_cap_out_of_range"
    line = (await admin.post(f"/admin/types/{t['id']}/tickets", json={"name": "A"})).json()
    ticket_id = line["tickets"][0]["id"]
    r = await admin.delete(f"/admin/types/{t['id']}/tickets/{ticket_id}")
    assert r.status_code == 200 and r.json()["tickets"] == []
    r = await admin.delete(f"/admin/types/{t['id']}/tickets/{ticket_id}")
    assert r.status_code == 404


async def test_question_guards(api: Api, admin: httpx.AsyncClient):
    r = await admin.post("/admin/questions", json={"title": "Q", "is_default": True})
    assert r.status_code == 422 and r.json()["error"]["code"] == "default_question_not_reusable"
    sizes = [{"name": "S", "sequence": 1}, {"name": "M", "sequence": 2}]
    q = (await admin.post("/admin/questions", json={"title": "Size", "answers": sizes})).json()
    assert [a["name"] for a in q["answers"]] == ["S", "M"]
    ev = await make_event(admin)
    r = await admin.post(f"/admin/events/{ev['id']}/questions", json={"question_id": q["id"]})
    assert r.status_code == 201
    r = await admin.post(f"/admin/events/{ev['id']}/questions", json={"question_id": q["id"]})
    assert r.status_code == 409 and r.json()["error"]["code"] == "already_linked"
    # an attendee answers with a suggested answer: the kind locks, the answer and question stay
    reg = await insert_registration(api.pool, uuid.UUID(ev["id"]))
    answer_id = uuid.UUID(q["answers"][0]["id"])
    async with api.pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO event.registration_answers (registration_id, question_id,"
            " value_answer_id) VALUES ($1, $2, $3)",
            reg,
            uuid.UUID(q["id"]),
            answer_id,
        )
    r = await admin.patch(f"/admin/questions/{q['id']}", json={"question_type": "text_box"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "question_kind_locked"
    r = await admin.patch(f"/admin/questions/{q['id']}", json={"title": "T-shirt size"})
    assert r.status_code == 200 and r.json()["title"] == "T-shirt size"
    r = await admin.delete(f"/admin/questions/{q['id']}/answers/{answer_id}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "answer_in_use"
    r = await admin.delete(f"/admin/questions/{q['id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "question_in_use"
    spare = q["answers"][1]["id"]
    r = await admin.patch(f"/admin/questions/{q['id']}/answers/{spare}", json={"name": "Medium"})
    assert r.json()["answers"][1]["name"] == "Medium"
    assert (await admin.delete(f"/admin/questions/{q['id']}/answers/{spare}")).status_code == 204
    r = await admin.post(f"/admin/questions/{q['id']}/answers", json={"name": "L"})
    assert r.status_code == 201 and len(r.json()["answers"]) == 2
    r = await admin.delete(f"/admin/events/{ev['id']}/questions/{q['id']}")
    assert r.status_code == 204


async def test_an_answer_must_belong_to_its_question(api: Api, admin: httpx.AsyncClient):
    q1 = await admin.post("/admin/questions", json={"title": "A", "answers": [{"name": "x"}]})
    q2 = (await admin.post("/admin/questions", json={"title": "B"})).json()
    ev = await make_event(admin)
    reg = await insert_registration(api.pool, uuid.UUID(ev["id"]))
    sql = "INSERT INTO event.registration_answers (registration_id, question_id, value_answer_id)"
    other_answer = uuid.UUID(q1.json()["answers"][0]["id"])
    async with api.pool.acquire() as conn:
        await assert_wall(
            conn.execute(sql + " VALUES ($1, $2, $3)", reg, uuid.UUID(q2["id"]), other_answer),
            "registration_answers_answer_of_question_fkey",
        )
        await assert_wall(
            conn.execute(sql + " VALUES ($1, $2, NULL)", reg, uuid.UUID(q2["id"])),
            "registration_answers_value_xor",
        )


async def test_ticket_guards(api: Api, admin: httpx.AsyncClient):
    ev = await make_event(admin)
    base = {"event_id": ev["id"], "name": "Std"}
    r = await admin.post("/admin/tickets", json={**base, "seats_max": 4, "limit_max_per_order": 5})
    assert r.status_code == 422 and r.json()["error"]["code"] == "per_order_cap_out_of_range"
    r = await admin.post(
        "/admin/tickets",
        json={
            **base,
            "start_sale_datetime": "2027-02-01T00:00:00Z",
            "end_sale_datetime": "2027-01-01T00:00:00Z",
        },
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "date_order"
    r = await admin.post("/admin/tickets", json={**base, "event_id": str(uuid.uuid4())})
    assert r.status_code == 404
    t = (await admin.post("/admin/tickets", json={**base, "seats_max": 10})).json()
    r = await admin.patch(f"/admin/tickets/{t['id']}", json={"limit_max_per_order": 30})
    assert r.status_code == 422 and r.json()["error"]["code"] == "per_order_cap_out_of_range"
    r = await admin.patch(f"/admin/tickets/{t['id']}", json={"limit_max_per_order": 10})
    assert r.status_code == 200 and r.json()["limit_max_per_order"] == 10
    await insert_registration(api.pool, uuid.UUID(ev["id"]), ticket=uuid.UUID(t["id"]))
    r = await admin.delete(f"/admin/tickets/{t['id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "ticket_has_registrations"
    assert (await admin.get(f"/admin/tickets/{t['id']}")).status_code == 200


async def test_a_registration_ticket_must_belong_to_its_event(api: Api, admin):
    ev1, ev2 = await make_event(admin), await make_event(admin)
    t = (await admin.post("/admin/tickets", json={"event_id": ev1["id"], "name": "A"})).json()
    await assert_wall(
        insert_registration(api.pool, uuid.UUID(ev2["id"]), ticket=uuid.UUID(t["id"])),
        "registrations_ticket_in_event_fkey",
    )


async def test_slot_guards(api: Api, admin: httpx.AsyncClient):
    plain = await make_event(admin)
    dates = {"date_begin": "2027-05-10T10:00:00Z", "date_end": "2027-05-10T11:00:00Z"}
    r = await admin.post("/admin/slots", json={"event_id": plain["id"], **dates})
    assert r.status_code == 422 and r.json()["error"]["code"] == "event_not_multi_slots"
    ev = await make_event(admin, is_multi_slots=True)
    slot = {"event_id": ev["id"], **dates}
    r = await admin.post("/admin/slots", json={**slot, "date_end": "2027-05-10T09:00:00Z"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "date_order"
    r = await admin.post("/admin/slots", json={**slot, "date_begin": "2027-05-01T10:00:00Z"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "slot_outside_event"
    s = (await admin.post("/admin/slots", json=slot)).json()
    r = await admin.patch(f"/admin/slots/{s['id']}", json={"date_end": "2027-06-01T00:00:00Z"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "slot_outside_event"
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"date_begin": "2027-05-11T00:00:00Z"})
    assert r.status_code == 409 and r.json()["error"]["code"] == "slots_outside_event_range"
    seats = (await admin.get(f"/admin/events/{ev['id']}/seats")).json()
    assert seats["slots"][0]["cap"] == 100 and seats["event"]["cap"] == 100
    # a multi-slot event requires the slot on every registration (the DB wall)
    await assert_wall(
        insert_registration(api.pool, uuid.UUID(ev["id"])), "registrations_slot_required"
    )
    await insert_registration(api.pool, uuid.UUID(ev["id"]), slot=uuid.UUID(s["id"]))
    r = await admin.delete(f"/admin/slots/{s['id']}")
    assert r.status_code == 409 and r.json()["error"]["code"] == "slot_has_registrations"


async def test_an_event_with_slotless_registrations_cannot_become_multi_slot(api: Api, admin):
    ev = await make_event(admin)
    await insert_registration(api.pool, uuid.UUID(ev["id"]))
    r = await admin.patch(f"/admin/events/{ev['id']}", json={"is_multi_slots": True})
    assert r.status_code == 409 and r.json()["error"]["code"] == "registrations_without_slot"


async def test_a_stage_with_events_cannot_become_terminal(admin):
    stage = (await admin.post("/admin/stages", json={"name": "Live"})).json()
    await make_event(admin, stage_id=stage["id"])
    r = await admin.patch(f"/admin/stages/{stage['id']}", json={"pipe_end": True})
    assert r.status_code == 409 and r.json()["error"]["code"] == "stage_in_use"
    empty = (await admin.post("/admin/stages", json={"name": "Later"})).json()
    r = await admin.patch(f"/admin/stages/{empty['id']}", json={"pipe_end": True})
    assert r.status_code == 200 and r.json()["pipe_end"] is True
