"""The dispatcher's pass: the feed into receipts, then due receipts into messages.

A pass first reads the feed (`feed.take_feed`, bounded batches), then claims due receipts
(`pending`, or `parked` whose back-off is over) from the one leased queue
(`verbs.leases.TRIGGER_RECEIPTS`: oldest first, `FOR UPDATE SKIP LOCKED`, under a token)
in batches of `EVENT_MAIL_BATCH` (any number of instances may run it side by side), until
none is due or `EVENT_MAIL_CRON_LIMIT` receipts were worked (`more` then says work is
left). Each claim's senders are asked of the partner directory outside any transaction;
then **a batch is ONE transaction** over the receipts the token still holds (locked, their
rows read afresh): per receipt, in this order,

- a calendar trigger replaced by a later calendar trigger of the same registration (a
  higher `ics_sequence`) is skipped `superseded`: the attendee gets the latest change;
- an archived event's trigger is skipped `event_archived` (an archived event sends
  nothing, as with scheduler mails); a reminder or follow-up of an event cancelled since
  is skipped `event_cancelled`;
- a registration no longer active, cancelled, or moved to another event is skipped
  `registration_inactive`; one without a usable email is skipped `recipient_invalid`;
- a purpose without a template parks `template_unmapped` (only that purpose's triggers);
- the others are rendered through the `TemplateRenderer` port (each template compiled
  before the claim, `ports.prepare_template`), one call per template for the batch's
  receipts of it (a failure parks those receipts with its kind), built
  into a message (`message`) and queued through the `MailQueue` port (a refusal parks
  that receipt and the rest of its template's); then the queue is flushed and every
  receipt settled (`receipts.settle`), in the same transaction.

So a trigger is worked by one instance at a time, and its message and its settled
receipt commit together: a process killed mid-batch leaves neither, and the receipt is
claimed again when its lease runs out. A batch that raises is rolled back and its
receipts park `batch_failed` (backed off, like every parking), so no failure makes the
pass repeat at once. The sender follows the scheduler mails' rule (organizer, company,
then the default), asked before the batch's transaction: no partner is awaited while a
lock is held. The directory's questions of one batch take at most `SENDERS_BUDGET_S`;
the receipts of parties not asked by then go back to the queue untouched, for the next
batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc.addresses import is_email
from events_svc.db import Connection, Pool, connection
from events_svc.ports import MailErrorKind, MailRefused, Ports, RenderRequest, prepare_template
from events_svc.verbs.dispatch import message
from events_svc.verbs.dispatch.feed import FEED_BATCH, take_feed
from events_svc.verbs.dispatch.receipts import (
    BATCH_FAILED,
    EVENT_ARCHIVED,
    EVENT_CANCELLED,
    PARK_KINDS,
    RECIPIENT_INVALID,
    REGISTRATION_INACTIVE,
    SUPERSEDED,
    TEMPLATE_UNMAPPED,
    Settlement,
    park_failed_batch,
    write_settlements,
)
from events_svc.verbs.leases import TRIGGER_RECEIPTS as QUEUE
from events_svc.verbs.leases import Claim
from events_svc.verbs.mail import (
    PassOptions,
    Senders,  # the scheduler mails' rule
    refusal,
)

FEED_READS = 20  # feed batches per pass (then `more`: the loop comes back at once)
# how long a claim holds its receipts before its batch's transaction locks them: longer
# than the partner directory may take for one batch (SENDERS_BUDGET_S); a dispatcher that
# died gives its receipts back when it runs out
DISPATCH_LEASE = timedelta(seconds=15)
SENDERS_BUDGET_S = 8.0

# the held receipts, with what their message needs (the claim leased them; the batch's
# transaction has locked them)
_READ = """
SELECT d.trigger_id, d.state::text AS receipt_state, d.error_kind, d.attempts,
    d.purpose::text AS purpose, tt.template_id,
    t.event_id, t.registration_id, t.ics_sequence, t.ics_method, t.ctx_date_begin,
    t.ctx_date_end, t.ctx_date_tz, t.ctx_location, t.created_at,
    e.name AS event_name, e.description AS event_description, e.event_url,
    e.active AS event_active, e.kanban_state = 'cancel' AS event_cancelled, e.organizer_id,
    e.company_id,
    r.id, r.name, r.email, r.phone, r.company_name, r.barcode,
    r.state::text AS state, tk.name AS ticket_name,
    -- the slot as the trigger recorded it: its calendar entry (UID, times) is the slot's
    t.event_slot_id, t.ctx_slot_begin AS slot_begin, t.ctx_slot_end AS slot_end,
    event.gets_mail(r.state, r.active) AND r.event_id = t.event_id AS eligible,
    -- a later calendar change of this registration replaces this one
    t.purpose IN ('event_rescheduled', 'event_cancelled') AND EXISTS (
        SELECT 1 FROM event.triggers l
        WHERE l.registration_id = t.registration_id
          AND l.purpose IN ('event_rescheduled', 'event_cancelled')
          AND l.ics_sequence > t.ics_sequence) AS superseded
FROM event.trigger_dispatch_receipts d
JOIN event.triggers t ON t.id = d.trigger_id
JOIN event.events e ON e.id = t.event_id
JOIN event.registrations r ON r.id = t.registration_id
LEFT JOIN event.tickets tk ON tk.id = r.event_ticket_id
LEFT JOIN event.trigger_templates tt ON tt.purpose = d.purpose
WHERE d.trigger_id = ANY($1::uuid[])
ORDER BY d.seq
"""


# the mapped templates (one per purpose at most): compiled before a claim locks anything
_MAPPED_TEMPLATES = "SELECT DISTINCT template_id FROM event.trigger_templates"


@dataclass
class DispatchSummary:
    """What one pass did: triggers read from the feed, receipts sent, skipped and parked
    (`kinds`: skipped and parked receipts by kind), batches that failed whole."""

    taken: int = 0
    sent: int = 0
    skipped: int = 0
    parked: int = 0
    batches: int = 0  # transactions that changed something (feed reads, claimed batches)
    failed_batches: int = 0
    more: bool = False
    kinds: Counter[str] = field(default_factory=Counter)

    def add(self, s: Settlement) -> None:
        self.sent += len(s.sent)
        self.skipped += len(s.skipped)
        self.parked += len(s.parked)
        self.batches += 1
        self.kinds.update(s.counts())

    @property
    def failures(self) -> dict[str, int]:
        """The kinds worth an alert: parkings, and attendees without a usable address."""
        return {k: n for k, n in self.kinds.items() if k in PARK_KINDS or k == RECIPIENT_INVALID}

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "kinds": dict(self.kinds)}


Party = tuple[UUID | None, UUID | None]  # (organizer, company): who a message is from


async def _senders_of(
    senders: Senders, rows: list[dict[str, Any]]
) -> tuple[dict[Party, str | Exception], set[Party]]:
    """Each claimed receipt's sender, asked of the partner directory before the batch's
    transaction (never under a lock), within SENDERS_BUDGET_S for the batch: a party whose
    lookup failed (or did not answer in the budget left) maps to its error; the parties
    not asked before the budget ran out are returned apart (their receipts go back to the
    queue untouched, for the next batch). A sender this pass already knows costs nothing."""
    found: dict[Party, str | Exception] = {}
    later: set[Party] = set()
    deadline = time.monotonic() + SENDERS_BUDGET_S
    for row in rows:
        party = (row["organizer_id"], row["company_id"])
        if party in found or party in later:
            continue
        if party in senders.known:
            found[party] = senders.known[party]
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            later.add(party)
            continue
        try:
            found[party] = await asyncio.wait_for(senders.of(*party), timeout=left)
        except Exception as exc:  # its receipts park, backed off
            found[party] = exc
    return found, later


async def _send_template(
    conn: Connection,
    ports: Ports,
    options: PassOptions,
    sent_by: dict[Party, str | Exception],
    template_id: UUID,
    rows: list[dict[str, Any]],
    s: Settlement,
    now: datetime,
) -> None:
    """Render the receipts of one template in one call, and queue their messages."""
    ready: list[tuple[dict[str, Any], str]] = []
    for row in rows:
        sender = sent_by.get((row["organizer_id"], row["company_id"]))
        if isinstance(sender, str):
            ready.append((row, sender))
        else:  # the directory failed (or the event's party moved since the claim)
            s.park(row, BATCH_FAILED, type(sender).__name__ if sender else "sender_unknown")
    if not ready:
        return
    contexts = [message.context(row, options.links, now) for row, _ in ready]
    try:  # whatever a template does, it parks its own receipts, never the batch
        request = RenderRequest(template_id, "mail", contexts)
        rendered = await ports.template_renderer.render(conn, request)
        if len(rendered) != len(ready):
            raise MailRefused(MailErrorKind.RENDER_FAILED, "the renderer answered a partial batch")
    except Exception as exc:
        failure = refusal(exc, MailErrorKind.RENDER_FAILED)
        for row, _ in ready:
            s.park(row, failure.kind, failure.detail)
        return
    # the calendars cost CPU (a VTIMEZONE each): built in one worker-thread hop per batch
    pairs = [(row, sender, text) for (row, sender), text in zip(ready, rendered, strict=True)]
    built = await asyncio.to_thread(message.messages, pairs)
    for i, ((row, _), mail) in enumerate(zip(ready, built, strict=True)):
        if isinstance(mail, Exception):  # the calendar could not be built: this receipt only
            s.park(row, MailErrorKind.RENDER_FAILED, type(mail).__name__)
            continue
        try:
            await ports.mail_queue.enqueue(conn, mail)
        except Exception as exc:  # the queue refuses: this and the rest wait
            failure = refusal(exc, MailErrorKind.ENQUEUE_REFUSED)
            for later, _ in ready[i:]:
                s.park(later, failure.kind, failure.detail)
            return
        s.sent.append(row)


async def _work(
    conn: Connection,
    ports: Ports,
    options: PassOptions,
    sent_by: dict[Party, str | Exception],
    rows: list[dict[str, Any]],
    now: datetime,
) -> Settlement:
    """One batch of held receipts: decide, render, queue, flush, settle."""
    s = Settlement()
    by_template: dict[UUID, list[dict[str, Any]]] = {}
    for row in rows:
        if row["superseded"]:
            s.skip(row, SUPERSEDED)
        elif not row["event_active"]:
            s.skip(row, EVENT_ARCHIVED)
        elif row["event_cancelled"] and row["purpose"] not in message.CALENDAR_PURPOSES:
            s.skip(row, EVENT_CANCELLED)
        elif not row["eligible"]:
            s.skip(row, REGISTRATION_INACTIVE)
        elif not is_email(row["email"] or ""):
            s.skip(row, RECIPIENT_INVALID)
        elif row["template_id"] is None:
            s.park(row, TEMPLATE_UNMAPPED, f"no template for {row['purpose']}")
        else:
            by_template.setdefault(row["template_id"], []).append(row)
    for template_id, group in by_template.items():
        await _send_template(conn, ports, options, sent_by, template_id, group, s, now)
    if s.sent:  # before the receipts, in the same transaction
        await ports.mail_queue.flush(conn)
    await write_settlements(conn, s, now)
    return s


async def dispatch_batch(
    pool: Pool, ports: Ports, options: PassOptions, senders: Senders, now: datetime, size: int
) -> Settlement | None:
    """Claim up to `size` due receipts, ask their senders (giving back the receipts of
    the parties not asked in the budget), then work the ones still held in one
    transaction; what was decided, or None when no receipt is due and free. A batch that
    raises is rolled back and its receipts parked."""
    claim: Claim = await QUEUE.claim(pool, now, size, DISPATCH_LEASE)
    if not claim.rows:
        return None
    sent_by, later = await _senders_of(senders, claim.rows)
    held = claim.held("trigger_id")
    if later:  # not asked in the batch's budget: back as they were, due now
        back = [
            (r["trigger_id"], claim.lease.token)
            for r in claim.rows
            if (r["organizer_id"], r["company_id"]) in later
        ]
        await QUEUE.give_back(pool, back, now)
        returned = {k for k, _ in back}
        held = [(k, t) for k, t in held if k not in returned]
    rows: list[dict[str, Any]] = []
    try:
        async with QUEUE.holding(pool, held) as (conn, kept):
            rows = [dict(r) for r in await conn.fetch(_READ, sorted(kept))]
            try:
                return await _work(conn, ports, options, sent_by, rows, now)
            except BaseException:
                # drop what the queue holds for this transaction: it is rolling back
                with contextlib.suppress(Exception):
                    await ports.mail_queue.flush(conn)
                raise
    except Exception as exc:
        if not rows:
            raise  # the hold itself failed: the pass fails, the leases give them back
        return await park_failed_batch(pool, claim, rows, exc, now)


async def run_dispatch_pass(
    pool: Pool,
    ports: Ports,
    options: PassOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
) -> DispatchSummary:
    """Read the feed, then work due receipts until none is left or `options.cap` were
    worked. `stopping` is asked before each batch: a shutdown finishes the batch in hand.
    The mapped templates are compiled first (`ports.prepare_template`), so none is compiled
    under the receipt locks."""
    summary = DispatchSummary()
    reads = 0
    while not stopping():
        if reads >= FEED_READS:
            summary.more = True
            break
        taken = await take_feed(pool, now)
        if taken is None:  # another instance is reading the feed
            break
        reads += 1
        summary.taken += taken
        summary.batches += taken > 0
        if taken < FEED_BATCH:
            break
    senders = Senders(ports, options.default_sender)
    async with connection(pool) as conn:  # compiled once a pass, before any receipt lock
        for row in await conn.fetch(_MAPPED_TEMPLATES):
            await prepare_template(ports.template_renderer, conn, row["template_id"], "mail")
    budget = options.cap
    while not stopping():
        if budget <= 0:
            summary.more = True
            break
        done = await dispatch_batch(pool, ports, options, senders, now, min(options.batch, budget))
        if done is None:
            break
        summary.add(done)
        summary.failed_batches += done.failed
        budget -= len(done.sent) + len(done.skipped) + len(done.parked)
    return summary
