"""Probes of the operator commands on registrations: separate scopes, authorization before
lookup, masked lookup and counts, reasoned corrections with If-Match and a revision
history, cancel and reactivate with a reason, and Idempotency-Key replays."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.probes.helpers import (
    BEGIN,
    Api,
    cancel,
    correct,
    make_event,
    outbox,
    run,
    scheduler,
    template,
)


async def attendee(admin: httpx.AsyncClient, event_id: str, **body: Any) -> dict[str, Any]:
    fields = {"name": "Ada Lovelace", "email": "ada@example.org", "phone": "+44 20 7946 0958"}
    r = await admin.post("/admin/registrations", json={"event_id": event_id, **fields, **body})
    assert r.status_code == 201, r.text
    return dict(r.json())


def code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])


async def as_(api: Api, *scopes: str, company: uuid.UUID | None = None) -> httpx.AsyncClient:
    headers = await api.token(*scopes, company=company)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=api.app),
        base_url=str(api.client.base_url),
        headers=headers,
    )


async def audit(api: Api, object_id: str) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return await conn.fetch(
            "SELECT verb, summary FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
            uuid.UUID(object_id),
        )


# --- scopes and authorization --------------------------------------------------------


async def test_each_command_needs_its_own_scope(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    writer = await as_(api, "registration:read", "registration:write")
    patch = await writer.patch(url, json={"reason": "x", "name": "B"}, headers={"If-Match": "1"})
    assert (patch.status_code, code(patch), patch.json()["error"]["scope"]) == (
        403,
        "missing_scope",
        "registration:correct",
    )
    for path in ("cancel", "reactivate"):
        resp = await writer.post(f"{url}/{path}", json={"reason": "x"})
        assert resp.status_code == 403 and resp.json()["error"]["scope"] == "registration:lifecycle"
    # the state verbs stay with registration:write
    assert (await writer.post(f"{url}/set-done")).json()["state"] == "done"
    corrector = await as_(api, "registration:correct")
    resp = await corrector.patch(url, json={"reason": "x", "name": "B"}, headers={"If-Match": "2"})
    assert resp.status_code == 200 and resp.json()["name"] == "B***"
    assert (await corrector.post(f"{url}/cancel", json={"reason": "x"})).status_code == 403
    reader = await as_(api, "event:read")
    resp = await reader.get(f"/admin/events/{ev['id']}/registrations/count")
    assert resp.status_code == 403 and resp.json()["error"]["scope"] == "registration:read"
    assert (await reader.get(f"{url}/revisions")).status_code == 403
    masked = await as_(api, "registration:read")
    resp = await masked.get(f"{url}/revisions", params={"pii": "full"})
    assert resp.status_code == 403 and resp.json()["error"]["scope"] == "registration:pii"


async def test_another_companys_registration_is_404_on_every_route(api: Api, admin):
    ours, theirs = uuid.uuid4(), uuid.uuid4()
    ev = await make_event(admin, company_id=str(theirs))
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    everything = (
        "registration:read",
        "registration:correct",
        "registration:lifecycle",
        "registration:pii",
        "registration:write",
    )
    outsider = await as_(api, *everything, company=ours)
    keyed = {"Idempotency-Key": "probe"}
    calls = [
        outsider.post(f"{url}/cancel", json={"reason": "x"}, headers=keyed),
        outsider.get(url),
        outsider.get(f"{url}/revisions"),
        outsider.patch(url, json={"reason": "x", "name": "B"}, headers={"If-Match": "1"}),
        outsider.post(f"{url}/cancel", json={"reason": "x"}),
        outsider.post(f"{url}/reactivate", json={"reason": "x"}),
        outsider.post(f"{url}/confirm"),
        outsider.get(f"/admin/events/{ev['id']}/registrations/count"),
    ]
    for resp in await asyncio.gather(*calls):
        assert (resp.status_code, code(resp)) == (404, "not_found"), resp.text
    listed = await outsider.get(
        "/admin/registrations", params={"barcode": r["barcode"], "event_id": ev["id"]}
    )
    assert listed.json()["items"] == []
    insider = await as_(api, *everything, company=theirs)
    assert (await insider.get(url)).status_code == 200
    async with api.pool.acquire() as conn:  # the refused command claimed no key
        assert await conn.fetchval("SELECT count(*) FROM event.command_replays") == 0
    assert (await admin.get(url)).json()["version"] == 1  # nothing was written


async def test_lookup_is_masked_full_or_denied(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    masked = await as_(api, "registration:read")
    view = (await masked.get(url)).json()
    assert (view["name"], view["email"], view["phone"]) == (
        "A*** L***",
        "a***@example.org",
        "***58",
    )
    denied = await masked.get(url, params={"pii": "full"})
    assert (denied.status_code, code(denied)) == (403, "missing_scope")
    full = await as_(api, "registration:read", "registration:pii")
    assert (await full.get(url, params={"pii": "full"})).json()["email"] == "ada@example.org"
    denied_list = await (await as_(api, "event:read")).get(
        "/admin/registrations", params={"event_id": ev["id"]}
    )
    assert denied_list.status_code == 403


async def test_an_email_is_a_selector_only_for_an_actor_who_may_see_it(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"], name="Grace", email="hidden@example.org")
    masked = await as_(api, "registration:read")
    full = await as_(api, "registration:read", "registration:pii")

    async def ids(client: httpx.AsyncClient, q: str) -> list[str]:
        page = await client.get("/admin/registrations", params={"event_id": ev["id"], "q": q})
        return [x["id"] for x in page.json()["items"]]

    assert await ids(masked, "hidden@") == []  # a masked actor cannot probe an address
    assert await ids(full, "hidden@") == [r["id"]]
    assert await ids(masked, "grac") == []  # a part of a name: only with registration:pii
    assert await ids(full, "grac") == [r["id"]]
    assert await ids(masked, "GRACE") == [r["id"]]  # a whole name matches, case aside
    assert await ids(masked, r["barcode"]) == [r["id"]]  # and exact barcodes
    assert await ids(masked, r["barcode"][:-1]) == []


@pytest.mark.parametrize("n", [0, 1, 7])
async def test_counts_by_state_and_archived_without_pii(api: Api, admin, n: int):
    ev = await make_event(admin)
    made = [await attendee(admin, ev["id"]) for _ in range(n)]
    if n == 7:
        await admin.post(f"/admin/registrations/{made[0]['id']}/set-draft")
        await admin.post(f"/admin/registrations/{made[1]['id']}/set-done")
        await cancel(admin, made[2]["id"])
        await admin.post(f"/admin/registrations/{made[3]['id']}/archive")
        await admin.post(f"/admin/registrations/{made[4]['id']}/set-done")
        await admin.post(f"/admin/registrations/{made[4]['id']}/archive")
    reader = await as_(api, "registration:read")
    resp = await reader.get(f"/admin/events/{ev['id']}/registrations/count")
    body = resp.json()
    expected = {"draft": 1, "open": 2, "done": 1, "cancel": 1} if n == 7 else None
    assert body["total"] == n
    assert body["by_state"] == (expected or {"draft": 0, "open": n, "done": 0, "cancel": 0})
    assert body["archived"] == (2 if n == 7 else 0)
    # no attendee text (ids are hex: "ada" alone can be part of one)
    assert "ada@" not in resp.text.lower() and "lovelace" not in resp.text.lower()
    missing = await reader.get(f"/admin/events/{uuid.uuid4()}/registrations/count")
    assert missing.status_code == 404


# --- corrections -------------------------------------------------------------------------


async def test_a_correction_needs_if_match_and_a_reason(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    resp = await admin.patch(url, json={"reason": "typo", "name": "Ada King"})
    assert (resp.status_code, code(resp)) == (428, "precondition_required")
    resp = await admin.patch(url, json={"reason": "typo"}, headers={"If-Match": "*"})
    assert (resp.status_code, code(resp)) == (428, "precondition_required")  # not a version
    resp = await admin.patch(url, json={"name": "Ada King"}, headers={"If-Match": "1"})
    assert resp.status_code == 422 and resp.json()["error"]["field"] == "reason"
    for blank in ("", "   ", "x" * 501):
        resp = await admin.patch(url, json={"reason": blank}, headers={"If-Match": "1"})
        assert resp.status_code == 422 and resp.json()["error"]["field"] == "reason", blank
    resp = await admin.patch(url, json={"reason": "typo", "name": "K"}, headers={"If-Match": "7"})
    assert (resp.status_code, code(resp), resp.json()["error"]["version"]) == (
        412,
        "stale_revision",
        1,
    )
    assert (await admin.get(url)).json()["version"] == 1  # nothing written by any of them


async def test_a_correction_writes_a_revision_and_an_audit_row_of_field_names(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    resp = await correct(
        admin,
        r["id"],
        reason="married name",
        name="Ada King",
        email="ada.king@example.org",
        date_closed="2027-05-11T10:00:00Z",
    )
    assert resp.status_code == 200 and resp.headers["etag"] == '"2"'
    assert resp.json()["name"] == "A*** K***"  # the answer is masked like every read
    history = (await admin.get(f"/admin/registrations/{r['id']}/revisions")).json()
    (rev,) = history["items"]
    assert (rev["version"], rev["verb"], rev["reason"]) == (2, "correct", "married name")
    assert rev["fields"] == ["date_closed", "email", "name"]
    assert rev["changes"]["name"] == {"before": "A*** L***", "after": "A*** K***"}
    assert rev["changes"]["email"] == {"before": "a***@example.org", "after": "a***@example.org"}
    assert rev["changes"]["date_closed"]["before"] is None
    assert rev["actor"] and rev["at"]
    full = await admin.get(f"/admin/registrations/{r['id']}/revisions", params={"pii": "full"})
    changes = full.json()["items"][0]["changes"]
    assert changes["name"] == {"before": "Ada Lovelace", "after": "Ada King"}
    rows = await audit(api, r["id"])
    verbs = [row["verb"] for row in rows]
    assert verbs == [
        "registration_created",
        "registration_corrected",
        "registration_revisions_pii_read",
    ]
    corrected = json.dumps([dict(row) for row in rows], default=str)
    assert "King" not in corrected and "married" not in corrected and "ada.king" not in corrected
    assert rows[1]["summary"] == {"fields": ["date_closed", "email", "name"]}


async def test_a_correction_that_changes_nothing_writes_nothing(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    resp = await correct(admin, r["id"], name="Ada Lovelace", company_name="")
    assert resp.status_code == 200 and resp.json()["version"] == 1
    assert (await admin.get(f"/admin/registrations/{r['id']}/revisions")).json()["items"] == []
    assert [row["verb"] for row in await audit(api, r["id"])] == ["registration_created"]


async def test_racing_corrections_one_wins_one_is_stale(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    for round_ in range(5):
        version = (await admin.get(url)).json()["version"]
        calls = [
            admin.patch(
                url,
                json={"reason": "race", "name": f"N{round_}{i}"},
                headers={"If-Match": str(version)},
            )
            for i in range(2)
        ]
        answers = sorted(resp.status_code for resp in await asyncio.gather(*calls))
        assert answers == [200, 412]
    history = (await admin.get(f"{url}/revisions")).json()["items"]
    assert [h["version"] for h in history] == [6, 5, 4, 3, 2]


async def test_a_correction_replayed_with_its_key_answers_the_first_result(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    headers = {"If-Match": "1", "Idempotency-Key": "fix-1"}
    body = {"reason": "typo", "name": "Ada King"}
    first = await admin.patch(url, json=body, headers=headers, params={"pii": "full"})
    assert first.status_code == 200 and first.json()["version"] == 2
    # the stale If-Match of the replay does not matter: the first answer is given back
    again = await admin.patch(url, json=body, headers=headers, params={"pii": "full"})
    assert (again.status_code, again.json()) == (200, first.json())
    masked = await admin.patch(url, json=body, headers=headers)
    assert masked.json()["name"] == "A*** K***"  # replays are masked like every read
    other = await admin.patch(url, json={"reason": "typo", "name": "B"}, headers=headers)
    assert (other.status_code, code(other)) == (409, "idempotency_key_conflict")
    assert len((await admin.get(f"{url}/revisions")).json()["items"]) == 1
    # concurrent twins: one write, the same answer twice
    twins = {"If-Match": "2", "Idempotency-Key": "fix-2"}
    answers = await asyncio.gather(
        *(admin.patch(url, json={"reason": "t", "name": "Ada L"}, headers=twins) for _ in range(4))
    )
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["version"] for a in answers} == {3}
    assert len((await admin.get(f"{url}/revisions")).json()["items"]) == 2
    async with api.pool.acquire() as conn:  # the replay store holds no attendee data
        kept = await conn.fetch("SELECT answer::text FROM event.command_replays")
    assert len(kept) == 2 and not any("Ada" in k[0] or "ada@" in k[0] for k in kept)


async def test_a_replay_answers_the_attendees_current_data(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    first = await admin.post(
        f"{url}/cancel", json={"reason": "x"}, headers={"Idempotency-Key": "c"}
    )
    await correct(admin, r["id"], name="Grace Hopper", company_name="Navy")
    again = await admin.post(
        f"{url}/cancel",
        json={"reason": "x"},
        headers={"Idempotency-Key": "c"},
        params={"pii": "full"},
    )
    body = again.json()
    assert (body["version"], body["state"], body["company_name"]) == (2, "cancel", "")
    assert body["name"] == "Grace Hopper"  # attendee data is never kept for replays
    assert first.json()["version"] == 2


async def test_a_write_answered_in_full_is_audited(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    full = {"pii": "full"}
    await correct(admin, r["id"], params=full, name="Ada King")
    url = f"/admin/registrations/{r['id']}"
    await admin.post(f"{url}/cancel", json={"reason": "x"}, params=full)
    await admin.post(f"{url}/reactivate", json={"reason": "x"})  # masked: not audited
    reads = [row for row in await audit(api, r["id"]) if row["verb"] == "registration_pii_read"]
    assert len(reads) == 2


async def test_a_refused_command_keeps_its_key_free(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    headers = {"If-Match": "9", "Idempotency-Key": "k"}
    body = {"reason": "typo", "name": "Ada King"}
    assert (await admin.patch(url, json=body, headers=headers)).status_code == 412
    headers["If-Match"] = "1"
    assert (await admin.patch(url, json=body, headers=headers)).status_code == 200


async def test_corrections_of_cancelled_attended_and_archived_rows(admin):
    ev = await make_event(admin)
    rows = [await attendee(admin, ev["id"]) for _ in range(3)]
    await cancel(admin, rows[0]["id"])
    await admin.post(f"/admin/registrations/{rows[1]['id']}/set-done")
    await admin.post(f"/admin/registrations/{rows[2]['id']}/archive")
    for row in rows:
        resp = await correct(admin, row["id"], company_name="Analytical Engines")
        assert resp.status_code == 200 and resp.json()["company_name"] == "Analytical Engines"
    states = [(await admin.get(f"/admin/registrations/{x['id']}")).json() for x in rows]
    assert [(s["state"], s["active"]) for s in states] == [
        ("cancel", True),
        ("done", True),
        ("open", False),
    ]


async def test_revision_rows_cannot_be_rewritten(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    await correct(admin, r["id"], name="B")
    async with api.pool.acquire() as conn:
        for statement in (
            "UPDATE event.registration_revisions SET reason = 'x'",
            "DELETE FROM event.registration_revisions",
            "TRUNCATE event.registration_revisions",
        ):
            with pytest.raises(asyncpg.RestrictViolationError):
                await conn.execute(statement)
        assert await conn.fetchval("SELECT count(*) FROM event.registration_revisions") == 1


async def test_the_history_pages_newest_first(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    for i in range(5):
        await correct(admin, r["id"], name=f"Name {i}")
    url = f"/admin/registrations/{r['id']}/revisions"
    first = (await admin.get(url, params={"limit": 2})).json()
    second = (await admin.get(url, params={"limit": 2, "cursor": first["next_cursor"]})).json()
    third = (await admin.get(url, params={"limit": 2, "cursor": second["next_cursor"]})).json()
    versions = [i["version"] for page in (first, second, third) for i in page["items"]]
    assert versions == [6, 5, 4, 3, 2] and third["next_cursor"] is None


# --- cancel and reactivate ------------------------------------------------------------------


async def test_cancel_and_reactivate_need_a_reason_and_keep_it(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    for body in ({}, {"reason": ""}, {"reason": " "}, {"reason": "x", "state": "cancel"}):
        assert (await admin.post(f"{url}/cancel", json=body)).status_code == 422, body
    assert (await admin.post(f"{url}/cancel")).status_code == 422
    cancelled = await cancel(admin, r["id"], reason="asked by phone")
    assert cancelled.json()["state"] == "cancel"
    resp = await admin.post(f"{url}/confirm")
    assert (resp.status_code, code(resp)) == (409, "use_reactivate")
    back = await admin.post(f"{url}/reactivate", json={"reason": "came back"})
    assert back.status_code == 200 and back.json()["state"] == "open"
    history = (await admin.get(f"{url}/revisions")).json()["items"]
    assert [(h["verb"], h["reason"], h["changes"]["state"]) for h in history] == [
        ("reactivate", "came back", {"before": "cancel", "after": "open"}),
        ("cancel", "asked by phone", {"before": "open", "after": "cancel"}),
    ]
    verbs = [row["verb"] for row in await audit(api, r["id"])]
    assert verbs == ["registration_created", "registration_cancelled", "registration_confirmed"]
    # a second cancel of a cancelled row, a second reactivation of an open one: no write
    assert (await admin.post(f"{url}/reactivate", json={"reason": "again"})).json()["version"] == 3
    await admin.post(f"{url}/set-done")
    resp = await admin.post(f"{url}/reactivate", json={"reason": "x"})
    assert (resp.status_code, code(resp)) == (409, "registration_not_cancelled")


async def test_lifecycle_of_archived_attended_and_past_rows(api: Api, admin):
    ev = await make_event(admin)
    archived, attended = await attendee(admin, ev["id"]), await attendee(admin, ev["id"])
    await admin.post(f"/admin/registrations/{archived['id']}/archive")
    await admin.post(f"/admin/registrations/{attended['id']}/set-done")
    for row in (archived, attended):
        resp = await cancel(admin, row["id"])
        assert resp.status_code == 200 and resp.json()["state"] == "cancel"
    back = await admin.post(
        f"/admin/registrations/{archived['id']}/reactivate", json={"reason": "x"}
    )
    assert (back.json()["state"], back.json()["active"]) == ("open", False)  # still archived
    # an event that has ended: the record can still be put right
    past = await make_event(
        admin, date_begin="2020-01-01T09:00:00Z", date_end="2020-01-02T18:00:00Z"
    )
    old = await attendee(admin, past["id"])
    await cancel(admin, old["id"])
    back = await admin.post(f"/admin/registrations/{old['id']}/reactivate", json={"reason": "x"})
    assert back.status_code == 200 and back.json()["state"] == "open"


async def test_racing_lifecycle_twins_with_one_key_write_once(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    keyed = {"Idempotency-Key": "twin"}
    answers = await asyncio.gather(
        *(admin.post(f"{url}/cancel", json={"reason": "x"}, headers=keyed) for _ in range(5))
    )
    assert {a.status_code for a in answers} == {200}
    assert {(a.json()["state"], a.json()["version"]) for a in answers} == {("cancel", 2)}
    assert len((await admin.get(f"{url}/revisions")).json()["items"]) == 1


async def test_reactivation_rechecks_seats_and_the_event(admin):
    ev = await make_event(admin, seats_max=1)
    first = await attendee(admin, ev["id"])
    await cancel(admin, first["id"])
    await attendee(admin, ev["id"])  # the freed seat is taken
    url = f"/admin/registrations/{first['id']}/reactivate"
    resp = await admin.post(url, json={"reason": "x"})
    assert (resp.status_code, code(resp)) == (409, "event_seats_exhausted")
    assert (await admin.get(f"/admin/registrations/{first['id']}")).json()["state"] == "cancel"
    other = await make_event(admin)
    gone = await attendee(admin, other["id"])
    await cancel(admin, gone["id"])
    await admin.patch(f"/admin/events/{other['id']}", json={"kanban_state": "cancel"})
    resp = await admin.post(f"/admin/registrations/{gone['id']}/reactivate", json={"reason": "x"})
    assert (resp.status_code, code(resp)) == (409, "event_cancelled")


async def test_cancel_and_reactivate_honour_if_match(admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    resp = await admin.post(f"{url}/cancel", json={"reason": "x"}, headers={"If-Match": "5"})
    assert (resp.status_code, code(resp)) == (412, "stale_revision")
    resp = await admin.post(f"{url}/cancel", json={"reason": "x"}, headers={"If-Match": '"1"'})
    assert resp.status_code == 200 and resp.headers["etag"] == '"2"'


async def test_a_cancel_reactivate_replay_answers_the_first_result(api: Api, admin):
    ev = await make_event(admin)
    r = await attendee(admin, ev["id"])
    url = f"/admin/registrations/{r['id']}"
    c1 = await admin.post(f"{url}/cancel", json={"reason": "x"}, headers={"Idempotency-Key": "c"})
    a1 = await admin.post(
        f"{url}/reactivate", json={"reason": "y"}, headers={"Idempotency-Key": "a"}
    )
    # the cancel replayed after the reactivation answers the cancel's own result
    c2 = await admin.post(f"{url}/cancel", json={"reason": "x"}, headers={"Idempotency-Key": "c"})
    assert (c2.status_code, c2.json()) == (200, c1.json()) and c2.json()["state"] == "cancel"
    a2 = await admin.post(
        f"{url}/reactivate", json={"reason": "y"}, headers={"Idempotency-Key": "a"}
    )
    assert a2.json() == a1.json()
    assert (await admin.get(url)).json()["state"] == "open"  # the replay changed nothing
    wrong = await admin.post(
        f"{url}/reactivate", json={"reason": "x"}, headers={"Idempotency-Key": "c"}
    )
    assert (wrong.status_code, code(wrong)) == (409, "idempotency_key_conflict")
    assert len((await admin.get(f"{url}/revisions")).json()["items"]) == 2
    bad = await admin.post(f"{url}/cancel", json={"reason": "x"}, headers={"Idempotency-Key": ""})
    assert bad.status_code == 422
    long_key = {"Idempotency-Key": "k" * 201}
    assert (
        await admin.post(f"{url}/cancel", json={"reason": "x"}, headers=long_key)
    ).status_code == 422


async def test_reactivation_arms_after_subscription_mail_once(api: Api, admin):
    ev = await make_event(admin)
    line = await scheduler(
        admin, ev["id"], await template(admin), interval_kind="after_sub", interval_unit="now"
    )
    now = BEGIN - timedelta(days=10)
    # cancelled before the pass: the line finishes with nobody to mail
    late = await attendee(admin, ev["id"], email="late@example.org")
    await cancel(admin, late["id"])
    assert (await run(api, now)).sent == 0
    assert (await admin.get(f"/admin/mails/{line['id']}")).json()["mail_done"] is True
    back = await admin.post(f"/admin/registrations/{late['id']}/reactivate", json={"reason": "x"})
    assert back.status_code == 200
    assert await outbox(api) == []  # the command itself queues nothing ...
    mail = (await admin.get(f"/admin/mails/{line['id']}")).json()
    assert mail["mail_done"] is False  # ... it re-arms the line
    assert (await run(api, now + timedelta(minutes=1))).sent == 1
    # mailed once already: a cancel and a reactivation do not mail it again
    await cancel(admin, late["id"])
    await admin.post(f"/admin/registrations/{late['id']}/reactivate", json={"reason": "y"})
    await run(api, now + timedelta(minutes=2))
    assert len(await outbox(api, line["id"])) == 1


async def test_the_operator_commands_queue_no_message(api: Api, admin):
    ev = await make_event(admin)
    await scheduler(admin, ev["id"], await template(admin))
    r = await attendee(admin, ev["id"])
    await correct(admin, r["id"], email="new@example.org")
    await cancel(admin, r["id"])
    await admin.post(f"/admin/registrations/{r['id']}/reactivate", json={"reason": "x"})
    await admin.get(f"/admin/registrations/{r['id']}/revisions", params={"pii": "full"})
    await admin.get(f"/admin/events/{ev['id']}/registrations/count")
    assert await outbox(api) == []
