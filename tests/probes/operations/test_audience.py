"""Event operations and their audience: the snapshot is taken at the start, not at the
preview; a registration cancelled after the start is skipped, one reactivated before its
batch is triggered, newcomers are not; a correction between batches is carried by the
batch that reads it; repeated calendar changes take the next sequences (real PostgreSQL
through the real HTTP app)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import httpx

from events_svc.verbs.operations import OperationOptions, run_operation_pass
from tests.probes.helpers import (
    MOVED,
    Api,
    cancel,
    correct,
    finish,
    make_event,
    preview,
    register,
    start,
    trigger_rows,
)


async def rows(api: Api, statement: str, *args: Any) -> list[asyncpg.Record]:
    async with api.pool.acquire() as conn:
        return list(await conn.fetch(statement, *args))


async def value(api: Api, statement: str, *args: Any) -> Any:
    async with api.pool.acquire() as conn:
        return await conn.fetchval(statement, *args)


async def event_row(api: Api, event_id: str) -> dict[str, Any]:
    found = await rows(
        api,
        "SELECT revision, ics_sequence, kanban_state::text FROM event.events WHERE id = $1",
        uuid.UUID(event_id),
    )
    return dict(found[0])


def error(r: httpx.Response) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


# --- the audience before and after the snapshot ---------------------------------------------


async def test_the_snapshot_is_the_audience_at_the_start_not_at_the_preview(api: Api, admin):
    ev = await make_event(admin)
    ada, alan, grace = [await register(admin, ev["id"], n) for n in ("Ada", "Alan", "Grace")]
    op = await preview(admin, ev["id"])
    assert op["audience_estimate"] == 3
    assert (await cancel(admin, alan)).status_code == 200  # cancels: revision unchanged
    edsger = await register(admin, ev["id"], "Edsger")
    assert (await event_row(api, ev["id"]))["revision"] == op["revision"]
    view = await start(admin, op)
    assert view["audience"] == 3
    await finish(admin, view)
    made = await trigger_rows(api.pool)
    assert sorted(str(t["registration_id"]) for t in made) == sorted([ada, grace, edsger])


async def test_cancelled_after_the_start_is_skipped_reactivated_is_triggered_newcomers_are_not(
    api: Api, admin
):
    ev = await make_event(admin)
    ada, alan, grace, edsger = [
        await register(admin, ev["id"], n) for n in ("Ada", "Alan", "Grace", "Edsger")
    ]
    view = await start(admin, await preview(admin, ev["id"]))
    assert view["audience"] == 4
    assert (await cancel(admin, alan)).status_code == 200
    assert (await cancel(admin, grace)).status_code == 200
    r = await admin.post(f"/admin/registrations/{grace}/reactivate", json={"reason": "came back"})
    assert r.status_code == 200, r.text
    grace_version = r.json()["version"]
    assert grace_version == 3
    newcomer = await register(admin, ev["id"], "Barbara")
    done = await finish(admin, view)
    assert (done["processed"], done["triggers_created"], done["skipped_inactive"]) == (4, 3, 1)
    made = {str(t["registration_id"]): t for t in await trigger_rows(api.pool)}
    assert sorted(made) == sorted([ada, grace, edsger])
    assert alan not in made and newcomer not in made
    assert made[grace]["registration_version"] == grace_version
    assert made[ada]["registration_version"] == 1
    outcomes = await rows(
        api,
        "SELECT registration_id, registration_version, outcome::text FROM"
        " event.operation_audience WHERE operation_id = $1",
        uuid.UUID(view["id"]),
    )
    by_id = {str(o["registration_id"]): (o["registration_version"], o["outcome"]) for o in outcomes}
    assert by_id == {
        ada: (1, "created"),
        alan: (1, "skipped_inactive"),
        grace: (1, "created"),  # the snapshot keeps the version it saw
        edsger: (1, "created"),
    }


async def test_a_correction_between_batches_is_carried_by_the_batch_that_reads_it(api: Api, admin):
    ev = await make_event(admin)
    people = sorted([await register(admin, ev["id"], f"P{n}") for n in range(6)], key=uuid.UUID)
    op = await start(admin, await preview(admin, ev["id"]))
    now = datetime.now(UTC)
    summary = await run_operation_pass(api.pool, OperationOptions(batch=2, cap=1), now)
    assert (summary.batches, summary.triggers, summary.more) == (1, 2, True)
    # batches go in registration order: the first two are done, the last is not yet
    for rid in (people[0], people[-1]):
        assert (await correct(admin, rid, name="Corrected")).status_code == 200
    await run_operation_pass(api.pool, OperationOptions(batch=2), now)
    view = (await admin.get(f"/admin/operations/{op['id']}")).json()
    assert (view["state"], view["triggers_created"]) == ("completed", 6)
    made = {
        str(t["registration_id"]): t["registration_version"] for t in await trigger_rows(api.pool)
    }
    assert made == {people[0]: 1, **{p: 1 for p in people[1:-1]}, people[-1]: 2}
    snapshot = await value(
        api,
        "SELECT array_agg(DISTINCT registration_version) FROM event.operation_audience",
    )
    assert snapshot == [1]


# --- repeated calendar changes ---------------------------------------------------------------


async def test_repeated_reschedules_take_the_next_sequences_and_a_cancellation_the_one_after(
    api: Api, admin
):
    ev = await make_event(admin)
    attendees = sorted([await register(admin, ev["id"], n) for n in ("Ada", "Alan", "Grace")])
    later = {"date_begin": "2027-07-10T09:00:00Z", "date_end": "2027-07-11T18:00:00Z"}
    ops = []
    for kind, params in (
        ("reschedule", MOVED),
        ("reschedule", later),
        ("cancellation", {"reason": "the venue closed"}),
    ):
        op = await preview(admin, ev["id"], kind, **params)
        ops.append(await finish(admin, await start(admin, op)))
    assert [o["ics_sequence"] for o in ops] == [1, 2, 3]
    made = await trigger_rows(api.pool)
    assert len(made) == 9 and len({t["id"] for t in made}) == 9
    for rid in attendees:
        mine = [t for t in made if str(t["registration_id"]) == rid]
        assert [(t["purpose"], t["ics_method"], t["ics_sequence"]) for t in mine] == [
            ("event_rescheduled", "REQUEST", 1),
            ("event_rescheduled", "REQUEST", 2),
            ("event_cancelled", "CANCEL", 3),
        ]
        assert [t["ctx_date_begin"].month for t in mine] == [6, 7, 7]
    row = await event_row(api, ev["id"])
    assert (row["ics_sequence"], row["kanban_state"]) == (3, "cancel")
    # replays write nothing: a finished operation neither resumes nor restarts
    for o in ops:
        r = await admin.post(f"/admin/operations/{o['id']}/resume")
        assert error(r) == (409, "operation_finished")
        r = await admin.post(f"/admin/operations/{o['id']}/start", headers={"If-Match": "1"})
        assert error(r) == (409, "operation_already_started")
    assert len(await trigger_rows(api.pool)) == 9
