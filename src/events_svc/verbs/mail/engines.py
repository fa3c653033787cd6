"""The three scheduler engines: what one batch of one claimed scheduler row does.

`after_sub` keeps per-attendee receipts, due at `date_open` + offset; the event
walk sends a before/after-the-event mail to each attendee without a receipt, in
id order from a cursor; the slot engine is the same walk per slot child on
multi-slot events. Who gets mail is `event.gets_mail(state, active)`, the one
definition. A before-event mail whose window closed is dropped with receipts
marked `dropped_window_closed`; an attendee without a usable address gets a
failed receipt (`recipient_invalid`), retried only when their details change.
Everything here runs inside the batch's transaction, holding the scheduler row
(then its slot child): the pass's end of the service's lock order.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.actors import SYSTEM
from events_svc.db import Connection, affected, must
from events_svc.ports import MailErrorKind, Ports
from events_svc.verbs.audit import write_audit
from events_svc.verbs.mail.failures import LineFailure
from events_svc.verbs.mail.schedules import materialize_slot_children
from events_svc.verbs.mail.send import PassOptions, send_batch

_MATERIALIZE_CHUNK = 10_000
_NO_CURSOR = UUID(int=0)

# after_sub: receipts created lazily (chunked) for attendees without one
_MATERIALIZE = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date)
SELECT $1, r.id, coalesce(r.date_open, r.created_at) + event.mail_offset($3, $4)
FROM event.registrations r
WHERE r.event_id = $2 AND event.gets_mail(r.state, r.active)
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id)
ORDER BY r.id LIMIT $5
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
"""
# receipts of attendees who left eligibility before their mail went out
_PRUNE = """
DELETE FROM event.mail_registrations mr USING event.registrations r
WHERE mr.scheduler_id = $1 AND r.id = mr.registration_id AND NOT mr.mail_sent
  AND mr.outcome = 'pending' AND NOT event.gets_mail(r.state, r.active)
"""
_DUE_RECEIPTS = """
SELECT mr.id AS receipt_id, r.id, r.event_slot_id, r.name, r.email, r.phone, r.company_name,
    r.barcode, r.state::text AS state, t.name AS ticket_name,
    s.date_begin AS slot_begin, s.date_end AS slot_end
FROM event.mail_registrations mr
JOIN event.registrations r ON r.id = mr.registration_id
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE mr.scheduler_id = $1 AND NOT mr.mail_sent AND mr.outcome = 'pending'
  AND ($2::boolean OR mr.scheduled_date <= $3) AND event.gets_mail(r.state, r.active)
ORDER BY mr.scheduled_date, mr.id LIMIT $4
"""
_MARK_SENT = """
UPDATE event.mail_registrations SET mail_sent = true, outcome = 'sent', sent_at = $2
WHERE id = ANY($1::uuid[])
"""
_MARK_FAILED = """
UPDATE event.mail_registrations SET outcome = 'failed', error_kind = $3::event.mail_error_kind,
    failed_at = $2
WHERE id = ANY($1::uuid[])
"""
_AFTER_SUB_NEXT = """
SELECT min(mr.scheduled_date) FROM event.mail_registrations mr
JOIN event.registrations r ON r.id = mr.registration_id
WHERE mr.scheduler_id = $1 AND NOT mr.mail_sent AND mr.outcome = 'pending'
  AND event.gets_mail(r.state, r.active)
"""
_LACKING = """
SELECT EXISTS (SELECT 1 FROM event.registrations r
    WHERE r.event_id = $2 AND event.gets_mail(r.state, r.active)
      AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                      WHERE x.scheduler_id = $1 AND x.registration_id = r.id))
"""
# event-based and slot engines: attendees (of the slot) with no receipt yet, walked in id
# order from the cursor (registrations_event_list_idx), so a batch costs its own rows
_UNSENT = """
SELECT r.id, r.event_slot_id, r.name, r.email, r.phone, r.company_name, r.barcode,
    r.state::text AS state, t.name AS ticket_name,
    s.date_begin AS slot_begin, s.date_end AS slot_end
FROM event.registrations r
LEFT JOIN event.tickets t ON t.id = r.event_ticket_id
LEFT JOIN event.slots s ON s.id = r.event_slot_id
WHERE r.event_id = $2 AND event.gets_mail(r.state, r.active)
  AND ($3::uuid IS NULL OR r.event_slot_id = $3)
  AND r.id > $5  -- the cursor: an index range, not a rescan of what was sent
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id
                    AND x.registration_id > $5)  -- lets the receipt scan start at the cursor
  AND NOT (r.id = ANY($6::uuid[]))
ORDER BY r.id LIMIT $4
"""
_RECEIPTS_SENT = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, mail_sent,
    outcome, sent_at)
SELECT $1, unnest($2::uuid[]), $3, true, 'sent', $4
"""
_RECEIPTS_FAILED = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, outcome,
    error_kind, failed_at)
SELECT $1, unnest($2::uuid[]), $3, 'failed', $5::event.mail_error_kind, $4
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
"""
_DROP = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, outcome)
SELECT $1, r.id, $4, 'dropped_window_closed'
FROM event.registrations r
WHERE r.event_id = $2 AND event.gets_mail(r.state, r.active)
  AND ($3::uuid IS NULL OR r.event_slot_id = $3)
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id)
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
"""
_CHILD_CURSOR = "UPDATE event.mail_slots SET last_registration_id = $2 WHERE id = $1"
_DUE_CHILD = """
SELECT c.id, c.slot_id, c.scheduled_date, c.last_registration_id, s.date_begin, s.date_end
FROM event.mail_slots c JOIN event.slots s ON s.id = c.slot_id
WHERE c.scheduler_id = $1 AND NOT c.mail_done AND ($2::boolean OR c.scheduled_date <= $3)
ORDER BY c.scheduled_date, c.id LIMIT 1
FOR NO KEY UPDATE OF c  -- after its scheduler row: the lock order
"""
_CHILD_DONE = "UPDATE event.mail_slots SET mail_done = $2 WHERE id = $1"
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


@dataclass
class Batch:
    """What one batch did for its scheduler row."""

    sent: int = 0
    dropped: int = 0
    pruned: int = 0
    materialized: int = 0  # after_sub receipts created
    children_done: int = 0  # slot children completed
    failure: LineFailure | None = None  # stops this row for the pass; backed off
    bad_recipients: int = 0  # failed receipts written (no usable address)
    finished: bool = False  # nothing more to do for this row in this pass
    done: bool = False  # the row completed

    def progressed(self) -> bool:
        """Whether the batch changed anything: a batch that did not ends its row's turn
        in the pass, whatever its engine says (no pass ever claims a row in a loop)."""
        return bool(
            self.sent
            or self.dropped
            or self.pruned
            or self.materialized
            or self.children_done
            or self.bad_recipients
            or self.done
        )


class LineBatch:
    """One batch of one claimed scheduler row, inside its transaction."""

    def __init__(
        self,
        conn: Connection,
        m: dict[str, Any],
        ports: Ports,
        sender: str,
        options: PassOptions,
        now: datetime,
        force: bool,
    ) -> None:
        self.conn, self.m, self.ports, self.sender = conn, m, ports, sender
        self.options, self.now, self.force = options, now, force
        self.batch = Batch()

    async def _send(self, recipients: list[dict[str, Any]]) -> tuple[list[UUID], list[UUID]]:
        sent = await send_batch(
            self.conn, self.ports, self.m, self.sender, self.options, recipients, self.now
        )
        self.batch.failure = self.batch.failure or sent.failure
        self.batch.sent += len(sent.queued)
        self.batch.bad_recipients += len(sent.unaddressed)
        return sent.queued, sent.unaddressed

    async def attendee_engine(self, size: int, materialize: bool) -> bool:
        """One batch of after_sub sends (receipts created first when `materialize`);
        answers whether receipts are still missing, so the next batch creates them."""
        m, conn, b = self.m, self.conn, self.batch
        more_to_materialize = False
        if materialize:  # once per pass and scheduler, unless newcomers appear (set-based)
            b.pruned = affected(await conn.execute(_PRUNE, m["id"]))
            if b.pruned:
                await write_audit(
                    conn,
                    SYSTEM,
                    "mail_receipts_pruned",
                    "mail",
                    m["id"],
                    event_id=m["event_id"],
                    summary={"receipts": b.pruned},
                )
            made = await conn.execute(
                _MATERIALIZE,
                m["id"],
                m["event_id"],
                m["unit"],
                m["interval_nbr"],
                _MATERIALIZE_CHUNK,
            )
            b.materialized = affected(made)
            more_to_materialize = b.materialized == _MATERIALIZE_CHUNK
        due = [
            dict(r) for r in await conn.fetch(_DUE_RECEIPTS, m["id"], self.force, self.now, size)
        ]
        receipts = {r["id"]: r["receipt_id"] for r in due}
        queued, bad = await self._send(due)
        if queued:
            await conn.execute(_MARK_SENT, [receipts[i] for i in queued], self.now)
        if bad:
            await conn.execute(
                _MARK_FAILED, [receipts[i] for i in bad], self.now, MailErrorKind.RECIPIENT_INVALID
            )
        nxt = await conn.fetchval(_AFTER_SUB_NEXT, m["id"])
        lacking = more_to_materialize or (
            nxt is None and await conn.fetchval(_LACKING, m["id"], m["event_id"])
        )
        done = b.done = nxt is None and not lacking
        due_at = self.now if lacking else nxt
        await conn.execute(_SET_STATE, m["id"], done, due_at, self.now, False, None)
        b.finished = not lacking and (
            done or len(due) < size or (nxt is not None and nxt > self.now)
        )
        return bool(lacking)  # attendees without a receipt (a full chunk, or newcomers)

    async def walk(
        self, size: int, slot_id: UUID | None, window_end: datetime, cursor: UUID | None
    ) -> tuple[bool, UUID | None]:
        """Send the next batch of one event (or slot) walk: (complete, the new cursor).

        The walk goes forward from the cursor; at the end it wraps once to the start, so
        attendees who registered behind the cursor (late registrants) are reached too.
        """
        m, conn = self.m, self.conn
        if m["kind"] == "before_event" and window_end <= self.now:
            dropped = await conn.execute(_DROP, m["id"], m["event_id"], slot_id, self.now)
            self.batch.dropped += affected(dropped)
            return True, cursor
        args = (m["id"], m["event_id"], slot_id)
        rows = [dict(r) for r in await conn.fetch(_UNSENT, *args, size, cursor or _NO_CURSOR, [])]
        new_cursor = rows[-1]["id"] if rows else cursor
        if len(rows) < size and cursor is not None:  # the end: wrap to the start once
            skip = [r["id"] for r in rows]
            wrapped = await conn.fetch(_UNSENT, *args, size - len(rows), _NO_CURSOR, skip)
            rows += [dict(r) for r in wrapped]
            new_cursor = None
        queued, bad = await self._send(rows)
        if queued:
            await conn.execute(_RECEIPTS_SENT, m["id"], queued, m["scheduled_date"], self.now)
        if bad:
            await conn.execute(
                _RECEIPTS_FAILED,
                m["id"],
                bad,
                m["scheduled_date"],
                self.now,
                MailErrorKind.RECIPIENT_INVALID,
            )
        return len(rows) < size and self.batch.failure is None, new_cursor

    async def event_engine(self, size: int) -> None:
        """One batch of an event-based row: the next stretch of its walk over the event."""
        m = self.m
        done, cursor = await self.walk(size, None, m["date_end"], m["last_registration_id"])
        self.batch.done = done
        await self.conn.execute(_SET_STATE, m["id"], done, None, self.now, True, cursor)
        self.batch.finished = done or not self.batch.progressed()

    async def slot_engine(self, size: int) -> None:
        """One batch of an event-based row on a multi-slot event: the next stretch of the
        walk of its earliest due slot child (locked after the row)."""
        m, conn = self.m, self.conn
        await materialize_slot_children(conn, m["event_id"], m["id"])
        child = await conn.fetchrow(_DUE_CHILD, m["id"], self.force, self.now)
        if child is not None:
            done, cursor = await self.walk(
                size, child["slot_id"], child["date_end"], child["last_registration_id"]
            )
            await conn.execute(_CHILD_DONE, child["id"], done)
            await conn.execute(_CHILD_CURSOR, child["id"], cursor)
            self.batch.children_done += done
        nxt, open_children = must(await conn.fetchrow(_CHILDREN_NEXT, m["id"])).values()
        self.batch.done = open_children == 0
        await conn.execute(_SET_STATE, m["id"], self.batch.done, nxt, self.now, False, None)
        self.batch.finished = child is None or not self.batch.progressed()
