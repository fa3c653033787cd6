"""Real concurrency through the real HTTP app: many connections racing for few seats."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from events_svc.actors import SYSTEM
from events_svc.errors import SeatsExhausted
from events_svc.models import AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.registrations import register
from tests.probes.conftest import wide_settings
from tests.probes.helpers import Api, add_slot, add_ticket, correct, make_event


@pytest.fixture
def settings(db_url: str, request: pytest.FixtureRequest) -> Settings:
    return wide_settings(db_url, request)


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
    ev = await make_event(admin, seats_max=4)
    outcome = await _race(admin, 64, {"event_id": ev["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_id=ev["id"]) == 4


async def test_64_racers_on_a_4_seat_ticket(api: Api, admin):
    ev = await make_event(admin, seats_limited=False)
    t = await add_ticket(admin, ev["id"], name="T", seats_max=4)
    outcome = await _race(admin, 64, {"event_id": ev["id"], "event_ticket_id": t["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_ticket_id=t["id"]) == 4


async def test_64_racers_on_a_4_seat_slot(api: Api, admin):
    ev = await make_event(admin, seats_max=4, is_multi_slots=True)
    s = await add_slot(admin, ev["id"], 10)
    outcome = await _race(admin, 64, {"event_id": ev["id"], "event_slot_id": s["id"]})
    assert outcome == {(201, None): 4, (409, "event_seats_exhausted"): 60}
    assert await _taken(api, event_slot_id=s["id"]) == 4


async def test_new_registrations_racing_confirms_of_drafts(api: Api, admin):
    ev = await make_event(admin, seats_max=4)
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
        ev = await make_event(admin, seats_max=4)
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


_DEADLOCKS = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"


async def _deadlocks(api: Api) -> int:
    """Deadlocks PostgreSQL detected in this database (each backend flushes its statistics
    shortly after its transaction: poll until the figure settles)."""
    last = -1
    for _ in range(40):
        async with api.pool.acquire() as conn:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            seen = int(await conn.fetchval(_DEADLOCKS))
        if seen == last:
            return seen
        last = seen
        await asyncio.sleep(0.1)
    return last


async def test_registrations_and_mail_edits_racing_passes_never_deadlock(api: Api, admin):
    """Passes working the scheduler rows of two events while registrations arm them, lines
    are edited and created, templates change and attendees are corrected: no 500, no
    deadlock (every writer takes the scheduler rows last, in id order)."""
    from events_svc.adapters.standalone import standalone_ports
    from events_svc.verbs.mail import run_mail_pass
    from events_svc.verbs.mail.send import PassOptions

    dates = {
        "seats_max": 0,
        "date_begin": "2026-01-01T00:00:00Z",
        "date_end": "2099-01-01T00:00:00Z",
    }
    multi = await make_event(admin, is_multi_slots=True, **dates)
    slots = [await add_slot(admin, multi["id"], h) for h in (10, 12)]
    single = await make_event(admin, **dates)
    hello = {"name": "T", "subject": "S", "body": "Hi {{ registration.name }}"}
    tpl = (await admin.post("/admin/templates", json=hello)).json()["id"]

    def where(i: int) -> dict[str, str]:
        if i % 2:
            return {"event_id": multi["id"], "event_slot_id": slots[i % 4 // 2]["id"]}
        return {"event_id": single["id"]}

    def line(event_id: str, kind: str, unit: str) -> dict[str, Any]:
        nbr = 0 if unit == "now" else 1
        return {
            "event_id": event_id,
            "interval_kind": kind,
            "interval_unit": unit,
            "interval_nbr": nbr,
            "template_ref": tpl,
        }

    lines = []
    for ev in (multi, single):
        for kind, unit in [
            ("after_sub", "now"),
            ("after_event_start", "now"),
            ("before_event_end", "days"),
        ]:
            r = await admin.post("/admin/mails", json=line(ev["id"], kind, unit))
            assert r.status_code == 201, r.text
            lines.append(r.json()["id"])
    people = []
    for i in range(8):  # every third without an email: their receipts fail, then are retried
        email = {"email": f"p{i}@example.org"} if i % 3 else {}
        r = await admin.post("/admin/registrations", json={**where(i), "name": f"P{i}", **email})
        people.append(r.json()["id"])
    options = PassOptions(batch=3, cap=40, default_sender="events@example.org")
    ports = standalone_ports()
    now = datetime.now(UTC)

    async def passes() -> None:
        for _ in range(6):
            await run_mail_pass(api.pool, ports, options, now)

    for round_ in range(4):
        calls: list[Any] = [
            admin.post(
                "/admin/registrations",
                json={**where(i), "name": f"R{i}", "email": f"r{i}@example.org"},
            )
            for i in range(24)
        ]
        calls += [
            admin.patch(f"/admin/mails/{m}", json={"interval_nbr": round_ % 2}) for m in lines
        ]
        calls += [
            admin.post("/admin/mails", json=line(ev["id"], "after_sub", "now"))
            for ev in (multi, single)
        ]
        edit = {"body": f"Hello {{{{ registration.name }}}} {round_}"}
        calls.append(admin.patch(f"/admin/templates/{tpl}", json=edit))
        calls += [correct(admin, p, email=f"f{round_}{i}@ex.org") for i, p in enumerate(people)]
        calls += [admin.post("/admin/schedulers/run") for _ in range(3)]
        results = await asyncio.gather(*calls, passes(), passes(), passes())
        errors = [r.text for r in results if r is not None and r.status_code >= 500]
        assert errors == []
    assert await _deadlocks(api) == 0
    # then, once every back-off is over, each attendee got each due mail exactly once
    later = now + timedelta(hours=2)
    while (await run_mail_pass(api.pool, ports, options, later)).progressed:
        pass
    async with api.pool.acquire() as conn:
        owed = await conn.fetch(_OWED)
    wrong = [dict(r) for r in owed if r["mails"] != 1]
    assert owed and wrong == [], (len(owed), wrong)


# every (due line, eligible attendee) pair with the number of mails queued for it: the
# lines due at once (the multi-slot event's event-based line waits for its slots, in 2027)
_OWED = """
SELECT m.id AS line, r.id AS attendee, count(o.id) AS mails
FROM event.mails m
JOIN event.events e ON e.id = m.event_id
JOIN event.registrations r ON r.event_id = m.event_id AND r.state IN ('open', 'done') AND r.active
LEFT JOIN event.outbox_messages o ON o.scheduler_id = m.id AND o.registration_id = r.id
WHERE m.interval_unit = 'now' AND (m.interval_kind = 'after_sub' OR NOT e.is_multi_slots)
GROUP BY m.id, r.id
"""


class HeldRenderer:
    """The standalone renderer, held at its first call until released: the pass then sits
    in its batch transaction, holding its scheduler row."""

    def __init__(self) -> None:
        from events_svc.adapters.standalone import StoreRenderer

        self.inner = StoreRenderer()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def render(self, conn: Any, request: Any) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            await self.release.wait()
        return await self.inner.render(conn, request)

    async def template_kind(self, conn: Any, ref: uuid.UUID) -> str | None:
        return await self.inner.template_kind(conn, ref)


_WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


async def _until_a_lock_is_awaited(api: Api) -> None:
    """Until some transaction of this database waits for a row lock another one holds."""
    for _ in range(250):
        async with api.pool.acquire() as conn:
            if await conn.fetchval(_WAITING):
                return
        await asyncio.sleep(0.02)
    raise AssertionError("no transaction waited for the scheduler row")


async def _held_pass(api: Api, admin: httpx.AsyncClient, *emails: str) -> tuple[Any, Any, str]:
    """An ongoing event, one attendee per email ('' for none), a line due now, and a pass
    started and held in its first batch: (the pass task, its renderer, the line id)."""
    from events_svc.adapters.standalone import OutboxQueue
    from events_svc.ports import Ports
    from events_svc.verbs.mail import run_mail_pass
    from events_svc.verbs.mail.send import PassOptions

    ev = await make_event(
        admin, seats_max=0, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    for i, email in enumerate(emails):
        body = {"event_id": ev["id"], "name": f"G{i}", **({"email": email} if email else {})}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    hello = {"name": "T", "body": "Hi {{ registration.name }}"}
    tpl = (await admin.post("/admin/templates", json=hello)).json()["id"]
    line = {
        "event_id": ev["id"],
        "template_ref": tpl,
        "interval_kind": "after_event_start",
        "interval_unit": "now",
        "interval_nbr": 0,
    }
    mail_id = (await admin.post("/admin/mails", json=line)).json()["id"]
    held = HeldRenderer()
    options = PassOptions(batch=50, cap=1000, default_sender="events@example.org")
    ports = Ports(template_renderer=held, mail_queue=OutboxQueue())
    passing = asyncio.create_task(run_mail_pass(api.pool, ports, options, datetime.now(UTC)))
    await held.entered.wait()
    return passing, held, mail_id


async def _next_pass(api: Api) -> Any:
    from events_svc.adapters.standalone import standalone_ports
    from events_svc.verbs.mail import run_mail_pass
    from events_svc.verbs.mail.send import PassOptions

    options = PassOptions(batch=50, cap=1000, default_sender="events@example.org")
    return await run_mail_pass(api.pool, standalone_ports(), options, datetime.now(UTC))


async def test_an_attendee_joining_while_a_pass_finishes_the_line_still_gets_the_mail(
    api: Api, admin
):
    passing, held, mail_id = await _held_pass(api, admin, "first@example.org")
    event_id = (await admin.get(f"/admin/mails/{mail_id}")).json()["event_id"]
    body = {"event_id": event_id, "name": "Late", "email": "late@example.org"}
    joining = asyncio.create_task(admin.post("/admin/registrations", json=body))
    await _until_a_lock_is_awaited(api)  # the arm waits for the row the pass holds
    held.release.set()
    assert (await passing).sent == 1
    assert (await joining).status_code == 201
    assert (await admin.get(f"/admin/mails/{mail_id}")).json()["mail_done"] is False
    assert (await _next_pass(api)).sent == 1  # the late attendee is not forgotten


async def test_an_address_corrected_while_a_pass_fails_it_is_retried(api: Api, admin):
    passing, held, mail_id = await _held_pass(api, admin, "first@example.org", "")
    event_id = (await admin.get(f"/admin/mails/{mail_id}")).json()["event_id"]
    nomail = (
        await admin.get("/admin/registrations", params={"event_id": event_id, "q": "G1"})
    ).json()
    (target,) = nomail["items"]
    fixing = asyncio.create_task(correct(admin, target["id"], email="g1@example.org"))
    await _until_a_lock_is_awaited(api)  # the correction waits for the row the pass holds
    held.release.set()
    assert (await passing).recipients_failed == 1  # it read the old, empty address
    assert (await fixing).status_code == 200
    view = (await admin.get(f"/admin/mails/{mail_id}")).json()
    assert (view["count_failed"], view["mail_done"]) == (0, False)  # forgotten, reopened
    assert (await _next_pass(api)).sent == 1


async def test_a_slow_template_never_holds_its_row_long_enough_to_refuse_registrations(
    api: Api, admin
):
    """Every render of this template is legal on its own (about a second here); a batch of
    them shares one deadline, so the pass gives the row up in seconds, the line backs
    off, and a registration waiting for the row goes through."""
    from events_svc.adapters.standalone import OutboxQueue
    from events_svc.ports import Ports
    from events_svc.verbs.mail import run_mail_pass
    from events_svc.verbs.mail.send import PassOptions

    ev = await make_event(
        admin, seats_max=0, date_begin="2026-01-01T00:00:00Z", date_end="2099-01-01T00:00:00Z"
    )
    for i in range(12):
        body = {"event_id": ev["id"], "name": f"G{i}", "email": f"g{i}@example.org"}
        assert (await admin.post("/admin/registrations", json=body)).status_code == 201
    slow = (
        "{% set s = 'x' * 200000 %}{% for i in range(9000) %}"
        "{{ '' if s.upper() == s else '.' }}{% endfor %}"
    )
    tpl = (await admin.post("/admin/templates", json={"name": "S", "body": slow})).json()["id"]
    line = {
        "event_id": ev["id"],
        "template_ref": tpl,
        "interval_kind": "after_sub",
        "interval_unit": "now",
        "interval_nbr": 0,
    }
    mail_id = (await admin.post("/admin/mails", json=line)).json()["id"]
    options = PassOptions(batch=50, cap=1000, default_sender="events@example.org")
    rendering = HeldRenderer()
    rendering.release.set()  # not held: it only says when the pass, holding the row, renders
    ports = Ports(template_renderer=rendering, mail_queue=OutboxQueue())
    passing = asyncio.create_task(run_mail_pass(api.pool, ports, options, datetime.now(UTC)))
    await rendering.entered.wait()
    late = {"event_id": ev["id"], "name": "Late", "email": "late@example.org"}
    r = await admin.post("/admin/registrations", json=late)  # its arm waits for the row
    assert r.status_code == 201, r.text
    assert (await passing).failures == {"render_failed": 1}
    view = (await admin.get(f"/admin/mails/{mail_id}")).json()
    assert view["error_detail"].endswith("deadline of 2 s") and view["next_attempt_at"]
