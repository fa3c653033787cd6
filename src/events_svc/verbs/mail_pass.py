"""The scheduler pass: claims due scheduler rows and queues their mails, exactly once.

A pass loops over batches. Each batch is one transaction that claims ONE due
scheduler row (`FOR UPDATE SKIP LOCKED`, so any number of instances can run
passes side by side), lets its engine (`mail_engines`) do up to `batch` sends,
writes the receipts (`UNIQUE (scheduler_id, registration_id)`) and the queued
messages in the same transaction, updates the row's completion and due time,
and commits. The pass stops at `cap` sends; `more` then says work is left.

A failing line never stops the pass and never makes it spin. Its failure is
recorded on the row (`error_kind`, a safe `error_detail`) with a back-off: the
row is not claimed again before `next_attempt_at`, one minute after the first
failure, doubling up to an hour; a success, an edit of the line or of its
template clears it. A batch that raises anything at all (a template's runtime
error is already the line's `render_failed`; here: a lock conflict, a bug) is
rolled back and recorded as `batch_failed` the same way; only a database that
cannot even record that fails the pass itself. A batch that changes nothing ends
its row's turn in the pass. Failures are logged when they start and when they
clear.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc.db import Connection, Pool, transaction
from events_svc.diagnostics import error_fields
from events_svc.ports import PartnerDirectoryNotComposed, Ports
from events_svc.verbs.mail_engines import Batch, LineFailure, LineWork, PassOptions

__all__ = ["PassOptions", "RunSummary", "backoff", "count_failing_lines", "next_due",
           "run_mail_pass"]  # fmt: skip

log = logging.getLogger("events_svc.scheduler")

BACKOFF_FIRST = timedelta(minutes=1)
BACKOFF_MAX = timedelta(hours=1)

# Due rows on live events: active, not cancelled, not backing off; after_sub dies with the
# event's end. `force` (run this row now) ignores the due time and the back-off.
_CLAIM = """
SELECT m.id, m.event_id, m.interval_kind::text AS kind, m.interval_unit::text AS unit,
    m.last_registration_id, m.error_kind::text AS error_kind, m.attempts,
    m.interval_nbr, m.template_ref, m.template_kind::text AS template_kind,
    m.notification_channel::text AS channel, m.scheduled_date,
    e.name AS event_name, e.date_begin, e.date_end, e.date_tz, e.location, e.event_url,
    e.is_multi_slots, e.organizer_id, e.company_id
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
  AND ($2::boolean OR (m.scheduled_date <= $1
                       AND (m.next_attempt_at IS NULL OR m.next_attempt_at <= $1)))
  AND (m.interval_kind <> 'after_sub' OR e.date_end > $1)
  AND ($3::uuid IS NULL OR m.id = $3)
  AND NOT (m.id = ANY($4::uuid[]))
ORDER BY m.scheduled_date NULLS LAST, m.id
LIMIT 1
FOR UPDATE OF m SKIP LOCKED  -- one instance works a scheduler row at a time
"""
_SET_ERROR = """
UPDATE event.mails SET error_kind = $2::event.mail_error_kind, error_datetime = $3,
    error_detail = $4, attempts = attempts + 1, next_attempt_at = $5
WHERE id = $1
"""
_CLEAR_ERROR = """
UPDATE event.mails SET error_kind = NULL, error_datetime = NULL, error_detail = NULL,
    attempts = 0, next_attempt_at = NULL
WHERE id = $1 AND (error_kind IS NOT NULL OR attempts > 0)
"""
_FAILING = """
SELECT count(*) FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.error_kind IS NOT NULL AND NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
"""
_NEXT_DUE = """
SELECT min(greatest(m.scheduled_date, coalesce(m.next_attempt_at, m.scheduled_date)))
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
  AND (m.interval_kind <> 'after_sub' OR e.date_end > $1)
"""


@dataclass
class RunSummary:
    """What one pass did. `failures` counts failing lines by kind, and recipients without
    a usable address under `recipient_invalid`."""

    schedulers: int = 0
    sent: int = 0
    dropped: int = 0
    failed: int = 0
    pruned: int = 0
    recipients_failed: int = 0
    advanced: int = 0  # batches that changed something
    more: bool = False
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def progressed(self) -> bool:
        """Whether the pass changed anything (else its due work is blocked: locked by
        another instance)."""
        return bool(self.advanced or self.failed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedulers": self.schedulers, "sent": self.sent, "dropped": self.dropped,
            "failed": self.failed, "pruned": self.pruned,
            "recipients_failed": self.recipients_failed, "more": self.more,
            "failures": self.failures,
        }  # fmt: skip

    def count(self, kind: str, n: int = 1) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + n


def backoff(attempts: int) -> timedelta:
    """How long a line waits after its `attempts`-th consecutive failure."""
    return min(BACKOFF_FIRST * (1 << min(max(attempts - 1, 0), 12)), BACKOFF_MAX)


async def _sender(ports: Ports, m: dict[str, Any], default: str) -> str:
    """Author fallback: the organizer's, then the company's address, then the default."""
    for party in (m["organizer_id"], m["company_id"]):
        if party is None:
            continue
        try:
            contact = await ports.partner_directory.contact(party)
        except PartnerDirectoryNotComposed:
            return default
        if contact is not None and contact.email:
            return contact.email
    return default


def _line(m: dict[str, Any]) -> dict[str, Any]:
    return {"scheduler_id": str(m["id"]), "event_id": str(m["event_id"])}


async def _record_failure(conn: Connection, m: dict[str, Any], failure: LineFailure,
                          now: datetime, trace: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Record a line failure with its back-off; log it only when it starts or changes."""
    attempts = int(m["attempts"]) + 1
    retry_at = now + backoff(attempts)
    await conn.execute(_SET_ERROR, m["id"], failure.kind, now, failure.detail, retry_at)
    fields = {**_line(m), "kind": failure.kind, "detail": failure.detail, "attempts": attempts,
              "next_attempt_at": retry_at.isoformat(), **(trace or {})}  # fmt: skip
    level = logging.WARNING if m["error_kind"] != failure.kind else logging.DEBUG
    log.log(level, "scheduler line failing", extra={"fields": fields})


async def _clear_failure(conn: Connection, m: dict[str, Any]) -> None:
    if m["error_kind"] is None and not m["attempts"]:
        return
    await conn.execute(_CLEAR_ERROR, m["id"])
    log.info("scheduler line recovered",
             extra={"fields": {**_line(m), "after_attempts": int(m["attempts"])}})  # fmt: skip


async def _work(conn: Connection, ports: Ports, options: PassOptions, m: dict[str, Any],
                now: datetime, force: bool, size: int,
                materialize: dict[UUID, bool]) -> Batch:  # fmt: skip
    """One batch of one claimed row, its failure bookkeeping included."""
    sender = await _sender(ports, m, options.default_sender)
    work = LineWork(conn, m, ports, sender, now, force, options)
    if m["kind"] == "after_sub":
        materialize[m["id"]] = await work.attendee_engine(size, materialize.get(m["id"], True))
    elif m["is_multi_slots"]:
        await work.slot_engine(size)
    else:
        await work.event_engine(size)
    b = work.batch
    if b.failure is not None:
        await _record_failure(conn, m, b.failure, now)
    elif b.sent or b.dropped or b.done or b.bad_recipients:
        await _clear_failure(conn, m)
    if b.bad_recipients:
        log.info("scheduler line: recipients without a usable address",
                 extra={"fields": {**_line(m), "recipients": b.bad_recipients}})  # fmt: skip
    return b


async def _batch_failed(pool: Pool, m: dict[str, Any], exc: Exception, now: datetime) -> None:
    """A batch that raised was rolled back: record it on its line, in a new transaction."""
    failure = LineFailure("batch_failed", type(exc).__name__)
    async with transaction(pool) as conn:
        await _record_failure(conn, m, failure, now, error_fields(exc))


async def run_mail_pass(
    pool: Pool,
    ports: Ports,
    options: PassOptions,
    now: datetime,
    *,
    mail_id: UUID | None = None,
    force: bool = False,
    stopping: Callable[[], bool] = lambda: False,
) -> RunSummary:
    """One pass over due schedulers (or the one named, `force` ignoring its due time and
    back-off). `stopping` is asked before each batch: a shutdown finishes the batch in hand.
    """
    summary = RunSummary()
    handled: list[UUID] = []
    budget = options.cap
    seen: set[UUID] = set()
    materialize: dict[UUID, bool] = {}  # after_sub rows still to materialise in this pass
    while not stopping():
        if budget <= 0:
            summary.more = True
            break
        m: dict[str, Any] | None = None
        try:
            async with transaction(pool) as conn:
                row = await conn.fetchrow(_CLAIM, now, force, mail_id, handled)
                if row is None:
                    break
                m = dict(row)
                b = await _work(conn, ports, options, m, now, force, min(options.batch, budget),
                                materialize)  # fmt: skip
        except Exception as exc:
            if m is None:
                raise  # the claim itself failed: the pass fails, the loop backs off
            # recorded on a fresh connection; if the database is really away, this raises
            # and the pass fails (the loop backs off)
            await _batch_failed(pool, m, exc, now)
            seen.add(m["id"])
            handled.append(m["id"])
            summary.failed += 1
            summary.count("batch_failed")
            continue
        seen.add(m["id"])
        budget -= b.sent + b.bad_recipients
        summary.sent += b.sent
        summary.dropped += b.dropped
        summary.pruned += b.pruned
        summary.advanced += b.progressed()
        if b.bad_recipients:
            summary.recipients_failed += b.bad_recipients
            summary.count("recipient_invalid", b.bad_recipients)
        if b.failure is not None:
            summary.failed += 1
            summary.count(b.failure.kind)
        if b.finished or b.failure is not None or not b.progressed():
            handled.append(m["id"])
    summary.schedulers = len(seen)
    return summary


async def next_due(pool: Pool, now: datetime) -> datetime | None:
    """The earliest time any live scheduler can be worked (its due time, or the end of
    its back-off): the loop sleeps until then."""
    async with transaction(pool) as conn:
        value: datetime | None = await conn.fetchval(_NEXT_DUE, now)
        return value


async def count_failing_lines(pool: Pool) -> int:
    """Live scheduler lines whose last attempt failed: they back off, so they never show
    as lag; this is the figure to alert on."""
    async with transaction(pool) as conn:
        return int(await conn.fetchval(_FAILING))
