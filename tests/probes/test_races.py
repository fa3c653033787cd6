"""Real concurrency through the real HTTP app: many connections racing for few seats."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from events_svc.actors import SYSTEM
from events_svc.errors import SeatsExhausted
from events_svc.models import AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.register import register
from tests.probes.conftest import Api, add_slot, add_ticket, event_body


@pytest.fixture
def settings(db_url: str) -> Settings:
    # enough connections that the races happen in PostgreSQL, not in the pool queue
    return Settings(database_url=db_url, pool_min=4, pool_max=24, lock_timeout_ms=10000,
                    scheduler_enabled=False)  # fmt: skip


async def _event(admin: httpx.AsyncClient, **over: Any) -> dict[str, Any]:
    return (await admin.post("/admin/events", json=event_body(**over))).json()


async def _race(admin: httpx.AsyncClient, n: int, body: dict[str, Any]) -> Counter[Any]:
    responses = await asyncio.gather(
        *(admin.post("/admin/registrations", json=body) for _ in range(n))
    )
    return Counter((r.status_code, r.json().get("error", {}).get("code")) for r in responses)


async def _taken(api: Api, **where: str) -> int:
    ((column, value),) = where.items()
    sql = {
        "event_id": "SELECT count(*) FROM event.registrations WHERE event_id = $1 AND state IN"
        " ('open','done') AND active",
        "event_ticket_id": "SELECT count(*) FROM event.registrations WHERE event_ticket_id = $1",
        "event_slot_id": "SELECT count(*) FROM event.registrations WHERE event_slot_id = $1",
    }[column]
    async with api.pool.acquire() as conn:
        return int(await conn.fetchval(sql, uuid.UUID(value)))


async def test_64_racers_on_a_4_seat_event_give_exactly_4_rows(api: Api, admin):
    ev = await _event(admin, seats_max=4)
    outcome = await _race(admin, 64, {"event_id": ev["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_id=ev["id"]) == 4


async def test_64_racers_on_a_4_seat_ticket(api: Api, admin):
    ev = await _event(admin, seats_limited=False)
    t = await add_ticket(admin, ev["id"], name="T", seats_max=4)
    outcome = await _race(admin, 64, {"event_id": ev["id"], "event_ticket_id": t["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_ticket_id=t["id"]) == 4


async def test_64_racers_on_a_4_seat_slot(api: Api, admin):
    ev = await _event(admin, seats_max=4, is_multi_slots=True)
    s = await add_slot(admin, ev["id"], 10)
    outcome = await _race(admin, 64, {"event_id": ev["id"], "event_slot_id": s["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_slot_id=s["id"]) == 4


async def test_new_registrations_racing_confirms_of_drafts(api: Api, admin):
    ev = await _event(admin, seats_max=4)
    drafts = []
    for _ in range(4):
        r = (await admin.post("/admin/registrations", json={"event_id": ev["id"]})).json()
        await admin.post(f"/admin/registrations/{r['id']}/set-draft")
        drafts.append(r["id"])
    creates = [admin.post("/admin/registrations", json={"event_id": ev["id"]}) for _ in range(28)]
    confirms = [admin.post(f"/admin/registrations/{d}/confirm") for d in drafts]
    responses = await asyncio.gather(*creates, *confirms)
    won = sum(r.status_code in (200, 201) for r in responses)
    lost = [r for r in responses if r.status_code not in (200, 201)]
    assert won == 4
    assert {(r.status_code, r.json()["error"]["code"]) for r in lost} == {
        (409, "event_seats_exhausted")
    }
    assert await _taken(api, event_id=ev["id"]) == 4


async def test_a_group_of_3_racing_singles_never_half_lands(api: Api, admin):
    for _round in range(5):
        ev = await _event(admin, seats_max=4)
        eid = uuid.UUID(ev["id"])
        group = [AttendeeInput(name=f"G{i}") for i in range(3)]

        async def take_group(eid: uuid.UUID, group: list[AttendeeInput]) -> str:
            try:
                await register(api.pool, SYSTEM, eid, group, datetime.now(UTC))
            except SeatsExhausted:
                return "refused"
            return "landed"

        singles = [
            admin.post("/admin/registrations", json={"event_id": ev["id"], "name": "S"})
            for _ in range(6)
        ]
        results = await asyncio.gather(take_group(eid, group), *singles)
        async with api.pool.acquire() as conn:
            names = Counter(
                r["name"][0]
                for r in await conn.fetch(
                    "SELECT name FROM event.registrations WHERE event_id = $1", eid
                )
            )
        assert names["G"] in (0, 3)
        assert (names["G"] == 3) == (results[0] == "landed")
        assert sum(names.values()) == 4  # the seats fill, and never beyond
