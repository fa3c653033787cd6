"""Offers: freed seats offered in queue order (the pass, or an operator out of turn), and
the answers to an offer (accept, decline) or an operator's removal.

An offer is made of held drafts: one draft registration per seat, taken through the ONE
seat-taking transaction (`registrations.register_batch_in`, as the `waitlist` system
actor, state `draft`, origin `waitlist`, `hold_expires_at` = the offer's deadline). The
seat counter counts a draft whose hold has not ended, so an offer and a registration can
never take the same seat, and there is no second counter. The first draft carries the
entry's name, email and phone; the others `<name> (guest n)` and the same email (a
correction renames them later).

Each event is served in one transaction, locking as the register verb does (the event
row, then its slot and ticket rows) after claiming the event's settings row with
`FOR NO KEY UPDATE SKIP LOCKED` (one process serves an event at a time; the others go on
to the next). The list of an event that takes no one any more (cancelled, or over by the
database's clock) is closed: its entries become `removed`, their offers released. An
archived event's entries are held as they are. Otherwise the pass first expires the
offers whose deadline has passed (their drafts are cancelled
through the one state transition with reason `waitlist_offer_expired`, the entry becomes
`expired`), then decides the waiting entries in queue order (`created_at`, then id): the
first whose seats fit is offered, and one whose seats do not fit is skipped for now and
keeps its place, so a smaller entry behind it may be served first. Each offer's mail goes
into the outbox in the same transaction: the event's offer template, or the built-in
text when it has none (or it cannot be rendered).

Accepting turns the drafts into `open` through the one state transition (armed like any
new attendee); declining, an operator's removal and an expiry cancel them, which frees
their seats and wakes the pass (the `registrations_wake_waitlist` trigger). Every
deadline is read against the database's clock.

Webhook facts: `waitlist.offered` for every offer made (one statement for the page), and
`waitlist.accepted` for an accept, each the entry as written (ids, seats, status, times,
its held registrations), its name, email and phone only in the facts' PII. The drafts'
own facts (`registration.created`, `registration.state_changed`) come from the register
verb and the one transition.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc import errors
from events_svc.actors import Actor
from events_svc.capabilities import CapabilityCodec
from events_svc.db import CONNECTION_ERRORS, Connection, Pool, connection, must, transaction
from events_svc.diagnostics import error_fields
from events_svc.models import AttendeeInput
from events_svc.ports import MailRefused, OutgoingMessage, Ports, RenderRequest
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import in_zone
from events_svc.verbs.fence import lock_event
from events_svc.verbs.mail import LinkBuilder, Senders, recipient_context
from events_svc.verbs.public import tickets_token
from events_svc.verbs.registrations import (
    Registered,
    RegisterRequest,
    assess_queue_place,
    lock_event_by_id,
    lock_registration,
    lock_scope,
    register_batch_in,
    write_state,
)
from events_svc.verbs.waitlist.entries import open_link, public_status
from events_svc.verbs.waitlist.records import entry_view, find_entry, position_of, read_entry
from events_svc.verbs.waitlist.settings import read_settings

log = logging.getLogger("events_svc.waitlist")

WAITLIST_ACTOR = Actor(id="waitlist", kind="system")
WaitlistLinks = Callable[[UUID, UUID], dict[str, str]]  # (entry, event) -> offer, decline
NAME_MAX = 256

_CLAIM = """
SELECT enabled, offer_hours, offer_template_id FROM event.waitlist_settings
WHERE event_id = $1
FOR NO KEY UPDATE SKIP LOCKED  -- one process serves an event at a time
"""
_EVENT = """
SELECT id, name, date_begin, date_end, date_tz, location, event_url, organizer_id,
    company_id, kanban_state::text AS kanban_state, active, seats_limited, seats_max,
    is_multi_slots, date_end <= clock_timestamp() AS over  -- the database's clock
FROM event.events WHERE id = $1
"""
_DUE = """
SELECT event_id, bool_or(status = 'offered' AND offer_expires_at <= clock_timestamp()) AS expiring
FROM event.waitlist_entry
WHERE status IN ('waiting', 'offered') AND ($1::uuid IS NULL OR event_id > $1)
GROUP BY event_id ORDER BY event_id LIMIT $2
"""
DUE_PAGE = 500  # events looked at per read of the pass
_NEXT = """
SELECT (SELECT min(offer_expires_at) FROM event.waitlist_entry WHERE status = 'offered')
        AS expiry,
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
_OFFERED = """
UPDATE event.waitlist_entry w
SET status = 'offered', offered_at = $2, offer_expires_at = x.until, updated_at = $2,
    registration_ids = x.ids
FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, ids uuid[], until timestamptz)
WHERE w.id = x.id
"""
_SALES_END = "SELECT id, end_sale_datetime FROM event.tickets WHERE id = ANY($1::uuid[])"
_CLOSE = """
UPDATE event.waitlist_entry w
SET status = $2::event.waitlist_status, decided_at = clock_timestamp(),
    updated_at = clock_timestamp()
WHERE w.id = $1
RETURNING w.*
"""
_NAMES = """
SELECT (SELECT name FROM event.tickets WHERE id = $1) AS ticket_name,
    s.date_begin AS slot_begin, s.date_end AS slot_end
FROM (SELECT 1) one LEFT JOIN event.slots s ON s.id = $2
"""
_DB_NOW = "SELECT clock_timestamp()"
# the webhook facts of entries, as written: ids, seats, status and times in the data, the
# person's name, email and phone in the PII (delivered only with `include_pii`); the
# event's company, as a registration's (the entry's copy does not follow a company move)
_ENTRY_FACTS = """
INSERT INTO event.webhook_facts (company_id, event_id, type, occurred_at, data, pii)
SELECT e.company_id, w.event_id, $2::text, $3, jsonb_build_object(
        'waitlist_entry_id', w.id, 'event_id', w.event_id, 'event_ticket_id', w.event_ticket_id,
        'event_slot_id', w.event_slot_id, 'seats', w.seats, 'status', w.status,
        'offered_at', w.offered_at, 'offer_expires_at', w.offer_expires_at,
        'decided_at', w.decided_at, 'registration_ids', to_jsonb(w.registration_ids)),
    CASE WHEN event.webhook_listens_with_pii(e.company_id, w.event_id, $2::text)
        THEN jsonb_build_object('name', w.name, 'email', w.email, 'phone', w.phone)
        ELSE '{}' END
FROM event.waitlist_entry w JOIN event.events e ON e.id = w.event_id
WHERE w.id = ANY($1::uuid[]) AND event.webhook_listens(e.company_id, w.event_id, $2::text)
ORDER BY w.created_at, w.id
"""


@dataclass(frozen=True)
class OfferOptions:
    """How offers are made: the mail's links, the fallback sender, entries per page."""

    links: LinkBuilder
    waitlist_links: WaitlistLinks
    default_sender: str
    batch: int = 500


@dataclass
class OfferSummary:
    """What one pass did."""

    offered: int = 0
    expired: int = 0
    closed: int = 0  # entries of events that take no one any more
    events: int = 0
    skipped: int = 0  # events another process was serving
    failed: int = 0  # events whose transaction failed (logged; served again next pass)
    more: bool = False

    @property
    def progressed(self) -> bool:
        return bool(self.offered or self.expired or self.closed)


@dataclass
class _Served:
    offered: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[UUID, errors.DomainError] = field(default_factory=dict)


def _guest_name(name: str, n: int) -> str:
    suffix = f" (guest {n})"
    return name[: NAME_MAX - len(suffix)] + suffix


def _request(entry: dict[str, Any], hold_until: datetime, now: datetime) -> RegisterRequest:
    """The held drafts of an entry's offer, as one request of the register verb."""
    first = AttendeeInput(name=entry["name"], email=entry["email"], phone=entry["phone"])
    guests = [
        AttendeeInput(name=_guest_name(entry["name"], n), email=entry["email"])
        for n in range(1, entry["seats"])
    ]
    return RegisterRequest(
        actor=WAITLIST_ACTOR,
        event_id=entry["event_id"],
        attendees=[first, *guests],
        now=now,
        slot_id=entry["event_slot_id"],
        ticket_id=entry["event_ticket_id"],
        source="waitlist",
        arm_leads=False,  # not an attendee yet: the lead rules see it when accepted
        hold_until=hold_until,
    )


async def _deadlines(
    conn: Connection,
    event: dict[str, Any],
    settings: dict[str, Any],
    entries: list[dict[str, Any]],
    at: datetime,
) -> dict[UUID, datetime]:
    """Each offer's deadline: `offer_hours` from now, but never after the event's end or
    the end of its ticket's sale (an offer cannot outlast what it offers)."""
    ends: dict[UUID, datetime] = {}
    tickets = sorted({e["event_ticket_id"] for e in entries if e["event_ticket_id"]})
    if tickets:
        for row in await conn.fetch(_SALES_END, tickets):
            if row["end_sale_datetime"] is not None:
                ends[row["id"]] = row["end_sale_datetime"]
    base = min(at + timedelta(hours=int(settings["offer_hours"])), event["date_end"])
    return {e["id"]: min(base, ends.get(e["event_ticket_id"], base)) for e in entries}


async def _offer(
    conn: Connection,
    ports: Ports,
    options: OfferOptions,
    event: dict[str, Any],
    settings: dict[str, Any],
    entries: list[dict[str, Any]],
    sender: str,
    now: datetime,
) -> _Served:
    """Offer seats to `entries` (locked, waiting, in queue order) where they fit: held
    drafts, the entries `offered`, their mails queued. Inside the caller's transaction,
    after the event lock."""
    served = _Served()
    if not entries:
        return served
    at: datetime = await conn.fetchval(_DB_NOW)
    deadlines = await _deadlines(conn, event, settings, entries, at)
    entries = [e for e in entries if deadlines[e["id"]] > at]  # its sale ends now: none
    if not entries:
        return served
    results = await register_batch_in(conn, [_request(e, deadlines[e["id"]], now) for e in entries])
    made: list[tuple[dict[str, Any], Registered]] = []
    for entry, result in zip(entries, results, strict=True):
        if isinstance(result, errors.DomainError):
            served.refused[entry["id"]] = result
        else:
            made.append((entry, result))
    if not made:
        return served
    rows = [
        {
            "id": str(e["id"]),
            "ids": [str(r["id"]) for r in reg.registrations],
            "until": deadlines[e["id"]].isoformat(),
        }
        for e, reg in made
    ]
    await conn.execute(_OFFERED, rows, at)  # the pool's codec writes the jsonb
    await conn.execute(_ENTRY_FACTS, [e["id"] for e, _ in made], "waitlist.offered", now)
    for entry, reg in made:
        entry.update(
            status="offered",
            offered_at=at,
            offer_expires_at=deadlines[entry["id"]],
            registration_ids=[r["id"] for r in reg.registrations],
        )
        served.offered.append(entry)
    await _mail_offers(conn, ports, options, event, settings, made, sender, now)
    return served


def _builtin(
    event: dict[str, Any], entry: dict[str, Any], links: dict[str, str]
) -> tuple[str, str]:
    """The offer mail without a template: what is held, until when, and the two links."""
    seats = entry["seats"]
    held = "1 seat is" if seats == 1 else f"{seats} seats are"
    lines = [
        f"Hello {entry['name']},",
        "",
        f"{held} free for you at {event['name']}, and held for you until {links['deadline']}.",
        "",
    ]
    if links["offer_url"]:
        lines += [
            f"Accept the offer: {links['offer_url']}",
            f"Decline it: {links['decline_url']}",
        ]
    else:
        lines.append("Open the link you were given when you joined the waiting list to answer.")
    lines += [
        "",
        "If you do not answer in time, the seats go to the next person on the waiting list.",
    ]
    return f"A seat is free for you: {event['name']}", "\n".join(lines)


async def _mail_offers(
    conn: Connection,
    ports: Ports,
    options: OfferOptions,
    event: dict[str, Any],
    settings: dict[str, Any],
    made: list[tuple[dict[str, Any], Registered]],
    sender: str,
    now: datetime,
) -> None:
    """One mail per offer, into the outbox in the offer's transaction."""
    zone = event["date_tz"]
    tz = ZoneInfo(zone)
    m = {
        "event_id": event["id"],
        "event_name": event["name"],
        "date_begin": event["date_begin"],
        "date_end": event["date_end"],
        "date_tz": event["date_tz"],
        "location": event["location"],
        "event_url": event["event_url"],
    }
    contexts, links = [], []
    scopes: dict[tuple[UUID | None, UUID | None], dict[str, Any]] = {}
    for entry, reg in made:
        scope = (entry["event_ticket_id"], entry["event_slot_id"])
        if scope not in scopes:  # the ticket's name and the slot's times, once per scope
            scopes[scope] = must(await conn.fetchrow(_NAMES, *scope))
        r = {**reg.registrations[0], **scopes[scope]}
        offer = options.waitlist_links(entry["id"], event["id"])
        local = in_zone(entry["offer_expires_at"], tz)
        links.append({**offer, "deadline": local.strftime("%Y-%m-%d %H:%M ") + zone})
        waitlist = {**offer, "expires_at": local, "seats": entry["seats"]}
        contexts.append(recipient_context(m, r, options.links, now, waitlist))
    texts: list[tuple[str, str]] | None = None
    template = settings.get("offer_template_id")
    if template is not None:
        try:
            rendered = await ports.template_renderer.render(
                conn, RenderRequest(template, "mail", contexts)
            )
            if len(rendered) == len(made):
                texts = [(t.subject, t.body) for t in rendered]
        except MailRefused as refused:
            log.warning(
                "waitlist offer template not rendered: the built-in text is sent",
                extra={"fields": {"event_id": str(event["id"]), "kind": str(refused.kind)}},
            )
    if texts is None:
        texts = [_builtin(event, e, lk) for (e, _), lk in zip(made, links, strict=True)]
    for (entry, reg), (subject, body) in zip(made, texts, strict=True):
        await ports.mail_queue.enqueue(
            conn,
            OutgoingMessage(
                channel="mail",
                recipient=entry["email"],
                sender=sender,
                subject=subject,
                body=body,
                event_id=event["id"],
                registration_id=reg.registrations[0]["id"],
            ),
        )
    await ports.mail_queue.flush(conn)


async def _release(
    conn: Connection,
    event: dict[str, Any],
    registration_ids: list[UUID],
    reason: str,
    now: datetime,
) -> None:
    """Cancel an offer's drafts that are still drafts (the one transition, with `reason`):
    their seats are free again. After the event lock; registrations in id order."""
    for rid in sorted(registration_ids):
        reg = await lock_registration(conn, rid)
        if reg["state"] != "draft":
            continue  # an operator moved it on: it is theirs now
        await write_state(
            conn,
            WAITLIST_ACTOR,
            event,
            None,
            reg,
            "cancel",
            now,
            origin="waitlist",
            sale_status=reg["sale_status"],
            note={"reason": reason},
        )


async def _expire(conn: Connection, event: dict[str, Any], now: datetime) -> int:
    """Expire the event's offers past their deadline; answers how many."""
    rows = await conn.fetch(_EXPIRE, event["id"])
    for row in rows:
        await _release(conn, event, list(row["registration_ids"]), "waitlist_offer_expired", now)
    return len(rows)


def _closing(event: dict[str, Any]) -> bool:
    """The event takes no one any more: cancelled, or over (by the database's clock)."""
    return event["kanban_state"] == "cancel" or bool(event["over"])


def _open_for_offers(event: dict[str, Any]) -> bool:
    """Offers are made: the event is not closing and not archived (an archived event's
    entries are held as they are, and served again once it is unarchived)."""
    return bool(event["active"]) and not _closing(event)


async def _close(conn: Connection, event: dict[str, Any], now: datetime) -> int:
    """Close the list of an event that takes no one any more (cancelled, over, archived):
    its waiting entries and its offers become `removed`, the offers' drafts released."""
    rows = await conn.fetch(_CLOSE_LIST, event["id"])
    for row in rows:
        await _release(conn, event, list(row["registration_ids"]), "waitlist_event_closed", now)
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
                default_cap=30,
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
    senders: Senders,
    now: datetime,
    summary: OfferSummary,
) -> None:
    """Close, expire and offer for one event, in one transaction."""
    event_id = details["id"]
    sender = await senders.of(details["organizer_id"], details["company_id"])
    async with transaction(pool) as conn:
        claimed = await conn.fetchrow(_CLAIM, event_id)
        if claimed is None:
            summary.skipped += 1
            return
        settings = dict(claimed)
        locked = await lock_event_by_id(conn, event_id)
        event = {**dict(must(await conn.fetchrow(_EVENT, event_id))), **locked}  # as locked
        summary.events += 1
        if _closing(event):
            summary.closed += await _close(conn, event, now)
            return
        summary.expired += await _expire(conn, event, now)
        if not _open_for_offers(event):
            return
        after: tuple[Any, Any] = (None, None)
        while True:
            page = [
                dict(r) for r in await conn.fetch(_WAITING_PAGE, event_id, *after, options.batch)
            ]
            served = await _offer(conn, ports, options, event, settings, page, sender, now)
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
    """One page of the events with live entries that have work: a list to close, an offer
    past its deadline, or free seats for some waiting entry; and where the next page
    starts (None: this was the last)."""
    work = []
    async with connection(pool) as conn:
        due = await conn.fetch(_DUE, after, DUE_PAGE)
        for row in due:
            try:
                found = await conn.fetchrow(_EVENT, row["event_id"])
                if found is None:
                    continue
                event = dict(found)
                if (
                    _closing(event)
                    or row["expiring"]
                    or (_open_for_offers(event) and await _worth_serving(conn, event, now))
                ):
                    work.append(event)
            except CONNECTION_ERRORS:
                raise  # the database is away: the whole pass fails and backs off
            except Exception as exc:
                _failed(summary, row["event_id"], exc)
    return work, (due[-1]["event_id"] if len(due) == DUE_PAGE else None)


def _failed(summary: OfferSummary, event_id: UUID, exc: Exception) -> None:
    """One event's failure: logged with its id (never attendee data), counted; the pass goes
    on with the other events and serves this one again next time."""
    summary.failed += 1
    fields = {**error_fields(exc), "event_id": str(event_id)}
    log.error("waitlist offer pass failed for an event", extra={"fields": fields})


async def run_offer_pass(
    pool: Pool,
    ports: Ports,
    options: OfferOptions,
    now: datetime,
    *,
    stopping: Callable[[], bool] = lambda: False,
) -> OfferSummary:
    """Serve every event with a waiting list: close the lists of events that take no one,
    expire overdue offers, offer freed seats. One event's failure is logged and counted;
    the others are served."""
    summary = OfferSummary()
    senders = Senders(ports, options.default_sender)
    after: UUID | None = None
    while True:
        work, after = await _due_events(pool, now, after, summary)
        for event in work:
            if stopping():
                summary.more = True
                return summary
            try:
                await _serve_event(pool, ports, options, event, senders, now, summary)
            except Exception as exc:
                _failed(summary, event["id"], exc)
        if after is None:
            return summary


async def next_offer_due(pool: Pool, now: datetime) -> datetime | None:
    """When the pass is next due: the earliest offer deadline (it expires the offer then),
    and a minute from now while anyone waits (the safety net under the wake-ups)."""
    async with connection(pool) as conn:
        row = must(await conn.fetchrow(_NEXT))
    due: list[datetime] = [row["expiry"]] if row["expiry"] is not None else []
    if row["waiting"]:
        due.append(now + SAFETY_NET)
    return min(due, default=None)


# --- an operator's offer out of turn, and removal ------------------------------------------


async def offer_now(
    pool: Pool,
    ports: Ports,
    options: OfferOptions,
    actor: Actor,
    entry_id: UUID,
    now: datetime,
) -> dict[str, Any]:
    """Offer seats to one waiting entry now, out of turn (409 `event_seats_exhausted`
    when its seats are not free; 409 `waitlist_entry_not_waiting`)."""
    async with connection(pool) as conn:
        found = await find_entry(conn, actor, entry_id)
        details = must(await conn.fetchrow(_EVENT, found["event_id"]))
    sender = await Senders(ports, options.default_sender).of(
        details["organizer_id"], details["company_id"]
    )
    async with transaction(pool) as conn:
        await lock_event(conn, actor, found["event_id"])  # the fence: foreign is missing
        locked = await lock_event_by_id(conn, found["event_id"])
        event = {**dict(must(await conn.fetchrow(_EVENT, found["event_id"]))), **locked}
        await lock_scope(conn, found["event_slot_id"], found["event_ticket_id"])
        entry = await read_entry(conn, entry_id, lock=True)
        if entry["status"] != "waiting":
            raise errors.WaitlistEntryNotWaiting(status=entry["status"])
        if not _open_for_offers(event):
            raise errors.RegistrationsClosed()
        settings = await read_settings(conn, entry["event_id"])
        served = await _offer(conn, ports, options, event, settings, [entry], sender, now)
        if entry_id in served.refused:
            raise served.refused[entry_id]
        await write_audit(
            conn,
            actor,
            "waitlist_offered",
            "waitlist_entry",
            entry_id,
            event_id=entry["event_id"],
            summary={"seats": entry["seats"], "out_of_turn": True},
        )
        return entry_view(entry, pii_full=False)


async def _locked_entry(
    conn: Connection, entry_id: UUID, event_id: UUID, actor: Actor | None
) -> tuple[dict[str, Any], dict[str, Any] | None, dict[str, Any]]:
    """Lock the entry's event (fenced for an operator), its slot and ticket rows, then the
    entry: (event, ticket, entry)."""
    found = await read_entry(conn, entry_id, event_id)
    if actor is not None:
        await lock_event(conn, actor, event_id)
    event = await lock_event_by_id(conn, event_id)
    ticket = await lock_scope(conn, found["event_slot_id"], found["event_ticket_id"])
    return event, ticket, await read_entry(conn, entry_id, event_id, lock=True)


async def _withdraw(
    conn: Connection,
    actor: Actor,
    event: dict[str, Any],
    entry: dict[str, Any],
    status: str,
    reason: str,
    now: datetime,
) -> dict[str, Any]:
    """A live entry (locked) leaves the list as `status` (`removed`, `declined`): a held
    offer's drafts are released with `reason`, one audit row `waitlist_<status>`. A closed
    entry is answered as it is."""
    if entry["status"] not in ("waiting", "offered"):
        return entry
    if entry["status"] == "offered":
        await _release(conn, event, list(entry["registration_ids"]), reason, now)
    closed = dict(must(await conn.fetchrow(_CLOSE, entry["id"], status)))
    await write_audit(
        conn,
        actor,
        f"waitlist_{status}",
        "waitlist_entry",
        entry["id"],
        event_id=closed["event_id"],
        summary={"seats": closed["seats"]},
    )
    return closed


async def remove_entry(pool: Pool, actor: Actor, entry_id: UUID, now: datetime) -> dict[str, Any]:
    """Take an entry off the list (`removed`; a held offer is released). An entry that is
    already closed is answered as it is."""
    async with transaction(pool) as conn:
        found = await find_entry(conn, actor, entry_id)
        event, _, entry = await _locked_entry(conn, entry_id, found["event_id"], actor)
        entry = await _withdraw(conn, actor, event, entry, "removed", "waitlist_entry_removed", now)
        entry["position"] = None
        return entry_view(entry, pii_full=False)


# --- the person's answer -----------------------------------------------------------------


async def accept(
    pool: Pool, codec: CapabilityCodec, token: str, now: datetime
) -> tuple[dict[str, Any], str]:
    """Accept an offer: its drafts become `open` (armed as any new attendee). Twice: the
    same answer. After the deadline: 410 `waitlist_offer_expired`."""
    entry_id, event_id = open_link(codec, token, now)
    async with transaction(pool) as conn:
        try:
            event, ticket, entry = await _locked_entry(conn, entry_id, event_id, None)
        except errors.NotFound:
            raise errors.EventNotPublished() from None
        status = entry["status"]
        if status == "offered" and entry["offer_expires_at"] <= await conn.fetchval(_DB_NOW):
            status = "expired"  # the pass expires it on its next turn
        if status == "expired":
            raise errors.WaitlistOfferExpired()
        if status not in ("offered", "accepted"):
            raise errors.WaitlistNotOffered(status=status)
        if status == "offered":
            if event["kanban_state"] == "cancel":
                raise errors.EventCancelled()
            seats = [await lock_registration(conn, r) for r in sorted(entry["registration_ids"])]
            kept = [r for r in seats if r["active"] and r["state"] != "cancel"]
            if not kept:  # an operator cancelled or archived every seat of the offer
                raise errors.WaitlistNotOffered(
                    "The seats of this offer were withdrawn.", status="withdrawn"
                )
            for reg in kept:
                if reg["state"] != "draft":
                    continue  # an operator confirmed it already: it is a ticket now
                await write_state(
                    conn,
                    WAITLIST_ACTOR,
                    event,
                    ticket,
                    reg,
                    "open",
                    now,
                    origin="waitlist",
                    sale_status=reg["sale_status"],
                    note={"source": "waitlist"},
                )
            entry = dict(must(await conn.fetchrow(_CLOSE, entry_id, "accepted")))
            await conn.execute(_ENTRY_FACTS, [entry_id], "waitlist.accepted", now)
            await write_audit(
                conn,
                WAITLIST_ACTOR,
                "waitlist_accepted",
                "waitlist_entry",
                entry_id,
                event_id=event_id,
                summary={"seats": entry["seats"], "registrations": len(entry["registration_ids"])},
            )
        view = public_status(entry, None)
    return view, tickets_token(codec, event_id, list(entry["registration_ids"]))


async def decline(pool: Pool, codec: CapabilityCodec, token: str, now: datetime) -> dict[str, Any]:
    """Decline an offer (its seats go to the next entry) or leave the queue. Twice: the
    same answer; an accepted entry: 409 `waitlist_not_offered` (its tickets stay)."""
    entry_id, event_id = open_link(codec, token, now)
    async with transaction(pool) as conn:
        try:
            event, _, entry = await _locked_entry(conn, entry_id, event_id, None)
        except errors.NotFound:
            raise errors.EventNotPublished() from None
        if entry["status"] == "accepted":
            raise errors.WaitlistNotOffered(status="accepted")
        entry = await _withdraw(
            conn, WAITLIST_ACTOR, event, entry, "declined", "waitlist_offer_declined", now
        )
        return public_status(entry, await position_of(conn, entry))
