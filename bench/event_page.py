"""Part 14 of `make bench`: the public event page (`--event-page N`, default 1 000 existing
registrations; 0 skips it).

One real `events-svc serve` (one process; public intake on, a capability secret, every
rate limit raised far above the load). One published event made through the admin API as
an organiser would: 3 tickets with seat caps (2 000, 1 000 and 105 seats: with N = 1 000
the last has 5 left, "few left") and 2 questions linked to it (a mandatory `simple_choice`
of 3 answers, a `text_box`). Then N registrations bulk-inserted on its tickets (60 / 30 /
10 %; one in ten `done`, the rest `open`) and `VACUUM ANALYZE`, so the seat counts read
real rows.

Two reads of the same seat read model (`get_seat_view`), side by side, through HTTP,
driven by aiohttp as part 1's (c):

- (a) `GET /admin/events/{id}/seats` with a bearer token (`event:read`): the JSON seat
  read model;
- (b) `GET /public/events/{id}` with `Accept: text/html`: the event's page (its read, the
  seat read model once, the page rendered by Jinja2 in a worker thread).

With 1, 8 and 32 clients, each row runs a, b, b, a (the part's `--seconds` each, after
0.5 s of untimed requests on each path) and pools each side's two cells, so a drift of the
machine's load falls on both. Every answer must be 200. Checked once before the cells:
the page is HTML and names every ticket, the JSON counts the N seats. Goal: (b) at least
70 % of (a).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import aiohttp
import asyncpg

from bench.common import Cell, drop_database, fresh_database, load_cell, ms, pooled, service
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

SECRET = "bench-event-page-secret-0123456789"
UNLIMITED = "1000000/minute"
CLIENTS = (1, 8, 32)
ADMIN = "/api/v1/event/admin"
SEATS = ADMIN + "/events/{}/seats"
PAGE = "/api/v1/event/public/events/{}"
HTML = {"Accept": "text/html"}
ENV = {
    "EVENT_INTAKE_PUBLIC": "true",
    "EVENT_CAPABILITY_SECRET": SECRET,
    "EVENT_RATE_LIMIT_IP": UNLIMITED,
    "EVENT_RATE_LIMIT_CAPABILITY": UNLIMITED,
    "EVENT_RATE_LIMIT_EMAIL": UNLIMITED,
    "EVENT_RATE_LIMIT_EVENT_INTAKE": UNLIMITED,
}
# (name, seats_max, limit per order, share of the existing registrations in %)
TICKETS = (
    ("Standard", 2_000, 10, 60),
    ("Student", 1_000, 2, 30),
    ("Patron", 105, 1, 10),
)
QUESTIONS = (
    {
        "title": "Which track will you follow?",
        "question_type": "simple_choice",
        "is_mandatory_answer": True,
        "answers": [{"name": "Web"}, {"name": "Data"}, {"name": "Infrastructure"}],
    },
    {"title": "Dietary requirements", "question_type": "text_box"},
)
SEED = """
INSERT INTO event.registrations (event_id, event_ticket_id, barcode, name, email, state)
SELECT $1, $2, ($3::bigint * 1000000 + g)::text, 'Guest ' || g, 'guest' || g || '@example.org',
    (CASE WHEN g % 10 = 0 THEN 'done' ELSE 'open' END)::event.registration_state
FROM generate_series(1, $4) g
"""

EVENT_PAGE_HEADER = (
    "| existing | clients | (a) seats JSON /s | (b) page /s | b/a | (a) p50/p99 ms "
    "| (b) p50/p99 ms |\n"
    "|---:|---:|---:|---:|---:|---:|---:|"
)


async def _post(client: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> Any:
    async with client.post(path, json=body) as r:
        if r.status not in (200, 201):
            raise RuntimeError(f"POST {path} answered {r.status}: {await r.text()}")
        return await r.json()


async def make_event(base: str, auth: dict[str, str]) -> tuple[UUID, list[UUID]]:
    """The published event, made through the admin API; its id and its tickets' ids."""
    begin = datetime.now(UTC).replace(microsecond=0) + timedelta(days=30)
    event = {
        "name": "PyData Lisbon 2027",
        "description": "Two days of talks and workshops.\nBring a laptop.",
        "date_begin": begin.isoformat(),
        "date_end": (begin + timedelta(days=1, hours=9)).isoformat(),
        "date_tz": "Europe/Lisbon",
        "seats_limited": True,
        "seats_max": 3_000,
        "location": "Rua Augusta 1, Lisboa",
        "event_url": "https://pydata.example.org/lisbon",
    }
    async with aiohttp.ClientSession(base, headers=auth) as client:
        event_id = UUID((await _post(client, f"{ADMIN}/events", event))["id"])
        tickets = []
        for name, seats, per_order, _ in TICKETS:
            body = {
                "event_id": str(event_id),
                "name": name,
                "description": f"{name} admission",
                "seats_max": seats,
                "limit_max_per_order": per_order,
            }
            tickets.append(UUID((await _post(client, f"{ADMIN}/tickets", body))["id"]))
        for sequence, question in enumerate(QUESTIONS, 1):
            made = await _post(client, f"{ADMIN}/questions", question)
            link = {"question_id": made["id"], "sequence": sequence * 10}
            await _post(client, f"{ADMIN}/events/{event_id}/questions", link)
        await _post(client, f"{ADMIN}/events/{event_id}/publish",
                    {"date_publish": "2020-01-01T00:00:00Z"})  # fmt: skip
    return event_id, tickets


async def seed(conn: asyncpg.Connection, event_id: UUID, tickets: list[UUID], n: int) -> None:
    """n registrations over the tickets by their shares; then VACUUM ANALYZE."""
    left = n
    for seq, (ticket_id, (_, _, _, share)) in enumerate(zip(tickets, TICKETS, strict=True)):
        count = left if seq == len(TICKETS) - 1 else n * share // 100
        left -= count
        await conn.execute(SEED, event_id, ticket_id, 1400 + seq, count)
    await conn.execute("VACUUM ANALYZE event.registrations")


async def check(
    base: str, auth: dict[str, str], event_id: UUID, n: int
) -> tuple[int, int, list[str]]:
    """One answer of each: (JSON bytes, page bytes, problems)."""
    problems = []
    async with aiohttp.ClientSession(base) as client:
        async with client.get(SEATS.format(event_id), headers=auth) as r:
            seats = await r.read()
            taken = (await r.json())["event"]["taken"] if r.status == 200 else None
        if taken != n:
            problems.append(f"seats JSON: {r.status}, {taken} seats taken, expected {n:,}")
        async with client.get(PAGE.format(event_id), headers=HTML) as r:
            page = await r.read()
            kind = r.headers.get("content-type", "")
        text = page.decode()
        missing = [name for name, *_ in TICKETS if name not in text]
        if r.status != 200 or not kind.startswith("text/html") or missing:
            problems.append(f"page: {r.status} {kind}, tickets not named: {missing}")
    return len(seats), len(page), problems


async def event_page_run(admin_url: str, existing: int, seconds: float) -> list[str]:
    """One row per client count, then the answers' sizes and a line per failed check."""
    url = await fresh_database(admin_url)
    conn = await asyncpg.connect(url)
    rows: list[str] = []
    try:
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
        await pool.close()
        auth = {"Authorization": f"Bearer {token}"}
        with service(url, max(CLIENTS), 1, **ENV) as base:  # one process
            event_id, tickets = await make_event(base, auth)
            await seed(conn, event_id, tickets, existing)
            json_bytes, page_bytes, problems = await check(base, auth, event_id, existing)
            paths = {"a": (SEATS.format(event_id), auth), "b": (PAGE.format(event_id), HTML)}
            for clients in CLIENTS:
                for path, headers in paths.values():  # the first requests: not timed
                    await load_cell(base, path, clients, 0.5, headers=headers)
                cells: dict[str, list[Cell]] = {"a": [], "b": []}
                for side in "abba":  # ABBA: a drift of the machine's load falls on both
                    path, headers = paths[side]
                    cells[side].append(
                        await load_cell(base, path, clients, seconds, headers=headers)
                    )
                a, b = pooled(cells["a"]), pooled(cells["b"])
                rows.append(
                    f"| {existing:,} | {clients} | {a.rate:7.0f} | {b.rate:7.0f} "
                    f"| {b.rate / a.rate:5.0%} | {ms(a)} | {ms(b)} |"
                )
                print(rows[-1], flush=True)
    finally:
        await conn.close()
        await drop_database(admin_url)
    sizes = f"Answers: (a) {json_bytes:,} bytes of JSON, (b) {page_bytes:,} bytes of HTML."
    return [*rows, "", sizes, *problems]
