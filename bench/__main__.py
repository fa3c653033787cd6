"""The hot-event registration benchmark (`make bench`).

Part 1. In ONE run on one PostgreSQL, for a hot limited event (seats far above the load) with
0, 10 000 and 100 000 existing registrations, it measures:
  (a) the raw-SQL ceiling: BEGIN; lock the event row; count; insert; COMMIT, from asyncpg;
  (b) the register verb called in-process;
  (c) POST /admin/registrations through a real `events-svc serve` (uvicorn) process,
      driven by aiohttp (httpx's client tops out near 650 requests/s on this machine);
each with 1, 8 and 32 concurrent workers, and prints registrations/second, p50/p99
latency and the ratios b/a and c/a as a Markdown table. Every cell gets a fresh event
seeded with the existing rows, then VACUUM ANALYZE (a plan cached on an empty table
would be a sequential scan).

Part 2. One before_event reminder to 100 000 eligible attendees, run to completion by
the pass loop (standalone template store and outbox, default batch 50 and cap 1000),
against a raw-SQL ceiling measured in the same run: the same receipts and outbox rows
written set-based (`INSERT ... SELECT`) in one transaction.

Part 3. The sale seam (`bench/seam.py`): confirmed facts of 1 to 4 attendees on one hot
event through HTTP, next to plain registrations and to redeliveries, in the same run.

Part 4. The lead pass (`bench/leads.py`): 100 000 walk-ins of one event over 5 days, one
matching rule, the signed webhook sink on a local server; groups and registrations/s.

Part 5. The attendance import (`bench/attendance.py`): N rows (`--imports N`, 10 000) POSTed
as a CSV to a real service and worked by its scheduler loop until the job completes.

Part 6. The registration export (`bench/export.py`): N registrations of one event
(`--export N`, 1 000 000), all columns, full and masked, through a real service over HTTP,
against a raw `COPY` of the same rows in the same run.

Part 7. An event operation (`bench/operations.py`): a reschedule of an event with N
attendees (`--operations N`, 100 000) through a real service: the start transaction, the
time until every trigger exists, and the optional dispatcher's messages per second.

Part 8. The register verb's combiner (`bench/combiner.py`): raw SQL, the verb and HTTP,
each uncombined and combined, at 0, 100 000 and 1 000 000 existing registrations
(`--combiner`) with 1, 8, 32 and 128 clients (`--clients`), and three service processes
against one.

Part 9. The outbox drainer (`bench/delivery.py`): N queued mails (`--delivery N`, 10 000) over
50 recipient domains sent to a local SMTP sink, no rate limit, against a plain aiosmtplib
loop with as many reused sessions in the same run; messages per second and their ratio.

Part 10. Documents (`bench/documents.py`): N badges (`--badges N`, 5 000) of one event printed
four per sheet through the badges verb, with the peak memory of the print at N and N/10;
the median render time of one registration's tickets PDF.

Part 11. The waiting list (`bench/waitlist.py`): N entries waiting on a full event of 2N
seats (`--waitlist N`, 5 000), N/5 seats freed at once, the offer passes timed and checked;
then waiting-list joins against intake registrations through HTTP, side by side.

Part 12. Webhooks (`bench/webhooks.py`): N registrations (`--webhooks N`, 1 000) through a real
service whose delivery loop fans them out to 3 endpoints on a local receiver (deliveries/s,
written live and as a backlog); then the hot registration path through HTTP with the
endpoints off and on, side by side.

Part 13. The hot event across processes (`bench/pooled.py`, `--pooled C`, 32 clients): one
service process, three, and three behind a real PgBouncer in transaction pooling.

Part 14. The public event page (`bench/event_page.py`, `--event-page N`, 1 000 existing
registrations): the JSON seat read model against the event's HTML page, which reads the
same model once, with 1, 8 and 32 clients through one service process; the ratio b/a.

Part 15. The document bound (`bench/document_bound.py`, `--document-bound S`, 6 sheets at
once): S clients print a 5 000-badge sheet back to back through one service process, with
EVENTS_DOCUMENT_CONCURRENCY at 1, at its default (the cores) and at four times the cores, while
`/healthz` is asked every 10 ms: sheets printed and refused (503 documents_busy), and
`/healthz` p50 / p99 / max against an idle baseline. Goal: p99 under 50 ms by default.

Database: EVENTS_BENCH_ADMIN_URL (a superuser URL) or a fresh embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time
from datetime import UTC, datetime
from uuid import UUID

import asyncpg

from bench.attendance import IMPORTS_HEADER, imports_run
from bench.combiner import COMBINER_HEADER, PROCESSES_HEADER, combiner_run
from bench.common import (
    DB,
    Cell,
    admin_server,
    drive,
    fresh_event,
    http_cell,
    raw_cell,
    service,
    with_db,
)
from bench.delivery import DELIVERY_HEADER, delivery_run
from bench.document_bound import BOUND_HEADER, document_bound_run
from bench.documents import DOCUMENTS_HEADER, documents_run
from bench.event_page import EVENT_PAGE_HEADER, event_page_run
from bench.export import EXPORT_HEADER, export_run
from bench.leads import LEADS_HEADER, leads_run
from bench.operations import OPERATIONS_HEADER, operations_run
from bench.pooled import POOLED_HEADER, pooled_run
from bench.seam import SEAM_HEADER, seam_run
from bench.waitlist import JOIN_HEADER, OFFERS_HEADER, waitlist_run
from bench.webhooks import FANOUT_HEADER, HOT_HEADER, webhooks_run
from events_svc import migrate
from events_svc.actors import SYSTEM
from events_svc.adapters.standalone import standalone_ports
from events_svc.db import create_pool
from events_svc.models import AttendeeInput
from events_svc.settings import Settings
from events_svc.verbs.mail import PassOptions, run_mail_pass
from events_svc.verbs.registrations import register
from events_svc.verbs.tokens import create_token


async def verb_cell(url: str, event_id: UUID, workers: int, seconds: float) -> Cell:
    settings = Settings(database_url=url, pool_min=workers, pool_max=workers)
    pool = await create_pool(url, settings)
    attendee = [AttendeeInput(name="Bench Attendee", email="bench@example.org")]

    async def op(_: int) -> None:
        await register(pool, SYSTEM, event_id, attendee, datetime.now(UTC))

    try:
        return await drive(workers, seconds, op)
    finally:
        await pool.close()


async def run(
    admin_url: str, sizes: list[int], concurrency: list[int], seconds: float
) -> list[str]:
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{DB}"')
    await admin.close()
    url = with_db(admin_url, DB)
    conn = await asyncpg.connect(url)
    await migrate.apply(conn, migrate.default_dir())
    pool = await create_pool(url, Settings(database_url=url, pool_min=1, pool_max=2))
    token, _ = await create_token(pool, "bench", ["*"], None, datetime.now(UTC))
    await pool.close()
    rows = []
    seq = 0
    with service(url, pool_max=max(concurrency)) as base:
        for size in sizes:
            for workers in concurrency:
                cells = {}
                for mode in ("raw", "verb", "http"):
                    seq += 1
                    event_id = await fresh_event(conn, size, seq)
                    if mode == "raw":
                        cells[mode] = await raw_cell(url, event_id, workers, seconds)
                    elif mode == "verb":
                        cells[mode] = await verb_cell(url, event_id, workers, seconds)
                    else:
                        cells[mode] = await http_cell(base, token, event_id, workers, seconds)
                rows.append(_row(size, workers, cells))
                print(rows[-1], flush=True)
    await conn.close()
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.close()
    return rows


# --- the reminder: one before_event mail to 100 000 attendees --------------------------------

REMINDER_EVENT = """
INSERT INTO event.events (name, date_begin, date_end) VALUES
    ('Reminder event', now() + interval '10 days', now() + interval '11 days') RETURNING id
"""
REMINDER_SEED = """
INSERT INTO event.registrations (event_id, barcode, name, email, date_open)
SELECT $1, ($2::bigint * 1000000 + g)::text, 'Guest ' || g, 'guest' || g || '@example.org', now()
FROM generate_series(1, $3) g
"""
REMINDER_TEMPLATE = """
INSERT INTO event.message_templates (kind, name, subject, body)
VALUES ('mail', 'Reminder', 'See you at {{ event.name }}',
        'Hello {{ registration.name }}, {{ event.name }} starts {{ event.date_begin }}.')
RETURNING id
"""
REMINDER_MAIL = """
INSERT INTO event.mails (event_id, interval_nbr, interval_unit, interval_kind, template_ref,
    scheduled_date) VALUES ($1, 30, 'days', 'before_event', $2, now() - interval '1 minute')
RETURNING id
"""
# the ceiling: the same receipts and outbox rows, set-based, in one transaction
RAW_RECEIPTS = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, mail_sent,
    outcome, sent_at)
SELECT $1, r.id, now(), true, 'sent', now() FROM event.registrations r
WHERE r.event_id = $2 AND r.state IN ('open', 'done') AND r.active
"""
RAW_OUTBOX = """
INSERT INTO event.outbox_messages (channel, recipient, sender, subject, body, event_id,
    registration_id, scheduler_id)
SELECT 'mail', r.email, 'events@localhost', 'See you at Reminder event',
    'Hello ' || r.name || ', Reminder event starts soon.', r.event_id, r.id, $1
FROM event.registrations r
WHERE r.event_id = $2 AND r.state IN ('open', 'done') AND r.active
"""


async def reminder_event(conn: asyncpg.Connection, n: int, seq: int) -> tuple[UUID, UUID]:
    event_id: UUID = await conn.fetchval(REMINDER_EVENT)
    await conn.execute(REMINDER_SEED, event_id, seq, n)
    template_id = await conn.fetchval(REMINDER_TEMPLATE)
    mail_id: UUID = await conn.fetchval(REMINDER_MAIL, event_id, template_id)
    await conn.execute("VACUUM ANALYZE event.registrations")
    return event_id, mail_id


async def reminder(url: str, n: int) -> str:
    """Queue one reminder to n attendees with the pass loop, against a set-based ceiling."""
    conn = await asyncpg.connect(url)
    event_a, mail_a = await reminder_event(conn, n, 900)
    t0 = time.perf_counter()
    async with conn.transaction():
        await conn.execute(RAW_RECEIPTS, mail_a, event_a)
        await conn.execute(RAW_OUTBOX, mail_a, event_a)
    raw = time.perf_counter() - t0
    _, mail_b = await reminder_event(conn, n, 901)
    await conn.close()
    settings = Settings(database_url=url, pool_min=2, pool_max=4)
    pool = await create_pool(url, settings)
    ports = standalone_ports()
    options = PassOptions(batch=settings.mail_batch, cap=settings.mail_cron_limit,
                          default_sender=settings.mail_sender)  # fmt: skip
    t0 = time.perf_counter()
    sent = passes = 0
    while True:
        summary = await run_mail_pass(pool, ports, options, datetime.now(UTC), mail_id=mail_b)
        sent += summary.sent
        passes += 1
        if not summary.more:
            break
    took = time.perf_counter() - t0
    await pool.close()
    return (
        f"| {n:,} | {raw:.2f} | {n / raw:,.0f} | {took:.2f} | {sent / took:,.0f} "
        f"| {(sent / took) / (n / raw):.0%} | {passes} | {sent:,} |"
    )


REMINDER_HEADER = (
    "| attendees | raw s | raw mails/s | pass loop s | pass mails/s | ratio | passes | queued |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|"
)


async def reminder_run(admin_url: str, n: int) -> str:
    admin = await asyncpg.connect(admin_url)
    await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    await admin.execute(f'CREATE DATABASE "{DB}"')
    url = with_db(admin_url, DB)
    conn = await asyncpg.connect(url)
    await migrate.apply(conn, migrate.default_dir())
    await conn.close()
    try:
        return await reminder(url, n)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        await admin.close()


def _row(size: int, workers: int, cells: dict[str, Cell]) -> str:
    a, b, c = cells["raw"], cells["verb"], cells["http"]
    return (
        f"| {size:>7,} | {workers:>2} | {a.rate:7.0f} | {b.rate:7.0f} | {c.rate:7.0f} "
        f"| {b.rate / a.rate:5.0%} | {c.rate / a.rate:5.0%} "
        f"| {a.pct(0.5):5.1f} / {a.pct(0.99):6.1f} | {b.pct(0.5):5.1f} / {b.pct(0.99):6.1f} "
        f"| {c.pct(0.5):5.1f} / {c.pct(0.99):6.1f} |"
    )


HEADER = (
    "| existing | conc | (a) raw/s | (b) verb/s | (c) http/s | b/a | c/a "
    "| (a) p50/p99 ms | (b) p50/p99 ms | (c) p50/p99 ms |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each cell")
    parser.add_argument("--sizes", default="0,10000,100000",
                        help="existing registrations per cell ('' skips this part)")  # fmt: skip
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--seam", default="0,100000",
                        help="existing registrations per sale-seam row ('' skips it)")  # fmt: skip
    parser.add_argument("--reminder", type=int, default=100_000,
                        help="attendees of the reminder benchmark (0 skips it)")  # fmt: skip
    parser.add_argument("--leads", type=int, default=100_000,
                        help="registrations of the lead pass benchmark (0 skips it)")  # fmt: skip
    parser.add_argument(
        "--imports",
        type=int,
        default=10_000,
        help="rows of the attendance import benchmark (0 skips it)",
    )
    parser.add_argument(
        "--export",
        type=int,
        default=1_000_000,
        help="registrations of the export benchmark (0 skips it)",
    )
    parser.add_argument(
        "--operations",
        type=int,
        default=100_000,
        help="attendees of the event operation benchmark (0 skips it)",
    )
    parser.add_argument(
        "--combiner",
        default="0,100000,1000000",
        help="existing registrations per size of the combiner part ('' skips it)",
    )
    parser.add_argument("--clients", default="1,8,32,128", help="clients of the combiner part")
    parser.add_argument(
        "--delivery",
        type=int,
        default=10_000,
        help="queued mails of the outbox drainer benchmark (0 skips it)",
    )
    parser.add_argument(
        "--badges",
        type=int,
        default=5_000,
        help="badges of the documents benchmark (0 skips it)",
    )
    parser.add_argument(
        "--waitlist",
        type=int,
        default=5_000,
        help="waiting entries of the waiting-list benchmark, on 2N seats (0 skips it)",
    )
    parser.add_argument(
        "--webhooks",
        type=int,
        default=1_000,
        help="registrations of the webhooks benchmark, 3 endpoints each (0 skips it)",
    )
    parser.add_argument(
        "--pooled",
        type=int,
        default=32,
        help="clients of the hot event across 1 and 3 processes and PgBouncer (0 skips it)",
    )
    parser.add_argument(
        "--event-page",
        type=int,
        default=1_000,
        help="existing registrations of the public event page benchmark (0 skips it)",
    )
    parser.add_argument(
        "--document-bound",
        type=int,
        default=6,
        help="sheets printed at once against the document bound, /healthz timed (0 skips it)",
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    concurrency = [int(x) for x in args.concurrency.split(",")]
    try:
        import uvloop  # noqa: PLC0415 - optional: the server side uses it through uvicorn

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, {loop_name}; {args.seconds:g} s per cell")  # fmt: skip
    with admin_server() as admin_url:
        if sizes:
            print(HEADER, flush=True)
            rows = asyncio.run(run(admin_url, sizes, concurrency, args.seconds))
            print("\n" + HEADER)
            print("\n".join(rows))
        seam_sizes = [int(x) for x in args.seam.split(",") if x.strip()]
        if seam_sizes:
            print("\nThe sale seam, 32 clients through HTTP:\n" + SEAM_HEADER, flush=True)
            seam_rows = asyncio.run(seam_run(admin_url, seam_sizes, 32, args.seconds))
            print("\n" + SEAM_HEADER)
            print("\n".join(seam_rows))
        if args.reminder:
            line = asyncio.run(reminder_run(admin_url, args.reminder))
            print("\nOne before_event reminder, standalone adapters, default batch and cap:")
            print(REMINDER_HEADER)
            print(line)
        if args.leads:
            line = asyncio.run(leads_run(admin_url, args.leads))
            print("\nOne lead pass, one rule, walk-ins over 5 days, the signed webhook sink:")
            print(LEADS_HEADER)
            print(line)
        if args.imports:
            line = asyncio.run(imports_run(admin_url, args.imports))
            print("\nOne attendance import (CSV through HTTP), worked by the service's loop:")
            print(IMPORTS_HEADER)
            print(line)
        if args.export:
            lines = asyncio.run(export_run(admin_url, args.export))
            print(f"\nThe export of {args.export:,} registrations, all columns, median of 3:")
            print(EXPORT_HEADER)
            print("\n".join(lines))
        if args.operations:
            line = asyncio.run(operations_run(admin_url, args.operations))
            print(f"\nA reschedule of an event with {args.operations:,} attendees, then dispatch:")
            print(OPERATIONS_HEADER)
            print(line)
        combiner_sizes = [int(x) for x in args.combiner.split(",") if x.strip()]
        if combiner_sizes:
            clients = [int(x) for x in args.clients.split(",")]
            print("\nThe register verb's combiner, one hot event:\n" + COMBINER_HEADER, flush=True)
            table, batches, processes = asyncio.run(
                combiner_run(admin_url, combiner_sizes, clients, args.seconds)
            )
            print("\n" + COMBINER_HEADER)
            print("\n".join(table))
            print("\nBatch sizes formed by the combined verb:\n" + "\n".join(batches))
            print("\nService processes, combined, one hot event:\n" + PROCESSES_HEADER)
            print("\n".join(processes))
        if args.delivery:
            lines = asyncio.run(delivery_run(admin_url, args.delivery))
            print(f"\nThe outbox drainer, {args.delivery:,} mails to a local SMTP sink, no rate:")
            print(DELIVERY_HEADER)
            print("\n".join(lines))
        if args.badges:
            lines = asyncio.run(documents_run(admin_url, args.badges))
            print(f"\nDocuments: {args.badges:,} badges and one registration's tickets PDF:")
            print(DOCUMENTS_HEADER)
            print("\n".join(lines))
        if args.waitlist:
            n = args.waitlist
            print("\nThe waiting list: the offer burst, then joins as measured:\n" + JOIN_HEADER,
                  flush=True)  # fmt: skip
            burst, joins = asyncio.run(waitlist_run(admin_url, n, args.seconds))
            print(f"\nThe waiting list: {n // 5:,} seats freed at once, {n:,} entries waiting:")
            print(OFFERS_HEADER)
            print("\n".join(burst))
            print("\nWaiting-list joins against intake registrations, one service, HTTP:")
            print(JOIN_HEADER)
            print("\n".join(joins))
        if args.webhooks:
            n = args.webhooks
            print(f"\nWebhooks: {n:,} registrations fanned out to 3 endpoints:\n" + FANOUT_HEADER,
                  flush=True)  # fmt: skip
            fanout, hot = asyncio.run(webhooks_run(admin_url, n, args.seconds))
            print(f"\nWebhooks: {n:,} registrations, 3 endpoints, a local receiver:")
            print(FANOUT_HEADER)
            print("\n".join(fanout))
            print("\nThe hot registration path, endpoints off and on, one service, HTTP:")
            print(HOT_HEADER)
            print("\n".join(hot))
        if args.pooled:
            lines = asyncio.run(pooled_run(admin_url, args.pooled, args.seconds))
            print(f"\nThe hot event across processes, {args.pooled} clients, HTTP:")
            print(POOLED_HEADER)
            print("\n".join(lines))
        if args.event_page:
            n = args.event_page
            print("\nThe public event page against the JSON seat read model, one service:\n"
                  + EVENT_PAGE_HEADER, flush=True)  # fmt: skip
            lines = asyncio.run(event_page_run(admin_url, n, args.seconds))
            print(f"\nThe public event page against the JSON seat read model, {n:,} "
                  "registrations, one service, HTTP:")  # fmt: skip
            print(EVENT_PAGE_HEADER)
            print("\n".join(lines))
        if args.document_bound:
            print("\nThe document bound full, /healthz every 10 ms, one service:\n" + BOUND_HEADER,
                  flush=True)  # fmt: skip
            lines = asyncio.run(document_bound_run(admin_url, args.document_bound))
            print(f"\nThe document bound, {args.document_bound} sheets of 5,000 badges at once, "
                  "/healthz every 10 ms, one service, HTTP:")  # fmt: skip
            print(BOUND_HEADER)
            print("\n".join(lines))


if __name__ == "__main__":
    main()
