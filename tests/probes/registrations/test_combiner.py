"""The register verb's combiner: concurrent registrations of one event share one
transaction, and each keeps its own answer.

Never oversold under 256 singles and 64 groups of 3, in one process and across three; a
batch mixing valid requests, each kind of refusal and a group that does not fit answers
each exactly as it would alone, in arrival order; a constraint failure of one member
leaves the others committed; audit rows, answers, arming and the after-subscription mail
exactly as for single registrations."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from events_svc import errors
from events_svc.actors import SYSTEM
from events_svc.db import transaction
from events_svc.models import AnswerInput, AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.registrations import COMBINER, Registered, RegisterRequest, register
from events_svc.verbs.registrations.take_seats import register_batch_in
from tests.probes.conftest import wide_settings
from tests.probes.helpers import Api, add_slot, add_ticket, make_event, run, scheduler, template

SINGLES, GROUPS = 256, 64


@pytest.fixture
def settings(db_url: str, request: pytest.FixtureRequest) -> Settings:
    return wide_settings(db_url, request)


def attendees(n: int, name: str = "Ada") -> list[AttendeeInput]:
    return [
        AttendeeInput(name=f"{name} {i}", email=f"{name.lower()}{i}@example.org") for i in range(n)
    ]


async def storm(pool: asyncpg.Pool, event_id: uuid.UUID) -> Counter[str]:
    """256 singles and 64 groups of 3 at once, through the register verb; each answer's
    kind and size: `created_1`, or a refusal's code as `event_seats_exhausted_3` (anything
    else fails the probe)."""

    async def one(n: int, i: int) -> str:
        try:
            done = await register(pool, SYSTEM, event_id, attendees(n, f"G{i}x"), datetime.now(UTC))
        except errors.DomainError as refused:
            return f"{refused.code}_{n}"
        assert len(done.registrations) == n
        return f"created_{n}"

    calls = [one(1, i) for i in range(SINGLES)] + [one(3, SINGLES + i) for i in range(GROUPS)]
    return Counter(await asyncio.gather(*calls))


def fills(outcome: Counter[str], seats: int, demand: int) -> int:
    """The seats the answers took, checked: every answer typed, never over the cap, and
    the event as full as the arrivals allow (a single is refused only when no seat is
    left; groups of 3 refused at the end may leave up to 2)."""
    kinds = {"created_1", "created_3", "event_seats_exhausted_1", "event_seats_exhausted_3"}
    assert set(outcome) <= kinds, outcome
    seated = outcome["created_1"] + 3 * outcome["created_3"]
    assert seated <= seats
    if outcome["event_seats_exhausted_1"]:
        assert seated == seats
    else:
        assert seated > min(seats, demand) - 3
    return seated


async def taken(pool: asyncpg.Pool, event_id: Any) -> int:
    return int(
        await pool.fetchval(
            "SELECT count(*) FROM event.registrations WHERE event_id = $1"
            " AND event.holds_seat_at(state, active, sale_status, hold_expires_at, now())",
            event_id,
        )
    )


@pytest.mark.parametrize("seats", [10, 100, 1000])
async def test_a_storm_of_singles_and_groups_never_oversells(
    api: Api, admin: httpx.AsyncClient, seats: int
) -> None:
    event = await make_event(admin, seats_max=seats)
    event_id = uuid.UUID(event["id"])
    before = Counter(COMBINER.batch_sizes)
    outcome = await storm(api.pool, event_id)
    seated = fills(outcome, seats, SINGLES + 3 * GROUPS)
    assert seated == await taken(api.pool, event_id)
    # every request decided once, most of them in shared transactions
    ran = COMBINER.batch_sizes - before
    assert sum(n * k for n, k in ran.items()) == SINGLES + GROUPS
    assert max(ran) > 1


STORM_SCRIPT = """
import asyncio, json, sys, uuid
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.registrations import COMBINER
from tests.probes.registrations.test_combiner import storm

async def main(url, event_id, pooler, direct):
    pool = await create_pool(url, Settings(database_url=url, pool_min=2, pool_max=8,
                                           lock_timeout_ms=20000, db_pooler=pooler,
                                           database_direct_url=direct or None,
                                           scheduler_enabled=False))
    outcome = await storm(pool, uuid.UUID(event_id))
    await pool.close()
    print(json.dumps({"outcome": outcome, "largest": max(COMBINER.batch_sizes)}))

asyncio.run(main(*sys.argv[1:5]))
"""


@pytest.mark.parametrize("seats", [10, 100, 1000])
async def test_three_processes_storm_one_event_and_never_oversell(
    api: Api, admin: httpx.AsyncClient, settings: Settings, seats: int
) -> None:
    """Each process combines its own requests; the event row lock serialises the batches
    of all three."""
    event = await make_event(admin, seats_max=seats)
    assert settings.database_url
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            STORM_SCRIPT,
            settings.database_url,
            event["id"],
            settings.db_pooler,
            settings.database_direct_url or "",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    total: Counter[str] = Counter()
    largest = []
    for proc in procs:
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-2000:]
        report = json.loads(out)
        total.update(report["outcome"])
        largest.append(report["largest"])
    assert max(largest) > 1  # the processes combined their own requests
    seated = fills(total, seats, 3 * (SINGLES + 3 * GROUPS))
    assert seated == await taken(api.pool, uuid.UUID(event["id"]))


async def _mixed_event(admin: httpx.AsyncClient) -> dict[str, Any]:
    """A multi-slot event of 5 seats per slot with a 2-seat ticket capped at 2 per order and
    a ticket whose sale has closed; the ids the mixed batch names."""
    event = await make_event(admin, seats_max=5, is_multi_slots=True)
    slot = await add_slot(admin, event["id"])
    other = await make_event(admin, is_multi_slots=True)
    foreign_slot = await add_slot(admin, other["id"])
    small = await add_ticket(admin, event["id"], name="Small", seats_max=2, limit_max_per_order=2)
    # one fixed instant: both events' refusals name the same end of sale
    past = "2020-01-01T00:00:00+00:00"
    closed = await add_ticket(admin, event["id"], name="Closed", end_sale_datetime=past)
    return {
        "event": uuid.UUID(event["id"]),
        "slot": uuid.UUID(slot["id"]),
        "foreign_slot": uuid.UUID(foreign_slot["id"]),
        "small": uuid.UUID(small["id"]),
        "closed": uuid.UUID(closed["id"]),
    }


def _mixed(ids: dict[str, Any]) -> list[tuple[str, RegisterRequest]]:
    """(expected answer, request), in arrival order."""
    now = datetime.now(UTC)
    ev, slot = ids["event"], ids["slot"]

    def req(n: int, **kw: Any) -> RegisterRequest:
        return RegisterRequest(SYSTEM, ev, attendees(n), now, **kw)

    return [
        ("created", req(2, slot_id=slot)),
        ("slot_required", req(1)),
        ("slot_not_in_event", req(1, slot_id=ids["foreign_slot"])),
        ("event_sale_window_closed", req(1, slot_id=slot, ticket_id=ids["closed"])),
        ("per_order_cap_exceeded", req(3, slot_id=slot, ticket_id=ids["small"])),
        ("created", req(2, slot_id=slot, ticket_id=ids["small"])),
        ("event_seats_exhausted", req(1, slot_id=slot, ticket_id=ids["small"])),  # ticket full
        ("event_seats_exhausted", req(2, slot_id=slot)),  # a group of 2 with 1 seat left
        ("created", req(1, slot_id=slot)),  # ... which a single still takes
        ("event_seats_exhausted", req(1, slot_id=slot)),
    ]


def _answer(result: Registered | errors.DomainError) -> str:
    return result.code if isinstance(result, errors.DomainError) else "created"


def _said(result: Registered | errors.DomainError) -> Any:
    """A refusal's fields without the ids of its event's rows (the twins differ there)."""
    if not isinstance(result, errors.DomainError):
        return len(result.registrations)
    return {k: v for k, v in result.fields.items() if not k.endswith("_id")}


async def test_a_mixed_batch_answers_each_request_as_it_would_alone(
    api: Api, admin: httpx.AsyncClient
) -> None:
    combined, alone = await _mixed_event(admin), await _mixed_event(admin)
    cases = _mixed(combined)
    async with transaction(api.pool) as conn:
        results = await register_batch_in(conn, [r for _, r in cases])
    assert [_answer(r) for r in results] == [expected for expected, _ in cases]
    singles: list[Registered | errors.DomainError] = []
    for _, request in _mixed(alone):  # the same requests, each in its own transaction
        async with transaction(api.pool) as conn:
            singles += await register_batch_in(conn, [request])
    assert [_answer(r) for r in singles] == [_answer(r) for r in results]
    # each refusal says the same alone and combined (what was asked, what was left)
    assert [_said(r) for r in singles] == [_said(r) for r in results]
    assert await taken(api.pool, combined["event"]) == 5 == await taken(api.pool, alone["event"])
    created = [r for r in results if isinstance(r, Registered)]
    assert [len(r.registrations) for r in created] == [2, 2, 1]


async def test_one_member_failing_a_constraint_leaves_the_others_committed(
    api: Api, admin: httpx.AsyncClient
) -> None:
    """A failure of the batch transaction itself (here a database check that refuses one
    attendee's row) is retried request by request: only that request fails."""
    event = await make_event(admin, seats_max=100)
    event_id = uuid.UUID(event["id"])
    await api.pool.execute(
        """CREATE FUNCTION event.probe_poison() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.name = 'Poison 0' THEN
               RAISE EXCEPTION 'poisoned' USING ERRCODE = 'check_violation';
             END IF;
             RETURN NEW;
           END $$;
           CREATE TRIGGER probe_poison BEFORE INSERT ON event.registrations
           FOR EACH ROW EXECUTE FUNCTION event.probe_poison();"""
    )
    names = ["Ada", "Grace", "Poison", "Linus", "Barbara", "Edsger", "Ken", "Dennis"]

    async def one(name: str) -> str:
        try:
            await register(api.pool, SYSTEM, event_id, attendees(1, name), datetime.now(UTC))
        except Exception as failed:
            return type(failed).__name__
        return "created"

    before, retried = Counter(COMBINER.batch_sizes), COMBINER.retried_alone
    outcome = await asyncio.gather(*(one(n) for n in names))
    # the first runs alone at once; the seven that arrived meanwhile share one batch,
    # which fails as a whole, then each of them runs alone
    assert COMBINER.batch_sizes - before == Counter({1: 1, 7: 1})
    assert COMBINER.retried_alone - retried == 7
    assert outcome.count("created") == 7
    assert outcome[2] != "created"
    rows = await api.pool.fetch(
        "SELECT name FROM event.registrations WHERE event_id = $1 ORDER BY name", event_id
    )
    assert [r["name"] for r in rows] == sorted(f"{n} 0" for n in names if n != "Poison")


async def test_a_combined_batch_writes_audit_answers_arming_and_mail_per_attendee(
    api: Api, admin: httpx.AsyncClient
) -> None:
    """Eight requests decided in one batch (nothing registered before it, so only the batch
    can have armed the line): each registration has its audit row (its own source and
    state), its answers, the lead queue, and the after-subscription mail goes out once per
    attendee."""
    event = await make_event(admin, seats_max=100)
    event_id = uuid.UUID(event["id"])
    q = await admin.post("/admin/questions", json={"title": "Diet", "question_type": "text_box"})
    assert q.status_code == 201, q.text
    link = await admin.post(
        f"/admin/events/{event['id']}/questions", json={"question_id": q.json()["id"]}
    )
    assert link.status_code in (200, 201), link.text
    tpl = await template(admin)
    line = await scheduler(
        admin, event["id"], tpl, interval_kind="after_sub", interval_nbr=0, interval_unit="now"
    )
    diet = uuid.UUID(q.json()["id"])

    def request(i: int) -> RegisterRequest:
        people = [
            AttendeeInput(
                name=f"P{i} {j}",
                email=f"p{i}.{j}@example.org",
                answers=[AnswerInput(question_id=diet, value_text=f"diet {i}.{j}")],
            )
            for j in range(1 + i % 2)
        ]
        return RegisterRequest(SYSTEM, event_id, people, datetime.now(UTC), source=f"s{i}")

    rule = {
        "name": "Every confirmed attendee",
        "trigger": "confirm",
        "predicates": [{"axis": "event", "value_ids": [event["id"]]}],
    }
    assert (await admin.post("/admin/lead-rules", json=rule)).status_code == 201
    async with transaction(api.pool) as conn:  # ONE batch: nothing ran alone before it
        answers = await register_batch_in(conn, [request(i) for i in range(8)])
    results = [r for r in answers if isinstance(r, Registered)]
    assert len(results) == 8
    ids = [r["id"] for res in results for r in res.registrations]
    queued = await api.pool.fetchval(
        "SELECT count(*) FROM event.lead_requests WHERE event_id = $1", event_id
    )
    assert queued >= 1  # the batch queued its lead request, as a single registration does
    assert len(ids) == 12
    for i, res in enumerate(results):
        for j, view in enumerate(res.registrations):
            assert view["name"] == f"P{i} {j}"
            assert [a["value_text"] for a in view["answers"]] == [f"diet {i}.{j}"]
    audit = await api.pool.fetch(
        "SELECT object_id, summary FROM event.event_audit_log"
        " WHERE verb = 'registration_created' AND object_id = ANY($1::uuid[])",
        ids,
    )
    sources = {r["object_id"]: r["summary"]["source"] for r in audit}
    assert len(audit) == 12
    assert {r["summary"]["state"] for r in audit} == {"open"}
    assert {sources[v["id"]] for v in results[3].registrations} == {"s3"}
    await run(api, datetime.now(UTC) + timedelta(minutes=1))
    sent = await api.pool.fetch(
        "SELECT registration_id FROM event.outbox_messages WHERE scheduler_id = $1",
        uuid.UUID(line["id"]),
    )
    assert sorted(r["registration_id"] for r in sent) == sorted(ids)


async def test_a_lone_request_is_a_batch_of_one(api: Api, admin: httpx.AsyncClient) -> None:
    event = await make_event(admin)
    before = Counter(COMBINER.batch_sizes)
    await register(api.pool, SYSTEM, uuid.UUID(event["id"]), attendees(1), datetime.now(UTC))
    assert COMBINER.batch_sizes - before == Counter({1: 1})


async def test_a_batch_bound_of_one_turns_combining_off(api: Api, admin: httpx.AsyncClient) -> None:
    event = await make_event(admin, seats_max=100)
    event_id = uuid.UUID(event["id"])
    before = Counter(COMBINER.batch_sizes)
    COMBINER.max_batch = 1
    try:
        now = datetime.now(UTC)
        await asyncio.gather(
            *(register(api.pool, SYSTEM, event_id, attendees(1, f"S{i}x"), now) for i in range(20))
        )
    finally:
        COMBINER.max_batch = 64
    assert COMBINER.batch_sizes - before == Counter({1: 20})
    assert await taken(api.pool, event_id) == 20


async def test_the_batch_size_is_bounded(
    api: Api, admin: httpx.AsyncClient, settings: Settings
) -> None:
    event = await make_event(admin, seats_max=1000)
    event_id = uuid.UUID(event["id"])
    before = Counter(COMBINER.batch_sizes)
    now = datetime.now(UTC)
    calls = [register(api.pool, SYSTEM, event_id, attendees(1, f"B{i}x"), now) for i in range(150)]
    await asyncio.gather(*calls)
    ran = COMBINER.batch_sizes - before
    assert max(ran) == COMBINER.max_batch == settings.register_batch_max == 64
    assert sum(n * k for n, k in ran.items()) == 150
    assert Settings.from_env({"EVENTS_REGISTER_BATCH_MAX": "8"}).register_batch_max == 8


async def test_a_refusal_of_the_whole_batch_is_every_members_answer(api: Api) -> None:
    """No such event: every member gets the 404 at once, none is run again alone."""
    missing = uuid.uuid4()
    retried = COMBINER.retried_alone

    async def one(i: int) -> str:
        try:
            await register(api.pool, SYSTEM, missing, attendees(1, f"N{i}x"), datetime.now(UTC))
        except errors.DomainError as refused:
            return refused.code
        return "created"

    assert await asyncio.gather(*(one(i) for i in range(6))) == ["not_found"] * 6
    assert COMBINER.retried_alone == retried
