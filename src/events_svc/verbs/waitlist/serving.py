"""The offer pass: every event with a live waiting list served in turn.

Each event is served in one transaction, locking as the register verb does (the event
row, then its slot and ticket rows) after claiming the event's settings row with
`FOR NO KEY UPDATE SKIP LOCKED` (one process serves an event at a time; the others go on
to the next). The list of an event that takes no one any more (`offering.closing`:
cancelled, or over by the database's clock) is closed: its entries become `removed`,
their offers released. An archived event's entries are held as they are. Otherwise the
pass first expires the offers whose deadline has passed (their drafts are cancelled
through the one state transition with reason `waitlist_offer_expired`, the entry becomes
`expired`), then decides the waiting entries in queue order (`created_at`, then id): the
first whose seats fit is offered (`offering.make_offers`), and one whose seats do not
fit is skipped for now and keeps its place, so a smaller entry behind it may be served
first.

**An event whose offers fail backs off on its own** (`backoff.OFFERS`: 5 s doubling to
10 min, kept on its settings row: `offer_failures`, `offer_retry_at`, `offer_error`, the
error's class): the pass skips it until then and goes on with the other events. The
failure is logged when it starts (an error line with the event's id, never attendee
data), at debug level while it repeats, and once when the event is served again.

The pass runs within seconds of seats being freed (`NOTIFY event_waitlist_due`: a cancel,
an archive, a declined or expired offer, a raised cap, a join) and, while anyone waits,
at least once a minute (`SAFETY_NET`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.backoff import OFFERS
from events_svc.db import CONNECTION_ERRORS, Connection, Pool, connection, must, transaction
from events_svc.diagnostics import error_fields
from events_svc.models import MAX_PER_ORDER
from events_svc.ports import Ports
from events_svc.verbs.mail import Senders
from events_svc.verbs.registrations import assess_queue_place, lock_event_by_id
from events_svc.verbs.waitlist.offering import (
    OfferOptions,
    closing,
    find_event,
    make_offers,
    open_for_offers,
    read_event,
    release_offer,
)

log = logging.getLogger("events_svc.waitlist")

_CLAIM = """
SELECT enabled, offer_hours, offer_template_id, offer_failures FROM event.waitlist_settings
WHERE event_id = $1
FOR NO KEY UPDATE SKIP LOCKED  -- one process serves an event at a time
"""
# the events with live entries that are not backing off
_DUE = """
SELECT w.event_id,
    bool_or(w.status = 'offered' AND w.offer_expires_at <= clock_timestamp()) AS expiring
FROM event.waitlist_entry w
WHERE w.status IN ('waiting', 'offered') AND ($1::uuid IS NULL OR w.event_id > $1)
  AND NOT EXISTS (SELECT 1 FROM event.waitlist_settings s
                  WHERE s.event_id = w.event_id AND s.offer_retry_at > $3)
GROUP BY w.event_id ORDER BY w.event_id LIMIT $2
"""
DUE_PAGE = 500  # events looked at per read of the pass
_NEXT = """
SELECT (SELECT min(w.offer_expires_at) FROM event.waitlist_entry w
        WHERE w.status = 'offered' AND NOT EXISTS (
            SELECT 1 FROM event.waitlist_settings s
            WHERE s.event_id = w.event_id AND s.offer_retry_at > $1)) AS expiry,
    (SELECT min(s.offer_retry_at) FROM event.waitlist_settings s
     WHERE s.offer_retry_at > $1 AND EXISTS (
         SELECT 1 FROM event.waitlist_entry w
         WHERE w.event_id = s.event_id AND w.status IN ('waiting', 'offered'))) AS retry,
    EXISTS (SELECT 1 FROM event.waitlist_entry WHERE status = 'waiting') AS waiting
"""
SAFETY_NET = timedelta(minutes=1)  # while anyone waits, the pass runs at least this often
_SCOPES_WAITING = """
SELECT event_ticket_id, event_slot_id, min(seats) AS seats
FROM event.waitlist_entry WHERE event_id = $1 AND status = 'waiting'
GROUP BY event_ticket_id, event_slot_id
"""
_CLOSE_LIST = """
UPDATE event.waitlist_entry
SET status = 'removed', decided_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE event_id = $1 AND status IN ('waiting', 'offered')
RETURNING id, registration_ids
"""
_EXPIRE = """
UPDATE event.waitlist_entry
SET status = 'expired', decided_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE event_id = $1 AND status = 'offered' AND offer_expires_at <= clock_timestamp()
RETURNING id, registration_ids
"""
_WAITING_PAGE = """
SELECT w.* FROM event.waitlist_entry w
WHERE w.event_id = $1 AND w.status = 'waiting'
  AND ($2::timestamptz IS NULL OR (w.created_at, w.id) > ($2, $3::uuid))
ORDER BY w.created_at, w.id LIMIT $4
FOR NO KEY UPDATE  -- after the event, slot and ticket rows
"""
# the event's back-off, on its settings row (written when it has none: its defaults)
_FAILED = """
INSERT INTO event.waitlist_settings AS s (event_id, offer_failures, offer_retry_at, offer_error)
VALUES ($1, 1, $2, $3)
ON CONFLICT (event_id) DO UPDATE
SET offer_failures = s.offer_failures + 1, offer_retry_at = $2, offer_error = $3
RETURNING offer_failures
"""
_RETRY_AT = "SELECT offer_failures FROM event.waitlist_settings WHERE event_id = $1"
_RECOVERED = """
UPDATE event.waitlist_settings
SET offer_failures = 0, offer_retry_at = NULL, offer_error = NULL
WHERE event_id = $1
"""


@dataclass
class OfferSummary:
    """What one pass did."""

    offered: int = 0
    expired: int = 0
    closed: int = 0  # entries of events that take no one any more
    events: int = 0
    skipped: int = 0  # events another process was serving
    failed: int = 0  # events whose transaction failed (backing off; served again later)
    more: bool = False

    @property
    def progressed(self) -> bool:
        return bool(self.offered or self.expired or self.closed or self.failed)


async def _closing_entries(
    conn: Connection, event: dict[str, Any], statement: str, reason: str, now: datetime
) -> int:
    """Close the event's entries `statement` picks (`_EXPIRE`: offers past their deadline
    become `expired`; `_CLOSE_LIST`: every live entry of an event that takes no one
    becomes `removed`), their offers' drafts released with `reason`; how many."""
    rows = await conn.fetch(statement, event["id"])
    for row in rows:
        await release_offer(conn, event, list(row["registration_ids"]), reason, now)
    return len(rows)


async def _worth_serving(conn: Connection, event: dict[str, Any], now: datetime) -> bool:
    """Whether the smallest waiting entry of some scope would fit now (read without locks:
    the pass takes the event lock only when it may offer something)."""
    for scope in await conn.fetch(_SCOPES_WAITING, event["id"]):
        try:
            place = await assess_queue_place(
                conn,
                event,
                slot_id=scope["event_slot_id"],
                ticket_id=scope["event_ticket_id"],
                seats=int(scope["seats"]),
                now=now,
                default_cap=MAX_PER_ORDER,  # the register verb's own cap, as the offer's
            )
        except errors.DomainError:
            continue  # a closed sale window, a seat count above a cap: nothing to offer
        if place.free:
            return True
    return False


async def _serve_event(
    pool: Pool,
    ports: Ports,
    options: OfferOptions,
    details: dict[str, Any],
    sender: str | None,
    now: datetime,
    summary: OfferSummary,
) -> None:
    """Close, expire and offer for one event, in one transaction (its offers' sender
    asked before it; None when it was not open for offers as first read: should it be
    open now, its offers wait for the next pass, which comes at once)."""
    event_id = details["id"]
    recovered = 0
    async with transaction(pool) as conn:
        claimed = await conn.fetchrow(_CLAIM, event_id)
        if claimed is None:
            summary.skipped += 1
            return
        settings = dict(claimed)
        if settings["offer_failures"]:  # served again: its back-off ends with this commit
            recovered = int(settings["offer_failures"])
            await conn.execute(_RECOVERED, event_id)
        locked = await lock_event_by_id(conn, event_id)
        event = {**(await read_event(conn, event_id)), **locked}  # as locked
        summary.events += 1
        if closing(event) is not None:
            summary.closed += await _closing_entries(
                conn, event, _CLOSE_LIST, "waitlist_event_closed", now
            )
        else:
            summary.expired += await _closing_entries(
                conn, event, _EXPIRE, "waitlist_offer_expired", now
            )
            if open_for_offers(event):
                if sender is None:  # it opened since it was read: no question under a lock
                    summary.more = True
                else:
                    await _offer_in_order(
                        conn, ports, options, event, settings, sender, now, summary
                    )
    if recovered:
        fields = {"event_id": str(event_id), "after_failures": recovered}
        log.info("waitlist offers recovered for an event", extra={"fields": fields})


async def _offer_in_order(
    conn: Connection,
    ports: Ports,
    options: OfferOptions,
    event: dict[str, Any],
    settings: dict[str, Any],
    sender: str,
    now: datetime,
    summary: OfferSummary,
) -> None:
    """The waiting entries in queue order, a page at a time, offered where they fit."""
    after: tuple[Any, Any] = (None, None)
    while True:
        page = [
            dict(r) for r in await conn.fetch(_WAITING_PAGE, event["id"], *after, options.batch)
        ]
        served = await make_offers(conn, ports, options, event, settings, page, sender, now)
        summary.offered += len(served.offered)
        if len(served.offered) >= options.batch:
            summary.more = True  # a full page of offers: the next pass goes on
            return
        if len(page) < options.batch:
            return
        after = (page[-1]["created_at"], page[-1]["id"])


async def _due_events(
    pool: Pool, now: datetime, after: UUID | None, summary: OfferSummary
) -> tuple[list[dict[str, Any]], UUID | None]:
    """One page of the events with live entries that have work and are not backing off:
    a list to close, an offer past its deadline, or free seats for some waiting entry;
    and where the next page starts (None: this was the last)."""
    work = []
    broken: list[tuple[UUID, Exception]] = []
    async with connection(pool) as conn:
        due = await conn.fetch(_DUE, after, DUE_PAGE, now)
        for row in due:
            try:
                event = await find_event(conn, row["event_id"])
                if event is None:
                    continue
                if (
                    closing(event) is not None
                    or row["expiring"]
                    or (open_for_offers(event) and await _worth_serving(conn, event, now))
                ):
                    work.append(event)
            except CONNECTION_ERRORS:
                raise  # the database is away: the whole pass fails and backs off
            except Exception as exc:
                broken.append((row["event_id"], exc))
    for event_id, error in broken:
        await _failed(pool, summary, event_id, error, now)
    return work, (due[-1]["event_id"] if len(due) == DUE_PAGE else None)


async def _failed(
    pool: Pool, summary: OfferSummary, event_id: UUID, exc: Exception, now: datetime
) -> None:
    """One event's failure: its back-off recorded (a new transaction: the event's rolled
    back), logged when it starts (its id and the error's class, never attendee data); the
    pass goes on with the other events."""
    summary.failed += 1
    async with transaction(pool) as conn:
        failures = int(await conn.fetchval(_RETRY_AT, event_id) or 0) + 1
        retry_at = now + OFFERS.delay(failures)
        await conn.execute(_FAILED, event_id, retry_at, type(exc).__name__[:200])
    fields = {
        **error_fields(exc),
        "event_id": str(event_id),
        "failures": failures,
        "retry_at": retry_at.isoformat(),
    }
    level = logging.ERROR if failures == 1 else logging.DEBUG
    log.log(level, "waitlist offer pass failed for an event", extra={"fields": fields})


async def run_offer_pass(
    pool: Pool,
    ports: Ports,
    options: OfferOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
) -> OfferSummary:
    """Serve every event with a waiting list that is not backing off: close the lists of
    events that take no one, expire overdue offers, offer freed seats. One event's failure
    backs that event off; the others are served."""
    summary = OfferSummary()
    senders = Senders(ports, options.default_sender)
    after: UUID | None = None
    while True:
        work, after = await _due_events(pool, now, after, summary)
        for event in work:
            if stopping():
                summary.more = True
                return summary
            sender: str | None = None  # asked only where offers may be made
            if open_for_offers(event):
                try:  # the partner directory's failure (a timeout, a refusal) is the event's
                    sender = await senders.of(event["organizer_id"], event["company_id"])
                except Exception as exc:
                    await _failed(pool, summary, event["id"], exc, now)
                    continue
            try:
                await _serve_event(pool, ports, options, event, sender, now, summary)
            except CONNECTION_ERRORS:
                raise  # the database is away: the whole pass fails and backs off
            except Exception as exc:
                await _failed(pool, summary, event["id"], exc, now)
        if after is None:
            return summary


async def next_offer_due(pool: Pool, now: datetime) -> datetime | None:
    """When the pass is next due: the earliest offer deadline (it expires the offer then)
    or end of an event's back-off, and a minute from now while anyone waits (the safety
    net under the wake-ups)."""
    async with connection(pool) as conn:
        row = must(await conn.fetchrow(_NEXT, now))
    due: list[datetime] = [row[k] for k in ("expiry", "retry") if row[k] is not None]
    if row["waiting"]:
        due.append(now + SAFETY_NET)
    return min(due, default=None)
