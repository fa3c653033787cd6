"""The scheduler pass: claims due scheduler rows and queues their mails, exactly once.

A pass loops over batches. Each batch first picks the next workable row without a
lock, resolves its sender through the partner directory (a host port is never
awaited while row locks are held) and has the renderer compile the line's template
(`ports.prepare_template`: in a worker thread, once per template revision), then
opens one transaction that claims that ONE
row (`FOR UPDATE SKIP LOCKED`, so any number of instances can run passes side by
side), lets its engine (`engines`) do up to `batch` sends, writes the receipts
(`UNIQUE (scheduler_id, registration_id)`) and the queued messages in the same
transaction, updates the row's completion and due time, and commits. The pass stops
at `cap` sends; `more` then says work is left.

A failing line never stops the pass and never makes it spin (see `failures`): it is
recorded and backed off. A batch that raises anything at all is rolled back and
recorded as `batch_failed`; only a database that cannot even record that fails the
pass; a partner directory that fails while the sender is looked up fails that line
the same way. A batch that changes nothing ends its row's turn in the pass. Workable
rows are `event.line_is_live(m, e, now)` with `event.line_workable_at(m) <= now`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.db import Connection, Pool, connection, transaction
from events_svc.ports import MailErrorKind, Ports, prepare_template
from events_svc.verbs import partners
from events_svc.verbs.mail import failures
from events_svc.verbs.mail.engines import Batch, LineBatch
from events_svc.verbs.mail.send import PassOptions

# Workable rows: live, due, not backing off; `force` (run this row now) ignores the due
# time and the back-off. $2 force, $3 one row only, $4 rows already handled in this pass.
_PICK = """
SELECT m.id, m.event_id, m.attempts, m.error_kind::text AS error_kind, e.organizer_id,
    e.company_id, m.template_ref, m.template_kind::text AS template_kind
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE event.line_is_live(m, e, $1) AND ($2::boolean OR event.line_workable_at(m) <= $1)
  AND ($3::uuid IS NULL OR m.id = $3) AND NOT (m.id = ANY($4::uuid[]))
ORDER BY m.scheduled_date NULLS LAST, m.id
LIMIT 1
"""
# the row picked, claimed if it is still workable and no other instance holds it
_CLAIM = """
SELECT m.id, m.event_id, m.interval_kind::text AS kind, m.interval_unit::text AS unit,
    m.last_registration_id, m.error_kind::text AS error_kind, m.attempts,
    m.interval_nbr, m.template_ref, m.template_kind::text AS template_kind,
    m.notification_channel::text AS channel, m.scheduled_date,
    e.name AS event_name, e.date_begin, e.date_end, e.date_tz, e.location, e.event_url,
    e.is_multi_slots
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE m.id = $3 AND event.line_is_live(m, e, $1)
  AND ($2::boolean OR event.line_workable_at(m) <= $1)
FOR UPDATE OF m SKIP LOCKED  -- one instance works a scheduler row at a time
"""
_NEXT_DUE = """
SELECT min(event.line_workable_at(m))
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE event.line_is_live(m, e, $1)
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
            "schedulers": self.schedulers,
            "sent": self.sent,
            "dropped": self.dropped,
            "failed": self.failed,
            "pruned": self.pruned,
            "recipients_failed": self.recipients_failed,
            "more": self.more,
            "failures": self.failures,
        }

    def count(self, kind: str, n: int = 1) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + n

    def add(self, b: Batch) -> None:
        self.sent += b.sent
        self.dropped += b.dropped
        self.pruned += b.pruned
        self.advanced += b.progressed()
        if b.bad_recipients:
            self.recipients_failed += b.bad_recipients
            self.count(MailErrorKind.RECIPIENT_INVALID, b.bad_recipients)
        if b.failure is not None:
            self.failed += 1
            self.count(b.failure.kind)


class Senders:
    """The author of a line's mails: the organizer's address, then the company's (through
    the partner directory when one is composed), then the default. Asked before the claim,
    once per party and pass, never under a lock; the directory has
    `partners.DIRECTORY_TIMEOUT_S` to answer each question (a `TimeoutError` fails what
    needed it, backed off)."""

    def __init__(self, ports: Ports, default: str) -> None:
        self.ports, self.default = ports, default
        self.known: dict[tuple[UUID | None, UUID | None], str] = {}

    async def of(self, organizer_id: UUID | None, company_id: UUID | None) -> str:
        key = (organizer_id, company_id)
        if key not in self.known:
            self.known[key] = await self._ask(organizer_id, company_id)
        return self.known[key]

    async def _ask(self, organizer_id: UUID | None, company_id: UUID | None) -> str:
        for party in (organizer_id, company_id):
            if party is None:
                continue
            try:
                contact = await partners.ask(self.ports.partner_directory, party)
            except errors.PartnerDirectoryNotComposed:
                return self.default
            if contact is not None and contact.email:
                return contact.email
        return self.default


async def _work(
    conn: Connection,
    ports: Ports,
    options: PassOptions,
    m: dict[str, Any],
    sender: str,
    now: datetime,
    force: bool,
    size: int,
    materialize: dict[UUID, bool],
) -> Batch:
    """One batch of one claimed row, its failure bookkeeping included."""
    work = LineBatch(conn, m, ports, sender, options, now, force)
    if m["kind"] == "after_sub":
        materialize[m["id"]] = await work.attendee_engine(size, materialize.get(m["id"], True))
    elif m["is_multi_slots"]:
        await work.slot_engine(size)
    else:
        await work.event_engine(size)
    b = work.batch
    if b.failure is not None:
        await failures.record_failure(conn, m, b.failure, now)
    elif b.sent or b.dropped or b.done or b.bad_recipients:
        await failures.clear_failure(conn, m)
    if b.bad_recipients:
        fields = {"scheduler_id": str(m["id"]), "recipients": b.bad_recipients}
        failures.log.info(
            "scheduler line: recipients without a usable address", extra={"fields": fields}
        )
    return b


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
    materialize: dict[UUID, bool] = {}  # after_sub rows: create receipts in the next batch
    senders = Senders(ports, options.default_sender)
    while not stopping():
        if budget <= 0:
            summary.more = True
            break
        async with transaction(pool) as conn:
            picked = await conn.fetchrow(_PICK, now, force, mail_id, handled)
        if picked is None:
            break
        try:  # asked before the claim: a host port is never awaited under a row lock
            sender = await senders.of(picked["organizer_id"], picked["company_id"])
            # and the template compiled now, not under the claim (off the loop, cached by
            # revision: once per edit, not once per batch)
            async with connection(pool) as conn:
                await prepare_template(
                    ports.template_renderer, conn, picked["template_ref"], picked["template_kind"]
                )
        except Exception as exc:  # a failing directory (or database) fails this line
            await failures.record_batch_failure(pool, dict(picked), exc, now)
            handled.append(picked["id"])
            summary.failed += 1
            summary.count(MailErrorKind.BATCH_FAILED)
            continue
        m: dict[str, Any] | None = None
        try:
            async with transaction(pool) as conn:
                row = await conn.fetchrow(_CLAIM, now, force, picked["id"])
                if row is not None:
                    m = dict(row)
                    b = await _work(
                        conn,
                        ports,
                        options,
                        m,
                        sender,
                        now,
                        force,
                        min(options.batch, budget),
                        materialize,
                    )
        except Exception as exc:
            if m is None:
                raise  # the claim itself failed: the pass fails, the loop backs off
            # recorded on a fresh connection; if the database is really away, this raises
            # and the pass fails (the loop backs off)
            await failures.record_batch_failure(pool, m, exc, now)
            seen.add(m["id"])
            handled.append(m["id"])
            summary.failed += 1
            summary.count(MailErrorKind.BATCH_FAILED)
            continue
        if m is None:  # another instance holds it, or it changed: not this pass's row
            handled.append(picked["id"])
            continue
        seen.add(m["id"])
        budget -= b.sent + b.bad_recipients
        summary.add(b)
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
