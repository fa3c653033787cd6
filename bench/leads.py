"""Part 4 of `make bench`: one lead pass over a large event (`--leads N`).

One event of N registrations (default 100 000), every one an `open` walk-in, their
creation spread over 5 event-local days; one active rule admitting the event (its
request queued by the arming verb); the sink is the standalone signed webhook, POSTing
to a local aiohttp server on a loopback port (in this process) that answers each create
with a lead id. The lead pass runs with the default batch (200) and cap (1000) until
the queue is drained; it prints the groups, the registrations walked, the webhook calls,
the seconds and the rates. Goal: under 30 s for 100 000 registrations.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
from aiohttp import web

from bench.common import drop_database, free_port, fresh_database
from events_svc.adapters.lead_webhook import WebhookLeadSink
from events_svc.db import create_pool, transaction
from events_svc.settings import Settings
from events_svc.verbs.leads import LeadOptions, queue_for_rule, run_lead_pass

SECRET = "bench-lead-webhook-secret"
EVENT = """
INSERT INTO event.events (name, date_begin, date_end, date_tz)
VALUES ('Lead event', now() + interval '30 days', now() + interval '31 days', 'Europe/Lisbon')
RETURNING id
"""
SEED = """
INSERT INTO event.registrations (event_id, barcode, name, email, date_open, created_at)
SELECT $1, (7000000000 + g)::text, 'Guest ' || g, 'guest' || g || '@example.org', now(),
    timestamptz '2027-05-01 10:00+00' + (g % 5) * interval '1 day'
FROM generate_series(1, $2) g
"""
RULE = "INSERT INTO event.lead_rules (name) VALUES ('Everyone at the lead event') RETURNING id"
PREDICATE = """
INSERT INTO event.lead_rule_predicates (rule_id, axis, value_ids)
VALUES ($1, 'event', jsonb_build_array($2::text))
"""
COUNTS = """
SELECT (SELECT count(*) FROM event.lead_provenances WHERE delivered_no = delivery_no) AS groups,
       (SELECT count(*) FROM event.lead_provenance_registrations) AS linked
"""

LEADS_HEADER = (
    "| registrations | groups | webhook calls | pass s | registrations/s | groups/s | passes |\n"
    "|---:|---:|---:|---:|---:|---:|---:|"
)


async def _webhook() -> tuple[web.AppRunner, str, list[int]]:
    """A CRM's webhook on loopback: one lead id per idempotency key."""
    leads: dict[str, str] = {}
    calls: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        calls.append(len(body["new_registration_ids"]))
        key = request.headers["Idempotency-Key"]
        if body["action"] == "create":
            return web.json_response({"lead_id": leads.setdefault(key, f"L{len(leads) + 1}")})
        return web.json_response({})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/leads", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/leads", calls


async def leads_pass(url: str, n: int) -> str:
    conn = await asyncpg.connect(url)
    event_id: UUID = await conn.fetchval(EVENT)
    await conn.execute(SEED, event_id, n)
    rule_id: UUID = await conn.fetchval(RULE)
    await conn.execute(PREDICATE, rule_id, str(event_id))
    await conn.execute("VACUUM ANALYZE")
    settings = Settings(database_url=url, pool_min=2, pool_max=4)
    pool = await create_pool(url, settings)
    async with transaction(pool) as tx:
        await queue_for_rule(tx, rule_id, datetime.now(UTC))
    runner, hook, calls = await _webhook()
    sink = WebhookLeadSink(hook, SECRET)
    options = LeadOptions(batch=settings.lead_batch, cap=settings.lead_cron_limit)
    try:
        t0 = time.perf_counter()
        passes = walked = 0
        while True:
            summary = await run_lead_pass(pool, sink, options, datetime.now(UTC))
            passes += 1
            walked += summary.registrations
            if summary.parked:
                raise RuntimeError(f"the lead pass parked a request: {summary}")
            if not summary.more:
                break
        took = time.perf_counter() - t0
        counts = await conn.fetchrow(COUNTS)
    finally:
        await sink.close()
        await runner.cleanup()
        await pool.close()
        await conn.close()
    if counts["linked"] != n or walked != n:
        raise RuntimeError(f"walked {walked}, linked {counts['linked']} of {n}")
    groups = int(counts["groups"])
    return (
        f"| {n:,} | {groups} | {len(calls)} | {took:.2f} | {n / took:,.0f} "
        f"| {groups / took:,.1f} | {passes} |"
    )


async def leads_run(admin_url: str, n: int) -> str:
    url = await fresh_database(admin_url)
    try:
        return await leads_pass(url, n)
    finally:
        await drop_database(admin_url)
