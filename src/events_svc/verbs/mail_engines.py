"""The three scheduler engines: what one batch of one claimed scheduler row sends.

`after_sub` keeps per-attendee receipts, due at `date_open` + offset; the event
walk sends a before/after-the-event mail to each eligible attendee without a
receipt, in id order from a cursor; the slot engine is the same walk per slot
child on multi-slot events. Eligibility everywhere: `state IN ('open','done')
AND active`. A before-event mail whose window closed is dropped with receipts
marked `dropped_window_closed`.

Failures have two grains. An attendee without a usable address gets a failed
receipt (`recipient_invalid`) and the others are still sent; that receipt is not
retried until the attendee's details change (`arming.retry_failed_mails`). A
failure of the line itself stops the batch, and the pass records it and backs the
line off: no template, or a template that fails to render for any recipient of
the batch, for any reason (nothing of the batch is sent: its recipients are
rendered in one call of the renderer), or a queue that refuses (what it took
before refusing is kept, with its receipts). Everything here
runs inside the batch's transaction, holding the scheduler row (and then its
slot child): the pass's end of the lock order.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc.actors import SYSTEM
from events_svc.addresses import is_email, is_phone
from events_svc.capabilities import ICS, MY_TICKETS, CapabilityCodec
from events_svc.db import Connection, must
from events_svc.ports import MailRefused, OutgoingMessage, Ports, RenderRequest
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import in_zone
from events_svc.verbs.schedules import materialize_slot_children

PUBLIC_PATH = "/api/v1/event"  # where the public routes live under the public base URL
LINKS = ("ics", "my_tickets")

_ELIGIBLE = "r.state IN ('open', 'done') AND r.active"
_MATERIALIZE_CHUNK = 10_000
_REGISTRATION_FIELDS = ("name", "email", "phone", "company_name", "barcode", "state")
_LINE_FAILURES = {"template_unresolved", "template_renderer_not_composed", "render_failed",
                  "enqueue_refused"}  # fmt: skip
_DETAIL_MAX = 300

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
ORDER BY mr.scheduled_date, mr.id LIMIT $4
"""  # noqa: S608 - constant text only
_MARK_SENT = """
UPDATE event.mail_registrations SET mail_sent = true, outcome = 'sent', sent_at = $2
WHERE id = ANY($1::uuid[])
"""
_MARK_FAILED = """
UPDATE event.mail_registrations SET outcome = 'failed', error_kind = 'recipient_invalid',
    failed_at = $2
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
  AND r.id > $5  -- the cursor: an index range, not a rescan of what was sent
  AND NOT EXISTS (SELECT 1 FROM event.mail_registrations x
                  WHERE x.scheduler_id = $1 AND x.registration_id = r.id
                    AND x.registration_id > $5)  -- lets the receipt scan start at the cursor
  AND NOT (r.id = ANY($6::uuid[]))
ORDER BY r.id LIMIT $4
"""  # noqa: S608 - constant text only
_NO_CURSOR = UUID(int=0)
_RECEIPTS_SENT = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, mail_sent,
    outcome, sent_at)
SELECT $1, unnest($2::uuid[]), $3, true, 'sent', $4
"""
_RECEIPTS_FAILED = """
INSERT INTO event.mail_registrations (scheduler_id, registration_id, scheduled_date, outcome,
    error_kind, failed_at)
SELECT $1, unnest($2::uuid[]), $3, 'failed', 'recipient_invalid', $4
ON CONFLICT ON CONSTRAINT mail_registrations_scheduler_registration_key DO NOTHING
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


@dataclass(frozen=True)
class PassOptions:
    batch: int
    cap: int
    default_sender: str
    # links in the template context: both a codec with a secret and a public base URL
    codec: CapabilityCodec | None = None
    public_base_url: str = ""
    ics_ttl_s: int = 30 * 86400


def unavailable_links(codec: CapabilityCodec | None, public_base_url: str) -> list[str]:
    """The context links that render as empty text in this deployment (no secret or no
    public base URL: nothing can be minted)."""
    return [] if codec is not None and codec.configured and public_base_url else list(LINKS)


@dataclass(frozen=True)
class LineFailure:
    """A failure of the whole line: a kind of `mail_error_kind` and a safe detail."""

    kind: str
    detail: str


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
        return bool(self.sent or self.dropped or self.pruned or self.materialized
                    or self.children_done or self.bad_recipients or self.done)  # fmt: skip


def _refusal(exc: BaseException, default: str) -> LineFailure:
    """A port's refusal as a line failure; anything but MailRefused keeps only its type."""
    if isinstance(exc, MailRefused):
        kind = exc.kind if exc.kind in _LINE_FAILURES else default
        return LineFailure(kind, str(exc)[:_DETAIL_MAX])
    return LineFailure(default, type(exc).__name__)


class LineWork:
    """One claimed scheduler row inside its batch transaction."""

    def __init__(self, conn: Connection, m: dict[str, Any], ports: Ports, sender: str,
                 now: datetime, force: bool, options: PassOptions) -> None:  # fmt: skip
        self.conn, self.m, self.ports, self.sender = conn, m, ports, sender
        self.options, self.now, self.force = options, now, force
        self.batch = Batch()

    def _context(self, r: dict[str, Any]) -> dict[str, Any]:
        m = self.m
        tz = ZoneInfo(m["date_tz"])
        slot = None
        if r["slot_begin"] is not None:
            slot = {"date_begin": in_zone(r["slot_begin"], tz),
                    "date_end": in_zone(r["slot_end"], tz)}  # fmt: skip
        return {
            "registration": {k: r[k] for k in _REGISTRATION_FIELDS},
            "event": {
                "name": m["event_name"],
                "date_begin": in_zone(m["date_begin"], tz),
                "date_end": in_zone(m["date_end"], tz),
                "date_tz": m["date_tz"],
                "location": m["location"],
                "event_url": m["event_url"],
            },
            "ticket": {"name": r["ticket_name"]} if r["ticket_name"] is not None else None,
            "slot": slot,
            "links": self._links(r),
        }

    def _links(self, r: dict[str, Any]) -> dict[str, str]:
        """The attendee's calendar and tickets links; empty text when none can be minted."""
        codec, base = self.options.codec, self.options.public_base_url
        if codec is None or unavailable_links(codec, base):
            return dict.fromkeys(LINKS, "")
        event_id = str(self.m["event_id"])
        slot = str(r["event_slot_id"]) if r.get("event_slot_id") else None
        expires = self.now + timedelta(seconds=self.options.ics_ttl_s)
        ics = codec.mint(ICS, {"e": event_id, "s": slot}, expires)
        tickets = codec.mint(MY_TICKETS, {"e": event_id, "r": [str(r["id"])]}, None)
        return {"ics": f"{base}{PUBLIC_PATH}/public/ics/{ics}",
                "my_tickets": f"{base}{PUBLIC_PATH}/public/my-tickets/{tickets}"}  # fmt: skip

    def _recipient(self, r: dict[str, Any]) -> str | None:
        """The attendee's address on the line's channel, or None when it is not usable."""
        if self.m["channel"] == "mail":
            return str(r["email"]) if is_email(r["email"] or "") else None
        return str(r["phone"]) if is_phone(r["phone"] or "") else None

    async def send(self, recipients: list[dict[str, Any]]) -> tuple[list[UUID], list[UUID]]:
        """Render and queue each: (ids queued, ids without a usable address)."""
        queued: list[UUID] = []
        bad: list[UUID] = []
        try:
            queued, bad = await self._queue_each(recipients)
            if queued:  # before the receipts, in the same transaction
                await self.ports.mail_queue.flush(self.conn)
        except MailRefused as refused:  # a queue refusing the batch as a whole
            self.batch.failure = _refusal(refused, "enqueue_refused")
            queued = []
        except BaseException:
            # drop what the queue holds for this transaction: it is rolling back
            with contextlib.suppress(Exception):
                await self.ports.mail_queue.flush(self.conn)
            raise
        self.batch.sent += len(queued)
        self.batch.bad_recipients += len(bad)
        return queued, bad

    async def _queue_each(self, recipients: list[dict[str, Any]]) -> tuple[list[UUID], list[UUID]]:
        m = self.m
        addressed = [(r, to) for r in recipients if (to := self._recipient(r)) is not None]
        bad = [r["id"] for r in recipients if self._recipient(r) is None]
        queued: list[UUID] = []
        if not addressed:
            return queued, bad
        request = RenderRequest(m["template_ref"], m["template_kind"],
                                [self._context(r) for r, _ in addressed])  # fmt: skip
        try:  # whatever a template does, it fails its own line (this batch), never the pass
            rendered = await self.ports.template_renderer.render(self.conn, request)
            if len(rendered) != len(addressed):
                raise MailRefused("render_failed", "the renderer answered a partial batch")
        except Exception as exc:
            self.batch.failure = _refusal(exc, "render_failed")
            return queued, bad
        for (r, to), text in zip(addressed, rendered, strict=True):
            try:
                await self.ports.mail_queue.enqueue(self.conn, OutgoingMessage(
                    channel=m["channel"], recipient=to, sender=self.sender,
                    subject=text.subject, body=text.body, event_id=m["event_id"],
                    registration_id=r["id"], scheduler_id=m["id"],
                ))  # fmt: skip
            except Exception as exc:
                self.batch.failure = _refusal(exc, "enqueue_refused")
                break
            queued.append(r["id"])
        return queued, bad

    async def attendee_engine(self, size: int, materialize: bool) -> bool:
        """One batch of after_sub sends (receipts created first when `materialize`);
        answers whether receipts are still missing, so the next batch creates them."""
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
            self.batch.materialized = int(made.split()[-1])
            more_to_materialize = self.batch.materialized == _MATERIALIZE_CHUNK
        due = [dict(r) for r in await conn.fetch(_DUE_RECEIPTS, m["id"], self.force, self.now,
                                                 size)]  # fmt: skip
        receipts = {r["id"]: r["receipt_id"] for r in due}
        queued, bad = await self.send(due)
        if queued:
            await conn.execute(_MARK_SENT, [receipts[i] for i in queued], self.now)
        if bad:
            await conn.execute(_MARK_FAILED, [receipts[i] for i in bad], self.now)
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
        return bool(lacking)  # attendees without a receipt (a full chunk, or newcomers)

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
        rows = [dict(r) for r in await conn.fetch(_UNSENT, *args, size, cursor or _NO_CURSOR,
                                                  [])]  # fmt: skip
        new_cursor = rows[-1]["id"] if rows else cursor
        if len(rows) < size and cursor is not None:  # the end: wrap to the start once
            skip = [r["id"] for r in rows]
            rows += [dict(r) for r in await conn.fetch(_UNSENT, *args, size - len(rows),
                                                       _NO_CURSOR, skip)]  # fmt: skip
            new_cursor = None
        queued, bad = await self.send(rows)
        if queued:
            await conn.execute(_RECEIPTS_SENT, m["id"], queued, m["scheduled_date"], self.now)
        if bad:
            await conn.execute(_RECEIPTS_FAILED, m["id"], bad, m["scheduled_date"], self.now)
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
            done, cursor = await self.walk(size, child["slot_id"], child["date_end"],
                                           child["last_registration_id"])  # fmt: skip
            await conn.execute(_CHILD_DONE, child["id"], done)
            await conn.execute(_CHILD_CURSOR, child["id"], cursor)
            self.batch.children_done += done
        nxt, open_children = must(await conn.fetchrow(_CHILDREN_NEXT, m["id"])).values()
        self.batch.done = open_children == 0
        await conn.execute(_SET_STATE, m["id"], self.batch.done, nxt, self.now, False, None)
        self.batch.finished = child is None or not self.batch.progressed()
