"""Part of `make bench`: a reschedule of an event with N attendees (`--operations N`,
default 100 000), through a real `events-svc serve` process.

One event of N `open` registrations, seeded set-based. The reschedule is previewed, then
started with If-Match: the start's answer time is the start transaction (the event
change, the one `ics_sequence` bump and the N-row audience snapshot) plus one HTTP round
trip. The operation is then worked by the service's lifespan loop (woken by the start's
NOTIFY; default `EVENTS_OPERATION_BATCH` 1000), polled every 50 ms, until it is
`completed`: the time from the start's request until all N triggers exist. Goals: the
start under 2 s, all triggers in under 30 s.

The ceiling, in the same run on a second event of N: the same N triggers written by one
`INSERT ... SELECT` in one transaction.

Then the optional dispatcher: `event_rescheduled` mapped to a mail template, the service
restarted with `EVENT_TRIGGER_DISPATCH=true`, and timed until every trigger has its
outbox message (each with its `.ics` attachment): messages per second.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import httpx

from bench.common import drop_database, fresh_database, service
from events_svc.db import create_pool
from events_svc.settings import Settings
from events_svc.verbs.tokens import create_token

API = "/api/v1/event"
EVENT = """
INSERT INTO event.events (name, date_begin, date_end, date_tz, seats_limited, seats_max, location)
VALUES ($1, now() + interval '30 days', now() + interval '31 days', 'Europe/Lisbon', false, 0,
    'Lisbon')
RETURNING id
"""
SEED = """
INSERT INTO event.registrations (event_id, barcode, name, email, date_open)
SELECT $1, ($2::bigint + g)::text, 'Guest ' || g, 'guest' || g || '@example.org', now()
FROM generate_series(1, $3) g
"""
# the raw ceiling: an operation row, then every trigger in one statement
RAW_OPERATION = """
INSERT INTO event.event_operations (event_id, kind, state, params, revision,
    audience_estimate, actor_id, actor_kind, started_by, event_revision, ics_sequence,
    ctx_date_begin, ctx_date_end, ctx_date_tz, audience, created_at, updated_at, started_at)
SELECT id, 'reschedule', 'running', '{}'::jsonb, revision, 0, 'bench', 'token', 'bench',
    revision, ics_sequence + 1, date_begin, date_end, date_tz, 0, now(), now(), now()
FROM event.events WHERE id = $1
RETURNING id
"""
RAW_TRIGGERS = """
INSERT INTO event.triggers (operation_id, event_id, registration_id, purpose, event_revision,
    registration_version, ics_sequence, ics_method, ctx_date_begin, ctx_date_end,
    ctx_date_tz, ctx_location, created_at)
SELECT $2, r.event_id, r.id, 'event_rescheduled', 2, r.version, 1, 'REQUEST',
    now() + interval '40 days', now() + interval '41 days', 'Europe/Lisbon', 'Porto', now()
FROM event.registrations r WHERE r.event_id = $1
ORDER BY r.id
ON CONFLICT DO NOTHING
"""
TRIGGERS = "SELECT count(*) FROM event.triggers WHERE operation_id = $1"
MESSAGES = """
SELECT count(*) FROM event.outbox_messages o JOIN event.triggers t ON t.id = o.trigger_id
WHERE t.operation_id = $1 AND jsonb_array_length(o.attachments) = 1
"""

OPERATIONS_HEADER = (
    "| attendees | raw s | preview s | start s | all triggers s | triggers/s | ratio "
    "| dispatch s | messages/s |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def _event(conn: asyncpg.Connection, name: str, n: int, base: int) -> UUID:
    event_id: UUID = await conn.fetchval(EVENT, name)
    await conn.execute(SEED, event_id, base, n)
    return event_id


async def _raw(conn: asyncpg.Connection, event_id: UUID) -> float:
    t0 = time.perf_counter()
    async with conn.transaction():
        operation_id = await conn.fetchval(RAW_OPERATION, event_id)
        await conn.execute(RAW_TRIGGERS, event_id, operation_id)
    return time.perf_counter() - t0


async def _poll(http: httpx.AsyncClient, path: str, t0: float) -> dict[str, Any]:
    while True:
        op: dict[str, Any] = (await http.get(path)).json()
        if op["state"] in ("completed", "cancelled", "failed"):
            return op
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"the operation did not finish: {op}")
        await asyncio.sleep(0.05)


async def _reschedule(base: str, token: str, event_id: UUID) -> tuple[float, float, float, str]:
    """(seconds of the preview, of the start's answer, until completed; the operation)."""
    headers = {"Authorization": f"Bearer {token}"}
    params = {
        "date_begin": "2027-09-10T09:00:00+01:00",
        "date_end": "2027-09-11T18:00:00+01:00",
        "location": "Porto",
    }
    async with httpx.AsyncClient(base_url=f"{base}{API}", headers=headers, timeout=120) as http:
        t0 = time.perf_counter()
        r = await http.post(
            f"/admin/events/{event_id}/operations", json={"kind": "reschedule", "params": params}
        )
        previewed = time.perf_counter() - t0
        if r.status_code != 201:
            raise RuntimeError(f"the preview answered {r.status_code}: {r.text[:500]}")
        op = r.json()
        t0 = time.perf_counter()
        r = await http.post(
            f"/admin/operations/{op['id']}/start", headers={"if-match": str(op["revision"])}
        )
        started = time.perf_counter() - t0
        if r.status_code != 202:
            raise RuntimeError(f"the start answered {r.status_code}: {r.text[:500]}")
        done = await _poll(http, f"/admin/operations/{op['id']}", t0)
        took = time.perf_counter() - t0
        if done["state"] != "completed":
            raise RuntimeError(f"the operation ended {done['state']}: {done['errors']}")
    return previewed, started, took, str(op["id"])


async def _dispatch(url: str, token: str, operation_id: str, n: int) -> float:
    """Map event_rescheduled to a template, serve with the dispatcher on, and time until
    every trigger has its message."""
    headers = {"Authorization": f"Bearer {token}"}
    template = {
        "kind": "mail",
        "name": "Moved",
        "subject": "{{ event.name }} moved",
        "body": "Hello {{ registration.name }}, {{ event.name }} now starts "
        "{{ event.date_begin }} at {{ event.location }}.",
    }
    conn = await asyncpg.connect(url)
    try:
        with service(url, pool_max=8, EVENT_TRIGGER_DISPATCH="true") as base:
            async with httpx.AsyncClient(
                base_url=f"{base}{API}", headers=headers, timeout=60
            ) as http:
                r = await http.post("/admin/templates", json=template)
                if r.status_code != 201:
                    raise RuntimeError(f"the template answered {r.status_code}: {r.text[:300]}")
                t0 = time.perf_counter()
                r = await http.put(
                    "/admin/trigger-templates/event_rescheduled",
                    json={"template_id": r.json()["id"]},
                )
                if r.status_code not in (200, 201):
                    raise RuntimeError(f"the mapping answered {r.status_code}: {r.text[:300]}")
                while await conn.fetchval(MESSAGES, UUID(operation_id)) < n:
                    if time.perf_counter() - t0 > 900:
                        raise RuntimeError("the dispatcher did not finish")
                    await asyncio.sleep(0.5)
                return time.perf_counter() - t0
    finally:
        await conn.close()


async def operations_run(admin_url: str, n: int) -> str:
    url = await fresh_database(admin_url)
    try:
        conn = await asyncpg.connect(url)
        raw_event = await _event(conn, "Raw", n, 8_000_000_000)
        event_id = await _event(conn, "Moving event", n, 9_000_000_000)
        await conn.execute("VACUUM ANALYZE event.registrations")
        raw = await _raw(conn, raw_event)
        pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
        token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
        await pool.close()
        with service(url, pool_max=8) as base:
            previewed, started, took, operation_id = await _reschedule(base, token, event_id)
        triggers = int(await conn.fetchval(TRIGGERS, UUID(operation_id)))
        if triggers != n:
            raise RuntimeError(f"{triggers} triggers for {n} attendees")
        print(f"  (raw {raw:.2f} s; preview {previewed:.2f} s, start {started:.2f} s, "
              f"all triggers {took:.2f} s; now the dispatcher)", flush=True)  # fmt: skip
        dispatched = await _dispatch(url, token, operation_id, n)
        await conn.close()
    finally:
        await drop_database(admin_url)
    return (
        f"| {n:,} | {raw:.2f} | {previewed:.2f} | {started:.2f} | {took:.2f} | {n / took:,.0f} "
        f"| {raw / took:.0%} | {dispatched:.1f} | {n / dispatched:,.0f} |"
    )
