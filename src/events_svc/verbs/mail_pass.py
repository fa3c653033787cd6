"""The scheduler pass: claims due scheduler rows and queues their mails, exactly once.

A pass loops over batches. Each batch is one transaction that claims ONE due
scheduler row (`FOR UPDATE SKIP LOCKED`, so any number of instances can run
passes side by side), does up to `batch` sends for it, writes the receipts
(`UNIQUE (scheduler_id, registration_id)`) and the queued messages in the same
transaction, updates the row's completion and due time, and commits. The pass
stops at `cap` sends; `more` then says work is left (the loop runs again at once).

Engines: `after_sub` (per-attendee receipts, due at date_open + offset), the
event-based walk (before/after the event's start or end), and the slot engine
(the same walk per slot child on multi-slot events). Eligibility everywhere:
`state IN ('open','done') AND active`. A before-event mail whose window closed
(event or slot over) is dropped with receipts marked `dropped_window_closed`.
Failures are typed, recorded on the row, logged once, and never stop the pass.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc.actors import SYSTEM
from events_svc.capabilities import ICS, MY_TICKETS, CapabilityCodec
from events_svc.db import Connection, Pool, must, transaction
from events_svc.ports import (
    MailRefused,
    OutgoingMessage,
    PartnerDirectoryNotComposed,
    Ports,
    RenderRequest,
)
from events_svc.verbs.audit import write_audit
from events_svc.verbs.schedules import materialize_slot_children

log = logging.getLogger("events_svc.scheduler")
PUBLIC_PATH = "/api/v1/event"  # where the public routes live under the public base URL

_ELIGIBLE = "r.state IN ('open', 'done') AND r.active"
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_MATERIALIZE_CHUNK = 10_000
_REGISTRATION_FIELDS = ("name", "email", "phone", "company_name", "barcode", "state")
_SCHEDULER_FAILURES = {"template_unresolved", "template_renderer_not_composed", "render_failed",
                       "enqueue_refused"}  # fmt: skip

# Due rows on live events: active, not cancelled; after_sub dies with the event's end.
_CLAIM = """
SELECT m.id, m.event_id, m.interval_kind::text AS kind, m.interval_unit::text AS unit,
    m.last_registration_id, m.error_kind::text AS error_kind,
    m.interval_nbr, m.template_ref, m.template_kind::text AS template_kind,
    m.notification_channel::text AS channel, m.scheduled_date,
    e.name AS event_name, e.date_begin, e.date_end, e.date_tz, e.location, e.event_url,
    e.is_multi_slots, e.organizer_id, e.company_id
FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
  AND ($2::boolean OR m.scheduled_date <= $1)
  AND (m.interval_kind <> 'after_sub' OR e.date_end > $1)
  AND ($3::uuid IS NULL OR m.id = $3)
  AND NOT (m.id = ANY($4::uuid[]))
ORDER BY m.scheduled_date NULLS LAST, m.id
LIMIT 1
FOR UPDATE OF m SKIP LOCKED  -- one instance works a scheduler row at a time
"""
_RECIPIENT_COLS = """
    r.id, r.event_slot_id, r.name, r.email, r.phone, r.company_name, r.barcode,
    r.state::text AS state, t.name AS ticket_name,
    s.date_begin AS slot_begin, s.date_end AS slot_end
"""
# after_sub: receipts created lazily (chunked) for eligible attendees without one
_MATERIALIZE = f"""
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date)
SELECT $1, r.id, coalesce(r.date_open, r.created_at) + event.mail_offset($3, $4)
FROM event.registrations r
WHERE r.event_id = $2 AND {_ELIGIBLE}
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id)
ORDER BY r.id LIMIT $5
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
"""  # noqa: S608 - constant text only
# receipts of attendees who left eligibility before their mail went out
_PRUNE = f"""
DELETE FROM event.mail_registrations mr USING event.registrations r
WHERE mr.scheduler_id = $1 AND r.id = mr.registration_id AND NOT mr.mail_sent
  AND mr.outcome = 'pending' AND NOT ({_ELIGIBLE})
"""  # noqa: S608 - constant text only
_DUE_RECEIPTS = f"""
SELECT mr.id AS receipt_id, {_RECIPIENT_COLS}
FROM event.mail_registrations mr
JOIN event.registrations r ON r.id = mr.registration_id
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE mr.scheduler_id = $1 AND NOT mr.mail_sent AND mr.outcome = 'pending'
  AND ($2::boolean OR mr.scheduled_date <= $3) AND {_ELIGIBLE}
  AND NOT (r.id = ANY($4::uuid[]))
ORDER BY mr.scheduled_date, mr.id LIMIT $5
"""  # noqa: S608 - constant text only
_MARK_SENT = """
UPDATE event.mail_registrations SET mail_sent = true, outcome = 'sent', sent_at = $2
WHERE id = ANY($1::uuid[])
"""
_AFTER_SUB_NEXT = f"""
SELECT min(mr.scheduled_date) FROM event.mail_registrations mr
JOIN event.registrations r ON r.id = mr.registration_id
WHERE mr.scheduler_id = $1 AND NOT mr.mail_sent AND mr.outcome = 'pending' AND {_ELIGIBLE}
"""  # noqa: S608 - constant text only
_LACKING = f"""
SELECT EXISTS (SELECT 1 FROM event.registrations r
    WHERE r.event_id = $2 AND {_ELIGIBLE} AND ($3::uuid IS NULL OR r.event_slot_id = $3)
      AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                      WHERE x.scheduler_id = $1 AND x.registration_id = r.id))
"""  # noqa: S608 - constant text only
# event-based and slot engines: eligible attendees (of the slot) with no receipt yet, walked
# in id order from the cursor (registrations_event_list_idx), so a batch costs its own rows
_UNSENT = f"""
SELECT {_RECIPIENT_COLS}
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.event_id = $2 AND {_ELIGIBLE} AND ($3::uuid IS NULL OR r.event_slot_id = $3)
  AND r.id > $6  -- the cursor: an index range, not a rescan of what was sent
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id
                    AND x.registration_id > $6)  -- lets the receipt scan start at the cursor
  AND NOT (r.id = ANY($4::uuid[]))
ORDER BY r.id LIMIT $5
"""  # noqa: S608 - constant text only
_NO_CURSOR = UUID(int=0)
_RECEIPTS_SENT = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, mail_sent,
    outcome, sent_at)
SELECT $1, unnest($2::uuid[]), $3, true, 'sent', $4
"""
_DROP = f"""
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, outcome)
SELECT $1, r.id, $4, 'dropped_window_closed'
FROM event.registrations r
WHERE r.event_id = $2 AND {_ELIGIBLE} AND ($3::uuid IS NULL OR r.event_slot_id = $3)
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id)
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
"""  # noqa: S608 - constant text only
_CHILD_CURSOR = "UPDATE event.mail_slots SET last_registration_id = $2 WHERE id = $1"
_DUE_CHILD = """
SELECT c.id, c.slot_id, c.scheduled_date, c.last_registration_id, s.date_begin, s.date_end
FROM event.mail_slots c JOIN event.slots s ON s.id = c.slot_id
WHERE c.scheduler_id = $1 AND NOT c.mail_done AND ($2::boolean OR c.scheduled_date <= $3)
ORDER BY c.scheduled_date, c.id LIMIT 1
FOR UPDATE OF c
"""
_CHILD_DONE = """
UPDATE event.mail_slots SET mail_done = $2, last_registration_id = coalesce($3,
    last_registration_id) WHERE id = $1
"""
_CHILDREN_NEXT = """
SELECT min(scheduled_date) FILTER (WHERE NOT mail_done), count(*) FILTER (WHERE NOT mail_done)
FROM event.mail_slots WHERE scheduler_id = $1
"""
_SET_STATE = """
UPDATE event.mails SET mail_done = $2, scheduled_date = coalesce($3, scheduled_date),
    last_registration_id = CASE WHEN $5 THEN $6::uuid ELSE last_registration_id END,
    updated_at = $4
WHERE id = $1
"""
_SET_ERROR = """
UPDATE event.mails SET error_kind = $2::event.mail_error_kind, error_datetime = $3 WHERE id = $1
"""
_CLEAR_ERROR = """
UPDATE event.mails SET error_kind = NULL, error_datetime = NULL
WHERE id = $1 AND error_kind IS NOT NULL
"""


@dataclass
class RunSummary:
    """What one pass did."""

    schedulers: int = 0
    sent: int = 0
    dropped: int = 0
    failed: int = 0
    pruned: int = 0
    more: bool = False
    failures: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedulers": self.schedulers, "sent": self.sent, "dropped": self.dropped,
            "failed": self.failed, "pruned": self.pruned, "more": self.more,
            "failures": self.failures,
        }  # fmt: skip


@dataclass
class _Batch:
    sent: int = 0
    dropped: int = 0
    pruned: int = 0
    failure: str | None = None  # a scheduler-level failure: stop this row for the pass
    bad_recipients: list[UUID] = field(default_factory=list)
    finished: bool = False  # nothing more to do for this row in this pass
    done: bool = False  # the row completed


@dataclass(frozen=True)
class PassOptions:
    batch: int
    cap: int
    default_sender: str
    # links in the template context: both a codec with a secret and a public base URL
    codec: CapabilityCodec | None = None
    public_base_url: str = ""
    ics_ttl_s: int = 30 * 86400


class _Work:
    """One claimed scheduler row inside its batch transaction."""

    def __init__(self, conn: Connection, m: dict[str, Any], ports: Ports, sender: str,
                 now: datetime, force: bool, excluded: list[UUID],
                 options: PassOptions) -> None:  # fmt: skip
        self.conn, self.m, self.ports, self.sender = conn, m, ports, sender
        self.options = options
        self.now, self.force, self.excluded = now, force, excluded
        self.batch = _Batch()

    def _context(self, r: dict[str, Any]) -> dict[str, Any]:
        m = self.m
        tz = ZoneInfo(m["date_tz"])
        slot = None
        if r["slot_begin"] is not None:
            slot = {"date_begin": r["slot_begin"].astimezone(tz),
                    "date_end": r["slot_end"].astimezone(tz)}  # fmt: skip
        return {
            "registration": {k: r[k] for k in _REGISTRATION_FIELDS},
            "event": {
                "name": m["event_name"],
                "date_begin": m["date_begin"].astimezone(tz),
                "date_end": m["date_end"].astimezone(tz),
                "date_tz": m["date_tz"],
                "location": m["location"],
                "event_url": m["event_url"],
            },
            "ticket": {"name": r["ticket_name"]} if r["ticket_name"] is not None else None,
            "slot": slot,
            "links": self._links(r),
        }

    def _links(self, r: dict[str, Any]) -> dict[str, str | None]:
        """The attendee's calendar and tickets links, when the deployment can mint them."""
        codec, base = self.options.codec, self.options.public_base_url
        if codec is None or not codec.configured or not base:
            return {"ics": None, "my_tickets": None}
        event_id = str(self.m["event_id"])
        slot = str(r["event_slot_id"]) if r.get("event_slot_id") else None
        expires = self.now + timedelta(seconds=self.options.ics_ttl_s)
        ics = codec.mint(ICS, {"e": event_id, "s": slot}, expires)
        tickets = codec.mint(MY_TICKETS, {"e": event_id, "r": [str(r["id"])]}, None)
        return {"ics": f"{base}{PUBLIC_PATH}/public/ics/{ics}",
                "my_tickets": f"{base}{PUBLIC_PATH}/public/my-tickets/{tickets}"}  # fmt: skip

    def _recipient(self, r: dict[str, Any]) -> str | None:
        if self.m["channel"] == "mail":
            return str(r["email"]) if _EMAIL.match(r["email"] or "") else None
        digits = sum(c.isdigit() for c in r["phone"] or "")
        return str(r["phone"]) if digits >= 6 else None

    async def send(self, recipients: list[dict[str, Any]]) -> list[UUID]:
        """Render and queue each; answers the ids queued (failures recorded on the batch)."""
        try:
            queued = await self._queue_each(recipients)
        except BaseException:
            # drop what the queue holds for this transaction: it is rolling back
            with contextlib.suppress(Exception):
                await self.ports.mail_queue.flush(self.conn)
            raise
        if queued:
            await self.ports.mail_queue.flush(self.conn)  # before the receipts, same transaction
        self.batch.sent += len(queued)
        return queued

    async def _queue_each(self, recipients: list[dict[str, Any]]) -> list[UUID]:
        queued: list[UUID] = []
        m = self.m
        for r in recipients:
            to = self._recipient(r)
            if to is None:
                self.batch.bad_recipients.append(r["id"])
                continue
            try:
                rendered = await self.ports.template_renderer.render(
                    self.conn,
                    RenderRequest(m["template_ref"], m["template_kind"], self._context(r)),
                )
                await self.ports.mail_queue.enqueue(self.conn, OutgoingMessage(
                    channel=m["channel"], recipient=to, sender=self.sender,
                    subject=rendered.subject, body=rendered.body, event_id=m["event_id"],
                    registration_id=r["id"], scheduler_id=m["id"],
                ))  # fmt: skip
            except MailRefused as refused:
                kind = refused.kind if refused.kind in _SCHEDULER_FAILURES else "enqueue_refused"
                self.batch.failure = kind
                break
            queued.append(r["id"])
        return queued

    async def attendee_engine(self, size: int, materialize: bool) -> bool:
        """One batch of after_sub sends; answers whether receipts may still be missing."""
        m, conn = self.m, self.conn
        more_to_materialize = False
        if materialize:  # once per pass and scheduler (set-based, chunked)
            self.batch.pruned = int((await conn.execute(_PRUNE, m["id"])).split()[-1])
            if self.batch.pruned:
                pruned = {"receipts": self.batch.pruned}
                await write_audit(conn, SYSTEM, "mail_receipts_pruned", "mail", m["id"],
                                  event_id=m["event_id"], summary=pruned)  # fmt: skip
            made = await conn.execute(_MATERIALIZE, m["id"], m["event_id"], m["unit"],
                                      m["interval_nbr"], _MATERIALIZE_CHUNK)  # fmt: skip
            more_to_materialize = int(made.split()[-1]) == _MATERIALIZE_CHUNK
        due = [dict(r) for r in await conn.fetch(
            _DUE_RECEIPTS, m["id"], self.force, self.now, self.excluded, size)]  # fmt: skip
        receipts = {r["id"]: r["receipt_id"] for r in due}
        queued = await self.send(due)
        if queued:
            await conn.execute(_MARK_SENT, [receipts[i] for i in queued], self.now)
        nxt = await conn.fetchval(_AFTER_SUB_NEXT, m["id"])
        lacking = more_to_materialize or (
            nxt is None and await conn.fetchval(_LACKING, m["id"], m["event_id"], None)
        )
        done = self.batch.done = nxt is None and not lacking
        await conn.execute(_SET_STATE, m["id"], done, self.now if lacking else nxt, self.now,
                           False, None)  # fmt: skip
        self.batch.finished = not lacking and (
            done or len(due) < size or (nxt is not None and nxt > self.now)
        )
        return bool(more_to_materialize)

    async def walk(self, size: int, slot_id: UUID | None, window_end: datetime,
                   cursor: UUID | None) -> tuple[bool, UUID | None]:  # fmt: skip
        """Send the next batch of one event (or slot) walk: (complete, the new cursor).

        The walk goes forward from the cursor; at the end it wraps once to the start, so
        attendees who registered behind the cursor (late registrants) are reached too.
        """
        m, conn = self.m, self.conn
        if m["kind"] == "before_event" and window_end <= self.now:
            dropped = await conn.execute(_DROP, m["id"], m["event_id"], slot_id, self.now)
            self.batch.dropped += int(dropped.split()[-1])
            return True, cursor
        args = (m["id"], m["event_id"], slot_id)
        start = cursor or _NO_CURSOR
        rows = [dict(r) for r in await conn.fetch(_UNSENT, *args, self.excluded, size, start)]
        new_cursor = rows[-1]["id"] if rows else cursor
        if len(rows) < size and cursor is not None:  # the end: wrap to the start once
            skip = [*self.excluded, *(r["id"] for r in rows)]
            rows += [dict(r) for r in await conn.fetch(_UNSENT, *args, skip, size - len(rows),
                                                       _NO_CURSOR)]  # fmt: skip
            new_cursor = None
        queued = await self.send(rows)
        if queued:
            await conn.execute(_RECEIPTS_SENT, m["id"], queued, m["scheduled_date"], self.now)
        complete = len(rows) < size and not self.batch.bad_recipients and not self.excluded
        return complete and self.batch.failure is None, new_cursor

    async def event_engine(self, size: int) -> None:
        m = self.m
        done, cursor = await self.walk(size, None, m["date_end"], m["last_registration_id"])
        self.batch.done = done
        await self.conn.execute(_SET_STATE, m["id"], done, None, self.now, True, cursor)
        self.batch.finished = True if done else self.batch.sent == 0

    async def slot_engine(self, size: int) -> None:
        m, conn = self.m, self.conn
        await materialize_slot_children(conn, m["event_id"])
        child = await conn.fetchrow(_DUE_CHILD, m["id"], self.force, self.now)
        if child is not None:
            done, cursor = await self.walk(size, child["slot_id"], child["date_end"],
                                           child["last_registration_id"])  # fmt: skip
            await conn.execute(_CHILD_DONE, child["id"], done, None)
            await conn.execute(_CHILD_CURSOR, child["id"], cursor)
        nxt, open_children = must(await conn.fetchrow(_CHILDREN_NEXT, m["id"])).values()
        self.batch.done = open_children == 0
        await conn.execute(_SET_STATE, m["id"], self.batch.done, nxt, self.now, False, None)
        self.batch.finished = child is None or (self.batch.sent == 0 and not self.batch.dropped)


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
    """One pass over due schedulers (or the one named, `force` ignoring its due time).

    `stopping` is asked before each batch: a shutdown finishes the batch in hand.
    """
    summary = RunSummary()
    handled: list[UUID] = []
    excluded: dict[UUID, list[UUID]] = {}
    budget = options.cap
    seen: set[UUID] = set()
    materialize: dict[UUID, bool] = {}  # after_sub rows still to materialise in this pass
    while not stopping():
        if budget <= 0:
            summary.more = True
            break
        async with transaction(pool) as conn:
            row = await conn.fetchrow(_CLAIM, now, force, mail_id, handled)
            if row is None:
                break
            m = dict(row)
            sender = await _sender(ports, m, options.default_sender)
            work = _Work(conn, m, ports, sender, now, force, excluded.setdefault(m["id"], []),
                         options)  # fmt: skip
            size = min(options.batch, budget)
            if m["kind"] == "after_sub":
                materialize[m["id"]] = await work.attendee_engine(
                    size, materialize.get(m["id"], True)
                )
            elif m["is_multi_slots"]:
                await work.slot_engine(size)
            else:
                await work.event_engine(size)
            b = work.batch
            failure = b.failure or ("recipient_invalid" if b.bad_recipients else None)
            if failure:
                await conn.execute(_SET_ERROR, m["id"], failure, now)
            elif m["error_kind"] and not excluded[m["id"]] and (b.sent or b.dropped or b.done):
                await conn.execute(_CLEAR_ERROR, m["id"])  # the next success clears it
        seen.add(m["id"])
        excluded[m["id"]].extend(b.bad_recipients)
        budget -= b.sent
        summary.sent += b.sent
        summary.dropped += b.dropped
        summary.pruned += b.pruned
        if failure:
            summary.failed += 1
            summary.failures[failure] = summary.failures.get(failure, 0) + 1
            log.warning("scheduler %s: %s", m["id"], failure)
        if b.finished or b.failure:
            handled.append(m["id"])
    summary.schedulers = len(seen)
    return summary


_NEXT_DUE = """
SELECT min(m.scheduled_date) FROM event.mails m JOIN event.events e ON e.id = m.event_id
WHERE NOT m.mail_done AND e.active AND e.kanban_state <> 'cancel'
  AND (m.interval_kind <> 'after_sub' OR e.date_end > $1)
"""


async def next_due(pool: Pool, now: datetime) -> datetime | None:
    """The earliest due time of any live scheduler (the loop sleeps until then)."""
    async with transaction(pool) as conn:
        value: datetime | None = await conn.fetchval(_NEXT_DUE, now)
        return value
