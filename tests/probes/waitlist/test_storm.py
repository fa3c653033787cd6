"""A storm on a nearly full event with a waiting list, over two real `events-svc serve`
processes whose scheduler loops both run the offer pass (their passes meet on the
settings row's `SKIP LOCKED`; a few `POST /admin/schedulers/run` join in): public intake
attempts, officers' cancellations, entries leaving the queue, and every entry's status
link polled and its offer accepted or declined as soon as it appears.

The constraint-style probe: a DEFERRABLE INITIALLY DEFERRED constraint trigger on
`event.registrations` runs at the COMMIT of every transaction that wrote a registration.
It takes a per-event advisory lock first (so each check sees every commit before it),
counts the seat holders with the one definition (`event.holds_seat_at`, at the instant
of the commit) and raises when they exceed the event's cap, which fails that commit: the
service would then answer 500 (or its pass would log a failure). The probe proves that
it bites at the end: a direct insert past the cap fails its commit. It also logs every
commit it checked (`probe.seat_checks`: the count, the cap, the seats still waiting, and
whether the transaction inserted a registration that is not a waiting-list draft, i.e.
an intake, which must have left room for the queue).

The storm runs in two phases: first the queue is long (the intake must always yield to
it), then most of it leaves while more seats are freed (the intake and the offers race
for the last seats). Each phase ends once the event has settled: no offer waits for an
answer, and no waiting entry fits in the free seats.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.probes.helpers import (
    API,
    Api,
    insert_registration,
    serve_processes,
)
from tests.probes.waitlist.kit import SECRET, entries, link, listed_event, seats_taken

CAP = 20
PEOPLE = 30  # waiting-list entries; every fourth asks for 2 seats
STAY = 27  # in the second phase the entries before this index that still wait leave
FIRST_CANCELS = 12
SECOND_CANCELS = 6
INTAKE_WORKERS = 3
SETTLE_S = 10.0  # per phase: the storm's steps, then the event settles
SEED = 20250531

PROBE_SQL = """
CREATE SCHEMA probe;
CREATE TABLE probe.seat_checks (
    txid     bigint NOT NULL,
    event_id uuid NOT NULL,
    taken    integer NOT NULL,
    cap      integer NOT NULL,
    waiting  integer NOT NULL,
    intake   boolean NOT NULL,
    firings  integer NOT NULL DEFAULT 1,
    at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (txid, event_id)
);
CREATE FUNCTION probe.check_seat_cap() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    taken integer;
    waiting integer;
BEGIN
    -- one check at a time per event (a two-key lock: apart from the service's own):
    -- each check's statements see every commit checked before it
    PERFORM pg_advisory_xact_lock(7215, hashtext(NEW.event_id::text));
    SELECT CASE WHEN e.seats_limited AND e.seats_max > 0 THEN e.seats_max ELSE 0 END
    INTO cap FROM event.events e WHERE e.id = NEW.event_id;
    SELECT count(*) INTO taken FROM event.registrations r
    WHERE r.event_id = NEW.event_id
      AND event.holds_seat_at(r.state, r.active, r.sale_status, r.hold_expires_at,
                              clock_timestamp());  -- the seats held as this commit lands
    IF cap > 0 AND taken > cap THEN
        RAISE EXCEPTION 'probe_seat_cap: % seats held over a cap of % (event %)',
            taken, cap, NEW.event_id;
    END IF;
    SELECT coalesce(sum(w.seats), 0) INTO waiting FROM event.waitlist_entry w
    WHERE w.event_id = NEW.event_id AND w.status = 'waiting';
    INSERT INTO probe.seat_checks AS c (txid, event_id, taken, cap, waiting, intake)
    VALUES (txid_current(), NEW.event_id, taken, cap, waiting,
            TG_OP = 'INSERT' AND NEW.state_origin IS NULL)
    ON CONFLICT (txid, event_id) DO UPDATE
    SET intake = c.intake OR excluded.intake, firings = c.firings + 1,
        taken = excluded.taken, waiting = excluded.waiting;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER probe_seat_cap
    AFTER INSERT OR UPDATE ON event.registrations
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION probe.check_seat_cap();
"""

_STATE = """
SELECT
    (SELECT count(*) FROM event.waitlist_entry
     WHERE event_id = $1 AND status = 'offered') AS offered,
    (SELECT min(seats) FROM event.waitlist_entry
     WHERE event_id = $1 AND status = 'waiting') AS smallest,
    (SELECT count(*) FROM event.registrations
     WHERE event_id = $1
       AND event.holds_seat_at(state, active, sale_status, hold_expires_at, now())) AS taken
"""

ALLOWED = {
    ("fill", 201, None),
    ("join", 201, None),
    ("intake", 201, None),
    ("intake", 409, "event_seats_exhausted"),
    ("cancel", 200, None),
    ("pass", 200, None),
    ("status", 200, None),
    ("accept", 200, None),
    ("decline", 200, None),
    # an entry leaving the queue while its poller answers the offer just made: one wins
    ("accept", 409, "waitlist_not_offered"),
    ("decline", 409, "waitlist_not_offered"),
}


def plan(i: int) -> str:
    """What entry i does: leaves the queue at some moment, or answers its offer."""
    if i % 7 == 3:
        return "leave"
    return "decline" if i % 3 == 2 else "accept"


@contextmanager
def services(db_url: str, logs: Path, n: int = 2) -> Iterator[list[str]]:
    """n real `serve` processes with the scheduler (and so the offer pass) on, the public
    intake open, links signed, and throttles out of the way; ready before yielding. Their
    output goes to `logs`/serve-{i}.log."""
    env = {
        "EVENT_SCHEDULER_ENABLED": "true",
        "EVENT_INTAKE_PUBLIC": "true",
        "EVENT_CAPABILITY_SECRET": SECRET,
        "EVENTS_PUBLIC_BASE_URL": "https://tickets.example.org",
        "EVENT_RATE_LIMIT_IP": "100000/minute",
        "EVENT_RATE_LIMIT_CAPABILITY": "100000/minute",
        "EVENT_RATE_LIMIT_EMAIL": "100000/hour",
        "EVENT_RATE_LIMIT_EVENT_INTAKE": "100000/minute",
        "EVENTS_POOL_MAX": "8",
        "EVENTS_LOG_LEVEL": "WARNING",
    }
    with serve_processes(db_url, logs, n, **env) as procs:
        yield [base for base, _ in procs]


def read_logs(folder: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(folder.glob("serve-*.log")))


@dataclass
class Entry:
    index: int
    seats: int
    email: str
    path: str  # the status link, relative to the API's base
    plan: str
    status: str = "waiting"


@dataclass
class Storm:
    """The clients' side: every call spread over the processes, every answer counted."""

    http: httpx.AsyncClient
    bases: list[str]
    admin: dict[str, str]
    event_id: str
    outcomes: Counter[tuple[str, int, str | None]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    intake_ids: list[str] = field(default_factory=list)
    turn: int = 0

    async def call(self, kind: str, method: str, path: str, **kw: Any) -> httpx.Response:
        self.turn += 1
        base = self.bases[self.turn % len(self.bases)]
        r = await self.http.request(method, f"{base}{API}{path}", **kw)
        code = None
        if r.status_code >= 400:
            try:
                code = r.json()["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = r.text[:80]
        self.outcomes[(kind, r.status_code, code)] += 1
        if (kind, r.status_code, code) not in ALLOWED:
            self.failures.append(f"{kind} {method} {path}: {r.status_code} {r.text[:400]}")
        return r

    async def intake(self, kind: str = "intake") -> httpx.Response:
        email = f"{kind}-{uuid.uuid4().hex[:10]}@example.org"
        body = {"attendees": [{"name": "Ivy Intake", "email": email}]}
        r = await self.call(kind, "POST", f"/intake/{self.event_id}", json=body)
        if r.status_code == 201:
            self.intake_ids.append(r.json()["registration_id"])
        return r

    async def cancel(self, registration_id: str) -> None:
        await self.call(
            "cancel",
            "POST",
            f"/admin/registrations/{registration_id}/cancel",
            json={"reason": "cannot come"},
            headers=self.admin,
        )

    async def offer_pass(self) -> None:
        await self.call("pass", "POST", "/admin/schedulers/run", headers=self.admin)

    async def decline(self, entry: Entry) -> None:
        r = await self.call("decline", "POST", f"{entry.path}/decline")
        if r.status_code == 200:
            entry.status = r.json()["status"]


async def later(delay: float, step: Any) -> None:
    await asyncio.sleep(delay)
    await step


async def answer(storm: Storm, entry: Entry, stop: asyncio.Event, rng: random.Random) -> None:
    """Poll the entry's status link; answer its offer as soon as it appears (a leaver
    leaves on its own schedule instead)."""
    while not stop.is_set():
        r = await storm.call("status", "GET", entry.path)
        if r.status_code == 200:
            entry.status = r.json()["status"]
        if entry.status not in ("waiting", "offered"):
            return
        if entry.status == "offered" and entry.plan == "accept":
            r = await storm.call("accept", "POST", f"{entry.path}/accept")
            if r.status_code == 200:
                entry.status = r.json()["status"]
            continue
        if entry.status == "offered" and entry.plan == "decline":
            await storm.decline(entry)
            continue
        await asyncio.sleep(0.2 + rng.random() * 0.15)


async def intake_loop(storm: Storm, stop: asyncio.Event, rng: random.Random) -> None:
    while not stop.is_set():
        await storm.intake()
        await asyncio.sleep(0.05 + rng.random() * 0.15)


async def settle(pool: asyncpg.Pool, event_id: uuid.UUID, deadline: float) -> bool:
    """Until no offer waits for its answer and no waiting entry fits in the free seats
    (every freed seat has been offered); False when `deadline` (monotonic) passes first."""
    while time.monotonic() < deadline:
        row = await pool.fetchrow(_STATE, event_id)
        fits = row["smallest"] is not None and CAP - row["taken"] >= row["smallest"]
        if row["offered"] == 0 and not fits:
            return True
        await asyncio.sleep(0.1)
    return False


async def watch(pool: asyncpg.Pool, event_id: str, stop: asyncio.Event, seen: list[int]) -> None:
    """Sample the one seat counter from outside while the storm runs."""
    while not stop.is_set():
        seen.append(await seats_taken(pool, event_id))
        await asyncio.sleep(0.05)


async def test_a_storm_on_a_nearly_full_event_never_oversells_and_offers_each_seat_once(
    db_url: str, api: Api, admin: httpx.AsyncClient, tmp_path: Path
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    await api.pool.execute(PROBE_SQL)
    event = await listed_event(admin, CAP)
    event_id, eid = event["id"], uuid.UUID(event["id"])
    headers = await api.token("*")
    with services(db_url, tmp_path) as bases:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(
            timeout=30, limits=limits, headers={"Accept": "application/json"}
        ) as http:
            storm = Storm(http, bases, headers, event_id)
            # the event fills up through the public intake, then the queue forms
            await asyncio.gather(*(storm.intake("fill") for _ in range(CAP)))
            fill = list(storm.intake_ids)
            storm.intake_ids.clear()
            assert len(fill) == CAP, storm.outcomes
            people: list[Entry] = []
            for i in range(PEOPLE):
                seats = 2 if i % 4 == 1 else 1
                email = f"waiter{i}-{uuid.uuid4().hex[:6]}@example.org"
                body = {"name": f"Waiter {i}", "email": email, "seats": seats}
                r = await storm.call("join", "POST", f"/intake/{event_id}/waitlist", json=body)
                assert r.status_code == 201, r.text
                assert r.json()["position"] == i + 1, r.text
                people.append(Entry(i, seats, email, link(r.json()["status_url"]), plan(i)))
            joined_at = time.monotonic()

            stop_intake, stop_answers, stop_watch = (asyncio.Event() for _ in range(3))
            seen: list[int] = []
            background = [
                asyncio.create_task(watch(api.pool, event_id, stop_watch, seen)),
                *(
                    asyncio.create_task(intake_loop(storm, stop_intake, rng))
                    for _ in range(INTAKE_WORKERS)
                ),
                *(asyncio.create_task(answer(storm, e, stop_answers, rng)) for e in people),
            ]
            cancelled = rng.sample(fill, FIRST_CANCELS + SECOND_CANCELS)
            try:
                # phase 1: a long queue; seats freed and offered, offers answered, some leave
                steps = [
                    later(rng.uniform(0, 4), storm.cancel(r)) for r in cancelled[:FIRST_CANCELS]
                ]
                steps += [
                    later(rng.uniform(0.5, 4.5), storm.decline(e))
                    for e in people
                    if e.plan == "leave"
                ]
                steps += [later(rng.uniform(0, 5), storm.offer_pass()) for _ in range(4)]
                await asyncio.gather(*steps)
                first_settled = await settle(api.pool, eid, time.monotonic() + SETTLE_S)
                first_intakes = len(storm.intake_ids)
                first = await entries(api.pool, event_id)
                waiting_after_first = sum(e["seats"] for e in first if e["status"] == "waiting")
                # phase 2: the queue runs dry while more seats free up: the intake and the
                # offers race for the last seats
                leaving = {e["email"] for e in first if e["status"] == "waiting"}
                steps = [
                    later(rng.uniform(0, 1.5), storm.decline(e))
                    for e in people[:STAY]
                    if e.email in leaving
                ]
                steps += [
                    later(rng.uniform(0, 1.5), storm.cancel(r)) for r in cancelled[FIRST_CANCELS:]
                ]
                steps += [later(rng.uniform(0, 2), storm.intake()) for _ in range(10)]
                steps += [later(rng.uniform(0, 2), storm.offer_pass()) for _ in range(2)]
                await asyncio.gather(*steps)
                second_settled = await settle(api.pool, eid, time.monotonic() + SETTLE_S)
            finally:
                stop_intake.set()
                stop_answers.set()
                stop_watch.set()
                await asyncio.gather(*background)
            storm_s = time.monotonic() - joined_at

    logs = read_logs(tmp_path)
    errors = [
        line
        for line in logs.splitlines()
        if line.startswith("{") and json.loads(line).get("level") in ("ERROR", "CRITICAL")
    ]
    report = (
        f"outcomes={dict(storm.outcomes)} storm={storm_s:.1f}s "
        f"settled={first_settled, second_settled} failures={storm.failures[:5]}\n{logs[-3000:]}"
    )

    # no commit over the cap: none failed at the probe's check, nothing answered 500
    assert storm.failures == [], report
    assert "probe_seat_cap" not in logs, report
    assert "pass failed" not in logs, report
    assert errors == [], report
    assert first_settled and second_settled, report
    pool = api.pool
    taken = await seats_taken(pool, event_id)
    assert taken <= CAP, report
    assert max(seen) <= CAP, report

    # the probe ran at the commits: every cancel, answer and offer is one checked commit
    checks = await pool.fetch(
        "SELECT * FROM probe.seat_checks WHERE event_id = $1 ORDER BY at", eid
    )
    rows = await entries(pool, event_id)
    ever_offered = [e for e in rows if e["offered_at"] is not None]
    answered = [e for e in ever_offered if e["status"] in ("accepted", "declined")]
    assert len(checks) >= FIRST_CANCELS + SECOND_CANCELS + len(answered) + 1, report
    assert max(c["taken"] for c in checks) == CAP  # the count reached the cap: it was tested
    assert all(c["taken"] <= c["cap"] == CAP for c in checks)
    # the queue comes first: a commit that took intake seats left room for every waiting seat
    jumped = [dict(c) for c in checks if c["intake"] and c["taken"] + c["waiting"] > CAP]
    assert jumped == [], report

    # every offer holds exactly its seats, in drafts of its own; every answer took effect
    regs = {
        r["id"]: r
        for r in await pool.fetch(
            "SELECT id, state::text AS state, state_origin::text AS origin, hold_expires_at,"
            " event.holds_seat_at(state, active, sale_status, hold_expires_at, now()) AS holds"
            " FROM event.registrations WHERE event_id = $1",
            eid,
        )
    }
    owners: Counter[uuid.UUID] = Counter()
    for e in rows:
        ids = list(e["registration_ids"])
        owners.update(ids)
        if e["offered_at"] is None:
            assert ids == [], dict(e)
            continue
        assert len(ids) == e["seats"], dict(e)
        states = {regs[r]["state"] for r in ids}
        assert {regs[r]["origin"] for r in ids} == {"waitlist"}, dict(e)
        expected = {"offered": {"draft"}, "accepted": {"open"}, "declined": {"cancel"}}
        assert states == expected[e["status"]], (dict(e), states)
        assert all(regs[r]["holds"] == (e["status"] != "declined") for r in ids), dict(e)
    assert all(n == 1 for n in owners.values()), "a registration is in two offers"
    drafts = {r for r, reg in regs.items() if reg["origin"] == "waitlist"}
    assert drafts == set(owners), "a waiting-list draft belongs to no offer"

    # every seat holder is accounted for: a fill registration not cancelled, an intake
    # that got its 201, or a seat of an offer held or accepted; each seat is one entry's
    holders = {r for r, reg in regs.items() if reg["holds"]}
    kept = {uuid.UUID(r) for r in fill} - {uuid.UUID(r) for r in cancelled}
    intakes = {uuid.UUID(r) for r in storm.intake_ids}
    offered = {
        r for e in rows if e["status"] in ("offered", "accepted") for r in e["registration_ids"]
    }
    assert holders == kept | intakes | offered, report
    assert len(holders) == len(kept) + len(intakes) + len(offered)
    # settled: no freed seat lies idle while a waiting entry would fit in it
    smallest = min((e["seats"] for e in rows if e["status"] == "waiting"), default=None)
    assert smallest is None or CAP - len(holders) < smallest, report

    # each entry offered once: one offer mail each, and none to an entry never offered
    mails = Counter(
        r["recipient"]
        for r in await pool.fetch(
            "SELECT recipient FROM event.outbox_messages WHERE event_id = $1"
            " AND subject LIKE 'A seat is free for you%'",
            eid,
        )
    )
    assert mails == Counter(e["email"] for e in ever_offered), report

    # queue order: a 1-seat entry fits wherever a later entry fits, so no later entry was
    # offered while it still waited
    for a_pos, a in enumerate(rows):
        if a["seats"] != 1:
            continue
        left = a["offered_at"] or a["decided_at"]
        for b in rows[a_pos + 1 :]:
            if b["offered_at"] is not None:
                assert left is not None and left <= b["offered_at"], (dict(a), dict(b))

    # the phases did what they were meant to: offers accepted and declined, a long queue
    # that the intake had to yield to, then seats taken by the intake past a short one
    statuses = Counter(e["status"] for e in rows)
    assert statuses["accepted"] >= 5 and statuses["declined"] >= 5, statuses
    assert waiting_after_first > 0, report
    if waiting_after_first >= FIRST_CANCELS:  # never fewer seats waiting than were freed
        assert first_intakes == 0, report
    assert storm.outcomes[("intake", 409, "event_seats_exhausted")] > 0, report
    assert time.monotonic() - started < 60, report

    # and the probe's check bites: a commit past the cap fails (nothing else does)
    for _ in range(CAP - len(holders)):
        await insert_registration(pool, eid)
    with pytest.raises(asyncpg.RaiseError, match="probe_seat_cap"):
        await insert_registration(pool, eid)
    assert await seats_taken(pool, event_id) == CAP
