"""Event operations after the start: reminders and follow-ups with a cutoff, an empty
audience, cancel and resume with deterministic counts, a failing batch backing its
operation off, the identity indexes refusing a duplicate trigger, and triggers that
nothing rewrites: not the database's UPDATE, DELETE or TRUNCATE, and no route of the app
(real PostgreSQL through the real HTTP app)."""

from __future__ import annotations

import logging
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi.routing import iter_route_contexts

from events_svc.verbs.operations import OperationOptions, run_operation_pass
from events_svc.verbs.operations.batch import run_batch
from tests.probes.helpers import (
    Api,
    cancel,
    correct,
    insert_registration,
    make_event,
    preview,
    seed,
    start,
    trigger_rows,
)

# a fault of every trigger insert; its message quotes an address, as a database error's
# text may quote a value: the operation must never record or log it
FAULT = """
CREATE FUNCTION event.probe_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'cannot write for g1@example.org'; END $$;
CREATE TRIGGER probe_fault BEFORE INSERT ON event.triggers
    FOR EACH ROW EXECUTE FUNCTION event.probe_fault();
"""
UNFAULT = "DROP TRIGGER probe_fault ON event.triggers; DROP FUNCTION event.probe_fault()"
ALL_TRIGGERS = "SELECT t::text FROM event.triggers t ORDER BY seq"


async def rows(api: Api, statement: str, *args: Any) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return list(await conn.fetch(statement, *args))


async def value(api: Api, statement: str, *args: Any) -> Any:
    async with api.pool.acquire() as conn:
        return await conn.fetchval(statement, *args)


async def view(admin: httpx.AsyncClient, op: dict[str, Any]) -> dict[str, Any]:
    r = await admin.get(f"/admin/operations/{op['id']}")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def act(admin: httpx.AsyncClient, op: dict[str, Any], action: str) -> httpx.Response:
    return await admin.post(f"/admin/operations/{op['id']}/{action}")


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


async def created_at(api: Api, event_id: str, *ages: timedelta | datetime) -> list[uuid.UUID]:
    """One open registration per age (a delta before now, or an instant); their ids."""
    now = datetime.now(UTC)
    made = []
    for age in ages:
        rid = await insert_registration(api.pool, uuid.UUID(event_id))
        at = age if isinstance(age, datetime) else now - age
        async with api.pool.acquire() as conn:
            await conn.execute(
                "UPDATE event.registrations SET created_at = $2 WHERE id = $1", rid, at
            )
        made.append(rid)
    return made


# --- reminders, follow-ups, an empty audience ---------------------------------------------


async def test_a_reminder_and_a_follow_up_reach_those_registered_by_the_cutoff(api: Api, admin):
    ev = await make_event(admin)
    cutoff = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    old, at_cutoff, mid, new = await created_at(
        api, ev["id"], timedelta(days=3), cutoff, timedelta(hours=36), timedelta(0)
    )
    leaver = (await created_at(api, ev["id"], timedelta(days=4)))[0]
    op = await preview(admin, ev["id"], "reminder", audience_cutoff=cutoff.isoformat())
    assert op["audience_estimate"] == 3  # the boundary is inclusive
    started = await start(admin, op)
    assert (started["audience"], started["event_revision"], started["ics_sequence"]) == (3, 1, 0)
    assert await cancel(admin, str(leaver)) is not None  # cancelled after the start: skipped
    done = (await act(admin, op, "resume")).json()
    assert (done["state"], done["triggers_created"], done["skipped_inactive"]) == (
        "completed",
        2,
        1,
    )
    follow = await preview(
        admin, ev["id"], "follow_up", audience_cutoff=(cutoff + timedelta(days=1)).isoformat()
    )
    await start(admin, follow)
    assert (await act(admin, follow, "resume")).json()["triggers_created"] == 3
    again = await start(
        admin, await preview(admin, ev["id"], "reminder", audience_cutoff=cutoff.isoformat())
    )
    assert (await act(admin, again, "resume")).json()["triggers_created"] == 2
    made = await trigger_rows(api.pool)
    reach = {
        kind: sorted(t["registration_id"] for t in made if str(t["operation_id"]) == o["id"])
        for kind, o in (("reminder", op), ("follow_up", follow), ("again", again))
    }
    assert reach == {
        "reminder": sorted([old, at_cutoff]),
        "follow_up": sorted([old, at_cutoff, mid]),
        "again": sorted([old, at_cutoff]),  # one message per (registration, operation)
    }
    assert new not in {t["registration_id"] for t in made}
    assert {
        (t["purpose"], t["ics_method"], t["ics_sequence"], t["event_revision"]) for t in made
    } == {
        ("event_reminder", None, 0, 1),
        ("event_follow_up", None, 0, 1),
    }
    assert {(t["ctx_date_begin"], t["ctx_date_tz"]) for t in made} == {
        (datetime(2027, 5, 10, 9, tzinfo=UTC), "Europe/Lisbon")
    }
    # the messages left the event as it was
    ev_now = (await admin.get(f"/admin/events/{ev['id']}")).json()
    assert (ev_now["revision"], ev_now["ics_sequence"]) == (1, 0)


async def test_an_empty_audience_completes_at_the_start_with_no_trigger(api: Api, admin):
    ev = await make_event(admin)
    op = await preview(admin, ev["id"])
    assert op["audience_estimate"] == 0
    done = await start(admin, op)
    assert (done["state"], done["audience"], done["processed"]) == ("completed", 0, 0)
    assert done["finished_at"] is not None and done["ics_sequence"] == 1
    moved = (await admin.get(f"/admin/events/{ev['id']}")).json()
    assert (moved["date_begin"], moved["ics_sequence"]) == ("2027-06-10T09:00:00Z", 1)
    # a reminder whose cutoff is before every registration reaches nobody
    await created_at(api, ev["id"], timedelta(0))
    early = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    reminder = await start(admin, await preview(admin, ev["id"], "reminder", audience_cutoff=early))
    assert (reminder["state"], reminder["audience"]) == ("completed", 0)
    assert error(await act(admin, reminder, "resume")) == (409, "operation_finished")
    assert await trigger_rows(api.pool) == []
    assert await value(api, "SELECT count(*) FROM event.operation_audience") == 0
    verbs = await rows(
        api,
        "SELECT verb FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
        uuid.UUID(op["id"]),
    )
    assert [v["verb"] for v in verbs] == ["event_operation_previewed", "event_operation_started"]


# --- cancel and resume ---------------------------------------------------------------------


async def test_cancel_keeps_the_triggers_written_and_stops_the_rest(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 5)
    op = await start(admin, await preview(admin, ev["id"]))
    now = datetime.now(UTC)
    summary = await run_operation_pass(api.pool, OperationOptions(batch=2, cap=1), now)
    assert (summary.batches, summary.triggers, summary.more) == (1, 2, True)
    r = await act(admin, op, "cancel")
    assert r.status_code == 200, r.text
    cancelled = r.json()
    assert (cancelled["state"], cancelled["processed"], cancelled["triggers_created"]) == (
        "cancelled",
        2,
        2,
    )
    assert cancelled["audience"] == 5 and cancelled["finished_at"] is not None
    # no pass, however late, and no resume write more
    later = now + timedelta(days=1)
    assert (await run_operation_pass(api.pool, OperationOptions(batch=2), later)).batches == 0
    for _ in range(2):
        assert error(await act(admin, op, "resume")) == (409, "operation_finished")
    assert (await view(admin, op))["triggers_created"] == 2
    assert len(await trigger_rows(api.pool)) == 2
    outcomes = await rows(
        api,
        "SELECT outcome::text AS outcome, count(*) AS n FROM event.operation_audience"
        " GROUP BY 1 ORDER BY 1",
    )
    assert [(o["outcome"], o["n"]) for o in outcomes] == [("created", 2), (None, 3)]
    # cancelling again answers it unchanged, and audits nothing more
    again = await act(admin, op, "cancel")
    assert again.status_code == 200 and again.json() == cancelled
    audits = await rows(
        api,
        "SELECT summary FROM event.event_audit_log WHERE verb = 'event_operation_cancelled'",
    )
    assert [a["summary"] for a in audits] == [
        {"from": "running", "to": "cancelled", "processed": 2, "audience": 5}
    ]
    # the event keeps the change the start made; a new reschedule may start now
    nxt = await preview(
        admin,
        ev["id"],
        "reschedule",
        date_begin="2027-07-01T09:00:00Z",
        date_end="2027-07-02T09:00:00Z",
    )
    assert (await start(admin, nxt))["ics_sequence"] == 2


async def test_cancel_and_resume_answer_by_the_operations_state(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 2)
    previewed = await preview(admin, ev["id"])
    assert error(await act(admin, previewed, "resume")) == (409, "operation_not_started")
    r = await act(admin, previewed, "cancel")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"
    assert r.json()["started_at"] is None
    r = await admin.post(f"/admin/operations/{previewed['id']}/start", headers={"If-Match": "1"})
    assert error(r) == (409, "operation_already_started")
    assert error(await act(admin, previewed, "resume")) == (409, "operation_finished")
    assert (await admin.get(f"/admin/events/{ev['id']}")).json()["ics_sequence"] == 0
    completed = await start(admin, await preview(admin, ev["id"]))
    assert (await act(admin, completed, "resume")).json()["state"] == "completed"
    assert error(await act(admin, completed, "cancel")) == (409, "operation_finished")
    assert error(await act(admin, completed, "resume")) == (409, "operation_finished")
    unknown = {"id": str(uuid.uuid4())}
    for action in ("cancel", "resume"):
        assert error(await act(admin, unknown, action)) == (404, "not_found")
    assert error(await admin.get(f"/admin/operations/{unknown['id']}")) == (404, "not_found")
    r = await admin.post(f"/admin/operations/{unknown['id']}/start", headers={"If-Match": "1"})
    assert error(r) == (404, "not_found")
    assert len(await trigger_rows(api.pool)) == 2


# --- a failing batch -----------------------------------------------------------------------


async def test_a_failing_batch_backs_off_fails_after_five_and_resume_converges(
    api: Api, admin, caplog: pytest.LogCaptureFixture
):
    ev = await make_event(admin)
    await seed(api, ev["id"], 7)
    op = await start(admin, await preview(admin, ev["id"]))
    rival = await preview(
        admin,
        ev["id"],
        "reschedule",
        date_begin="2027-07-01T09:00:00Z",
        date_end="2027-07-02T09:00:00Z",
    )
    async with api.pool.acquire() as conn:
        await conn.execute(FAULT)
    options = OperationOptions(batch=3)
    op_id = uuid.UUID(op["id"])
    at = datetime.now(UTC)
    waits = []
    with caplog.at_level(logging.DEBUG, logger="events_svc.operations"):
        for attempt in range(1, 6):
            outcome = await run_batch(api.pool, options, at, op_id)
            assert outcome is not None and outcome[2] == -1, attempt
            state = await view(admin, op)
            assert (state["error_count"], state["processed"]) == (attempt, 0)
            assert [e["code"] for e in state["errors"]] == ["RaiseError"] * attempt
            # a second reschedule waits while the first is paused or failed
            r = await admin.post(
                f"/admin/operations/{rival['id']}/start",
                headers={"If-Match": str(rival["revision"])},
            )
            assert error(r) == (409, "operation_in_progress")
            if attempt < 5:
                assert state["state"] == "paused" and outcome[1] == "paused"
                retry = datetime.fromisoformat(state["next_attempt_at"])
                waits.append((retry - at).total_seconds())
                # backing off: not picked before its time, neither by id nor by a pass
                assert (
                    await run_batch(api.pool, options, retry - timedelta(milliseconds=1), op_id)
                    is None
                )
                assert (
                    await run_operation_pass(api.pool, options, retry - timedelta(seconds=1))
                ).batches == 0
                at = retry
    assert waits == [5.0, 10.0, 20.0, 40.0]
    assert (state["state"], state["next_attempt_at"]) == ("failed", None)
    assert await run_batch(api.pool, options, at + timedelta(days=1), op_id) is None
    assert await trigger_rows(api.pool) == []
    # the error is a class name: never the message, which quoted an address
    logged = " ".join(str(r.__dict__) for r in caplog.records)
    assert "batch failed" in logged and "g1@example.org" not in logged
    audits = await rows(
        api,
        "SELECT verb, summary::text AS s FROM event.event_audit_log"
        " WHERE object_id = $1 ORDER BY id",
        op_id,
    )
    assert "g1@example.org" not in " ".join(a["s"] for a in audits)
    async with api.pool.acquire() as conn:
        await conn.execute(UNFAULT)
        stored = await conn.fetchval(
            "SELECT errors::text FROM event.event_operations WHERE id = $1", op_id
        )
    assert "example.org" not in stored
    resumed = (await act(admin, op, "resume")).json()
    assert (resumed["state"], resumed["triggers_created"], resumed["error_count"]) == (
        "completed",
        7,
        5,
    )
    assert resumed["next_attempt_at"] is None
    made = await trigger_rows(api.pool)
    assert len(made) == len({t["registration_id"] for t in made}) == 7
    assert [a["verb"] for a in audits] == [
        "event_operation_previewed",
        "event_operation_started",
        "event_operation_paused",
        "event_operation_failed",
    ]
    after = await rows(
        api,
        "SELECT verb, summary FROM event.event_audit_log WHERE object_id = $1 ORDER BY id",
        op_id,
    )
    assert [a["verb"] for a in after[4:]] == [
        "event_operation_running",
        "event_operation_completed",
    ]
    assert after[2]["summary"] == {
        "from": "running",
        "to": "paused",
        "error": "RaiseError",
        "attempts": 1,
    }
    # the rival starts once the first is done
    assert (await start(admin, rival))["state"] == "running"


# --- identity and immutability -------------------------------------------------------------


async def test_the_identity_indexes_refuse_a_second_trigger_of_the_same_identity(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 2)
    moved = await start(admin, await preview(admin, ev["id"]))
    reminder = await start(admin, await preview(admin, ev["id"], "reminder"))
    for op in (moved, reminder):
        await act(admin, op, "resume")
    copy = """
    INSERT INTO event.triggers (operation_id, event_id, registration_id, purpose, event_revision,
        registration_version, ics_sequence, ics_method, ctx_date_begin, ctx_date_end, ctx_date_tz,
        ctx_location, created_at)
    SELECT coalesce($2, operation_id), event_id, registration_id, purpose, event_revision + $3,
        registration_version, ics_sequence, ics_method, ctx_date_begin, ctx_date_end, ctx_date_tz,
        ctx_location, now()
    FROM event.triggers WHERE operation_id = $1 LIMIT 1
    """
    other = await preview(
        admin,
        ev["id"],
        "reschedule",
        date_begin="2027-07-01T09:00:00Z",
        date_end="2027-07-02T09:00:00Z",
    )
    cases = [
        (moved["id"], None, 0, "triggers_calendar_identity"),
        # another operation, another revision: the same (registration, purpose, sequence)
        (moved["id"], other["id"], 1, "triggers_calendar_identity"),
        (reminder["id"], None, 0, "triggers_message_identity"),
        (reminder["id"], None, 5, "triggers_message_identity"),
    ]
    async with api.pool.acquire() as conn:
        for source, operation, bump, constraint in cases:
            with pytest.raises(asyncpg.UniqueViolationError) as refused:
                await conn.execute(
                    copy,
                    uuid.UUID(source),
                    uuid.UUID(operation) if operation else None,
                    bump,
                )
            assert refused.value.constraint_name == constraint
    assert len(await trigger_rows(api.pool)) == 4


async def test_the_database_refuses_to_update_delete_or_truncate_a_trigger(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 2)
    op = await start(admin, await preview(admin, ev["id"]))
    await act(admin, op, "resume")
    before = [r[0] for r in await rows(api, ALL_TRIGGERS)]
    statements = [
        "UPDATE event.triggers SET ics_sequence = ics_sequence + 1",
        "UPDATE event.triggers SET ctx_location = 'elsewhere' WHERE seq = 1",
        "DELETE FROM event.triggers WHERE seq = 1",
        "DELETE FROM event.triggers",
        "TRUNCATE event.triggers CASCADE",
    ]
    async with api.pool.acquire() as conn:
        for statement in statements:
            with pytest.raises(asyncpg.RestrictViolationError, match="append-only"):
                await conn.execute(statement)
        with pytest.raises(asyncpg.PostgresError):  # refused (a reference may refuse first)
            await conn.execute("TRUNCATE event.triggers")
    assert [r[0] for r in await rows(api, ALL_TRIGGERS)] == before and len(before) == 2


def _fill(path: str, ids: dict[str, str]) -> str:
    """The route's path with every parameter named by a real row (or a stranger)."""
    return re.sub(
        r"\{([a-z_]+)(?::[a-z]+)?\}", lambda m: ids.get(m.group(1), str(uuid.uuid4())), path
    )


async def test_no_route_updates_or_deletes_a_trigger(api: Api, admin):
    ev = await make_event(admin)
    await seed(api, ev["id"], 3)
    reg = await value(api, "SELECT min(id::text) FROM event.registrations")
    moved = await start(admin, await preview(admin, ev["id"]))
    await act(admin, moved, "resume")
    reminder = await start(admin, await preview(admin, ev["id"], "reminder"))
    await run_operation_pass(api.pool, OperationOptions(batch=1, cap=1), datetime.now(UTC))
    before = [r[0] for r in await rows(api, ALL_TRIGGERS)]
    assert len(before) == 4
    # what an operator does to the attendees and the event after the triggers exist
    assert (await correct(admin, reg, name="Renamed")).status_code == 200
    assert (await cancel(admin, reg)).status_code == 200
    assert (await admin.post(f"/admin/registrations/{reg}/archive")).status_code == 200
    assert error(await admin.delete(f"/admin/events/{ev['id']}")) == (
        409,
        "event_has_registrations",
    )
    # every route with every method it declares, its parameters naming the rows that hold
    # triggers (the event, a registration, the running and the completed operations);
    # the running one is resumed (its two last triggers are written) before it is cancelled
    ids = {"event_id": ev["id"], "registration_id": reg, "event_id_or_capability": ev["id"]}
    called = 0
    for operation in (reminder, moved):
        ids["operation_id"] = operation["id"]
        contexts = sorted(
            iter_route_contexts(api.app.routes),
            key=lambda c: ("DELETE" in (c.methods or ()), c.path.endswith("/cancel"), c.path),
        )
        for found in contexts:
            for method in sorted(found.methods or ()):
                url = _fill(found.path, ids).removeprefix("/api/v1/event")
                if not url.startswith("/admin") and not url.startswith("/public"):
                    url = f"http://test{url}"
                body = None if method in ("GET", "HEAD", "DELETE") else {"reason": "walk"}
                r = await admin.request(method, url, json=body, headers={"If-Match": "*"})
                assert r.status_code != 500, (method, found.path, r.text)
                called += 1
    assert called > 200
    # every trigger is as it was; the only new ones are the resumed reminder's
    after = await rows(api, ALL_TRIGGERS)
    assert [r[0] for r in after[: len(before)]] == before
    assert len(after) == 6 and all(reminder["id"] in r[0] for r in after[len(before) :])
