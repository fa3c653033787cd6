"""Part 11 of `make bench`: the waiting list (`--waitlist N`, default 5 000 entries).

(o) The offer burst. One published event of 2N seats (10 000), full: 2N open registrations
bulk-inserted; its list on (`event.waitlist_settings`), N entries of one seat waiting
(bulk-inserted, distinct emails, `created_at` increasing). Then one UPDATE cancels N/5
registrations (1 000) at once, and `run_offer_pass` (the scheduler's options,
`offer_options`, with a capability secret and a public base URL so every mail carries its
links; the standalone ports) is called while its summary says `more`. Timed: the passes,
goal under 5 s. Checked: exactly N/5 entries `offered`, and they are the first N/5 in
queue order; N/5 held drafts; N/5 mails in the outbox, one to each offered address; the
seat counter (`event.holds_seat_at`) never above 2N, read by a second connection every
20 ms during the passes and after each.

(j) Joins against the intake, side by side. Through one real `events-svc serve` (public
intake on, rate limits raised far above the load), driven by aiohttp as part 1's (c):
`POST /intake/{event_id}` of one attendee on a published event of 2N existing
registrations and seats to spare, then `POST /intake/{event_id}/waitlist` of one seat on
a published event full at 2N with its list on; same clients, a distinct email per
request, fresh events per row. Each row runs intake, join, join, intake (each cell the
part's `--seconds`) and pools each path's two cells, so a drift of the machine's load
falls on both alike. Goal: joins at least 70 % of the intake.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg

from bench.common import (
    RAW_COUNT,
    Cell,
    drop_database,
    fresh_database,
    fresh_event,
    ms,
    pooled,
    post_cell,
    service,
)
from events_svc.adapters.standalone import standalone_ports
from events_svc.db import create_pool
from events_svc.loops import offer_options
from events_svc.settings import Settings
from events_svc.verbs.waitlist import OfferSummary, run_offer_pass

SECRET = "bench-waitlist-secret-0123456789"
PUBLIC_BASE = "https://tickets.example.org"
INTAKE = "/api/v1/event/intake/{}"
JOIN = "/api/v1/event/intake/{}/waitlist"
UNLIMITED = "1000000/minute"
JOIN_CLIENTS = (8, 32)
MAX_PASSES = 100  # a pass loop that never ends is a failure, not a hang
WATCH_S = 0.02

LIST_EVENT = """
UPDATE event.events SET seats_max = $2, is_published = true WHERE id = $1
"""
PUBLISH = "UPDATE event.events SET is_published = true WHERE id = $1"
LIST_ON = "INSERT INTO event.waitlist_settings (event_id, enabled) VALUES ($1, true)"
ENTRIES = """
INSERT INTO event.waitlist_entry (event_id, seats, name, email, created_at, updated_at)
SELECT $1, 1, 'Waiter ' || g, 'waiter' || g || '@example.org', t, t
FROM generate_series(1, $2) g,
    LATERAL (SELECT now() - interval '1 day' + g * interval '1 millisecond' AS t) at
"""
FREE = """
UPDATE event.registrations SET state = 'cancel', date_closed = now(), updated_at = now()
WHERE id IN (SELECT id FROM event.registrations WHERE event_id = $1 AND state = 'open'
             ORDER BY barcode LIMIT $2)
"""
STATUSES = """
SELECT status::text AS status, count(*) FROM event.waitlist_entry WHERE event_id = $1 GROUP BY 1
"""
FIRST_IN_QUEUE = """
SELECT id FROM event.waitlist_entry WHERE event_id = $1 ORDER BY created_at, id LIMIT $2
"""
OFFERED = """
SELECT id, email, registration_ids FROM event.waitlist_entry
WHERE event_id = $1 AND status = 'offered'
"""
HELD = """
SELECT id FROM event.registrations
WHERE event_id = $1 AND state = 'draft' AND state_origin = 'waitlist'
  AND hold_expires_at > clock_timestamp()
"""
MAILS = "SELECT recipient FROM event.outbox_messages WHERE event_id = $1"

OFFERS_HEADER = (
    "| seats | waiting | freed | passes | (o) offer s | offers/s | offered | in queue order "
    "| held drafts | mails | most seats held |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"
)
JOIN_HEADER = (
    "| existing | clients | (i) intake reg/s | (j) joins/s | j/i "
    "| (i) p50/p99 ms | (j) p50/p99 ms | entries after |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def _listed_event(conn: asyncpg.Connection, seats: int, seq: int) -> UUID:
    """A published event of `seats` seats, full (open registrations), its list on."""
    event_id = await fresh_event(conn, seats, seq)
    await conn.execute(LIST_EVENT, event_id, seats)
    await conn.execute(LIST_ON, event_id)
    return event_id


# --- (o) the offer burst --------------------------------------------------------------


class SeatWatch:
    """The event's seat count from its own connection, every WATCH_S while running."""

    def __init__(self, conn: asyncpg.Connection, event_id: UUID) -> None:
        self.conn, self.event_id = conn, event_id
        self.most = 0
        self._task: asyncio.Task[None] | None = None

    async def read(self) -> int:
        held = int(await self.conn.fetchval(RAW_COUNT, self.event_id))
        self.most = max(self.most, held)
        return held

    async def _loop(self) -> None:
        while True:
            await self.read()
            await asyncio.sleep(WATCH_S)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def _burst_checks(
    conn: asyncpg.Connection, event_id: UUID, freed: int
) -> tuple[dict[str, int], bool, int, int, list[str]]:
    """(entries by status, offered in queue order, held drafts, mails, problem lines)."""
    statuses = {r["status"]: r["count"] for r in await conn.fetch(STATUSES, event_id)}
    offered = await conn.fetch(OFFERED, event_id)
    first = {r["id"] for r in await conn.fetch(FIRST_IN_QUEUE, event_id, freed)}
    in_order = {r["id"] for r in offered} == first
    held = {r["id"] for r in await conn.fetch(HELD, event_id)}
    offered_drafts = {rid for r in offered for rid in r["registration_ids"]}
    mails = [r["recipient"] for r in await conn.fetch(MAILS, event_id)]
    problems = []
    if len(offered) != freed:
        problems.append(f"offers: {len(offered):,} entries offered, expected {freed:,}")
    if not in_order:
        problems.append(f"offers: the offered entries are not the first {freed:,} in queue order")
    if len(held) != freed or held != offered_drafts:
        problems.append(
            f"offers: {len(held):,} held drafts, {len(offered_drafts):,} recorded on the "
            f"offers, {len(held & offered_drafts):,} in both; expected {freed:,}"
        )
    if sorted(mails) != sorted(r["email"] for r in offered):
        problems.append(f"offers: {len(mails):,} mails queued, expected one per offer ({freed:,})")
    return statuses, in_order, len(held), len(mails), problems


async def offer_burst(url: str, waiting: int) -> list[str]:
    """(o): the table row, then a line per failed check (if any)."""
    seats, freed = 2 * waiting, waiting // 5
    conn = await asyncpg.connect(url)
    watcher = await asyncpg.connect(url)
    settings = Settings(
        database_url=url,
        pool_min=2,
        pool_max=4,
        capability_secrets=(SECRET,),
        public_base_url=PUBLIC_BASE,
    )
    pool = await create_pool(url, settings)
    try:
        event_id = await _listed_event(conn, seats, 700)
        await conn.execute(ENTRIES, event_id, waiting)
        await conn.execute(FREE, event_id, freed)
        await conn.execute("VACUUM ANALYZE event.registrations")
        await conn.execute("VACUUM ANALYZE event.waitlist_entry")
        watch = SeatWatch(watcher, event_id)
        ports, options = standalone_ports(), offer_options(settings)
        total, passes = OfferSummary(), 0
        watch.start()
        t0 = time.perf_counter()
        while passes < MAX_PASSES:
            summary = await run_offer_pass(pool, ports, options, datetime.now(UTC))
            passes += 1
            total.offered += summary.offered
            if not summary.more:
                break
        took = time.perf_counter() - t0
        await watch.stop()
        held_now = await watch.read()
        statuses, in_order, drafts, mails, problems = await _burst_checks(conn, event_id, freed)
    finally:
        await pool.close()
        await watcher.close()
        await conn.close()
    if watch.most > seats:
        problems.append(f"seats: the counter read {watch.most:,}, above the {seats:,} seats")
    if held_now != seats:
        problems.append(f"seats: {held_now:,} held after the passes, expected {seats:,}")
    if passes >= MAX_PASSES:
        problems.append(f"passes: still `more` after {passes} passes")
    row = (
        f"| {seats:,} | {waiting:,} | {freed:,} | {passes} | {took:.2f} "
        f"| {total.offered / took:,.0f} | {statuses.get('offered', 0):,} "
        f"| {'yes' if in_order else 'NO'} | {drafts:,} | {mails:,} | {watch.most:,} |"
    )
    return [row, *problems]


# --- (j) joins against the intake -----------------------------------------------------


async def joins_against_intake(url: str, existing: int, seconds: float) -> list[str]:
    """(j): one row per client count."""
    numbers = itertools.count()

    def attendee(_: int) -> dict[str, Any]:
        email = f"intake{next(numbers)}@example.org"
        return {"attendees": [{"name": "Bench Attendee", "email": email}]}

    def waiter(_: int) -> dict[str, Any]:
        return {"name": "Bench Waiter", "email": f"join{next(numbers)}@example.org", "seats": 1}

    env = {
        "EVENT_INTAKE_PUBLIC": "true",
        "EVENT_CAPABILITY_SECRET": SECRET,
        "EVENTS_PUBLIC_BASE_URL": PUBLIC_BASE,
        "EVENT_RATE_LIMIT_IP": UNLIMITED,
        "EVENT_RATE_LIMIT_EMAIL": UNLIMITED,
        "EVENT_RATE_LIMIT_EVENT_INTAKE": UNLIMITED,
        "EVENT_RATE_LIMIT_CAPABILITY": UNLIMITED,
    }
    conn = await asyncpg.connect(url)
    rows = []
    try:
        with service(url, max(JOIN_CLIENTS), 1, **env) as base:  # one process
            seq = 750
            for clients in JOIN_CLIENTS:
                open_event = await fresh_event(conn, existing, seq := seq + 1)
                await conn.execute(PUBLISH, open_event)
                full_event = await _listed_event(conn, existing, seq := seq + 1)
                await conn.execute("VACUUM ANALYZE event.registrations")
                # the first requests of each path: not timed
                await post_cell(base, INTAKE.format(open_event), attendee, clients, 0.5)
                await post_cell(base, JOIN.format(full_event), waiter, clients, 0.5)
                cells: dict[str, list[Cell]] = {"i": [], "j": []}
                for side in "ijji":  # ABBA: a drift of the machine's load falls on both
                    path = INTAKE.format(open_event) if side == "i" else JOIN.format(full_event)
                    body = attendee if side == "i" else waiter
                    cells[side].append(await post_cell(base, path, body, clients, seconds))
                i, j = pooled(cells["i"]), pooled(cells["j"])
                entries = await conn.fetchval(
                    "SELECT count(*) FROM event.waitlist_entry WHERE event_id = $1", full_event
                )
                rows.append(
                    f"| {existing:,} | {clients} | {i.rate:7.0f} | {j.rate:7.0f} "
                    f"| {j.rate / i.rate:5.0%} | {ms(i)} | {ms(j)} | {entries:,} |"
                )
                print(rows[-1], flush=True)
    finally:
        await conn.close()
    return rows


async def waitlist_run(admin_url: str, waiting: int, seconds: float) -> tuple[list[str], list[str]]:
    """(the offer burst's row and problems, the join rows), each on a fresh database."""
    url = await fresh_database(admin_url)
    try:
        burst = await offer_burst(url, waiting)
    finally:
        await drop_database(admin_url)
    url = await fresh_database(admin_url)
    try:
        joins = await joins_against_intake(url, 2 * waiting, seconds)
    finally:
        await drop_database(admin_url)
    return burst, joins
