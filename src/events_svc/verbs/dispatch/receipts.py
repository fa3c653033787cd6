"""A receipt's settlement: sent, skipped or parked, and the logs that say so.

A batch settles every receipt it claimed in ONE statement, in the transaction that queued
the messages: `sent`; `skipped` with a kind (the attendee left, has no usable address,
a later calendar change replaced this one, the event was archived, or cancelled since a
reminder or follow-up was written): settled for good;
or `parked` with a kind, a safe detail and a back-off (`backoff.TRIGGER_RECEIPTS`: one
minute after the first parking, doubling up to an hour). Settling clears the claim's
lease.
A parked receipt is claimed again once its back-off is over; setting its purpose's
template releases it at once.

Parking is logged as a warning when it starts for a (purpose, kind) (no other receipt
of the purpose is parked with that kind), and at debug level while it repeats; the
release of a purpose's last parked receipt is logged once. A batch that raised rolled
back whole: its receipts the claim still holds are parked `batch_failed` in a new
transaction.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events_svc.backoff import TRIGGER_RECEIPTS
from events_svc.db import Connection, Pool
from events_svc.diagnostics import error_fields
from events_svc.verbs.leases import TRIGGER_RECEIPTS as QUEUE
from events_svc.verbs.leases import Claim

log = logging.getLogger("events_svc.dispatch")

DETAIL_MAX = 300
# why a receipt parks (retried) and why it is skipped (settled): the migration's CHECK
TEMPLATE_UNMAPPED = "template_unmapped"
ENQUEUE_REFUSED = "enqueue_refused"
BATCH_FAILED = "batch_failed"
PARK_KINDS = frozenset(
    {
        TEMPLATE_UNMAPPED,
        "template_unresolved",
        "template_renderer_not_composed",
        "render_failed",
        ENQUEUE_REFUSED,
        BATCH_FAILED,
    }
)
REGISTRATION_INACTIVE = "registration_inactive"
RECIPIENT_INVALID = "recipient_invalid"
SUPERSEDED = "superseded"
EVENT_ARCHIVED = "event_archived"
EVENT_CANCELLED = "event_cancelled"

_SETTLE = """
UPDATE event.trigger_dispatch_receipts d
SET state = x.state::event.trigger_dispatch_state, error_kind = x.kind, error_detail = x.detail,
    attempts = x.attempts, next_attempt_at = x.retry_at, updated_at = $1,
    lease_until = NULL, lease_token = NULL,
    settled_at = CASE WHEN x.state IN ('sent', 'skipped') THEN $1::timestamptz END
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::int[], $7::timestamptz[])
    AS x(trigger_id, state, kind, detail, attempts, retry_at)
WHERE d.trigger_id = x.trigger_id
"""
# the (purpose, kind) pairs already parked outside this batch: their parking is not news
_PARKED_ELSEWHERE = """
SELECT DISTINCT purpose::text AS purpose, error_kind FROM event.trigger_dispatch_receipts
WHERE state = 'parked' AND purpose = ANY($1::event.trigger_purpose[])
  AND NOT (trigger_id = ANY($2::uuid[]))
"""
_STILL_PARKED = """
SELECT DISTINCT purpose::text AS purpose FROM event.trigger_dispatch_receipts
WHERE state = 'parked' AND purpose = ANY($1::event.trigger_purpose[])
"""
_ATTEMPTS = """
SELECT trigger_id, attempts FROM event.trigger_dispatch_receipts WHERE trigger_id = ANY($1::uuid[])
"""


@dataclass
class Settlement:
    """What one batch decided for each receipt it claimed (the claimed rows)."""

    sent: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    parked: list[tuple[dict[str, Any], str, str]] = field(default_factory=list)
    failed: bool = False  # the batch raised: rolled back, its receipts parked afresh

    def skip(self, row: dict[str, Any], kind: str) -> None:
        self.skipped.append((row, kind))

    def park(self, row: dict[str, Any], kind: str, detail: str = "") -> None:
        safe = str(kind) if kind in PARK_KINDS else ENQUEUE_REFUSED
        self.parked.append((row, safe, detail[:DETAIL_MAX]))

    def counts(self) -> Counter[str]:
        """Skipped and parked receipts by kind."""
        return Counter([k for _, k in self.skipped] + [k for _, k, _ in self.parked])


async def write_settlements(conn: Connection, s: Settlement, now: datetime) -> None:
    """Write the batch's settlements in one statement, and log parking that starts and
    purposes that recover."""
    columns: list[tuple[Any, ...]] = []
    for row in s.sent:
        columns.append((row["trigger_id"], "sent", None, None, row["attempts"], None))
    for row, kind in s.skipped:
        columns.append((row["trigger_id"], "skipped", kind, None, row["attempts"], None))
    for row, kind, detail in s.parked:
        attempts = int(row["attempts"]) + 1
        retry_at = now + TRIGGER_RECEIPTS.delay(attempts)
        columns.append((row["trigger_id"], "parked", kind, detail or None, attempts, retry_at))
    if not columns:
        return
    await _log_parking(conn, s, now)
    await conn.execute(_SETTLE, now, *(list(c) for c in zip(*columns, strict=True)))
    await _log_recovery(conn, s)


async def _log_parking(conn: Connection, s: Settlement, now: datetime) -> None:
    if not s.parked:
        return
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], str]]] = {}
    for row, kind, detail in s.parked:
        groups.setdefault((str(row["purpose"]), kind), []).append((row, detail))
    purposes = sorted({p for p, _ in groups})
    batch = [row["trigger_id"] for row, _, _ in s.parked]
    known = {
        (r["purpose"], r["error_kind"])
        for r in await conn.fetch(_PARKED_ELSEWHERE, purposes, batch)
    }
    for (purpose, kind), rows in groups.items():
        repeat = (purpose, kind) in known or any(
            row["receipt_state"] == "parked" and row["error_kind"] == kind for row, _ in rows
        )
        attempts = max(int(row["attempts"]) + 1 for row, _ in rows)
        fields = {
            "purpose": purpose,
            "kind": kind,
            "detail": rows[0][1],
            "receipts": len(rows),
            "attempts": attempts,
            "next_attempt_at": (now + TRIGGER_RECEIPTS.delay(attempts)).isoformat(),
        }
        level = logging.DEBUG if repeat else logging.WARNING
        log.log(level, "trigger dispatch parking", extra={"fields": fields})


async def _log_recovery(conn: Connection, s: Settlement) -> None:
    released = Counter(str(r["purpose"]) for r in s.sent if r["receipt_state"] == "parked")
    if not released:
        return
    left = {r["purpose"] for r in await conn.fetch(_STILL_PARKED, sorted(released))}
    for purpose, n in released.items():
        if purpose not in left:
            fields = {"purpose": purpose, "receipts": n}
            log.info("trigger dispatch recovered", extra={"fields": fields})


async def park_failed_batch(
    pool: Pool, claim: Claim, rows: list[dict[str, Any]], exc: Exception, now: datetime
) -> Settlement:
    """A batch that raised was rolled back: park the receipts the claim still holds
    `batch_failed` (the error's class as the detail, never its message) in a new
    transaction. If even that fails, the database is away and the caller's pass fails."""
    s = Settlement(failed=True)
    held = [(row["trigger_id"], claim.lease.token) for row in rows]
    async with QUEUE.holding(pool, held) as (conn, kept):
        attempts = {
            r["trigger_id"]: int(r["attempts"]) for r in await conn.fetch(_ATTEMPTS, sorted(kept))
        }
        for row in rows:
            if row["trigger_id"] in attempts:
                current = {**row, "attempts": attempts[row["trigger_id"]]}
                s.park(current, BATCH_FAILED, type(exc).__name__)
        await write_settlements(conn, s, now)
    repeat = all(r["receipt_state"] == "parked" and r["error_kind"] == BATCH_FAILED for r in rows)
    fields = {**error_fields(exc), "receipts": len(s.parked)}
    log.log(
        logging.DEBUG if repeat else logging.WARNING,
        "trigger dispatch batch failed",
        extra={"fields": fields},
    )
    return s
