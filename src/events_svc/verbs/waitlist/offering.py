"""Offers: seats held for a waiting entry (the pass's, or an operator's out of turn),
their mail, and their release.

An offer is made of held drafts: one draft registration per seat, taken through the ONE
seat-taking transaction (`registrations.register_batch_in`, as the `waitlist` system
actor, state `draft`, origin `waitlist`, `hold_expires_at` = the offer's deadline). The
seat counter counts a draft whose hold has not ended, so an offer and a registration can
never take the same seat, and there is no second counter. The first draft carries the
entry's name, email and phone; the others `<name> (guest n)` and the same email (a
correction renames them later). Each offer's mail goes into the outbox in the same
transaction: the event's offer template, or the built-in text when it has none (or it
cannot be rendered). Every deadline is read against the database's clock.

Releasing an offer (declined, removed, expired, its event closed) cancels its drafts that
are still drafts through the one state transition, which frees their seats and wakes the
pass (the `registrations_wake_waitlist` trigger).

Webhook facts: `waitlist.offered` for every offer made (one statement for the page), and
`waitlist.accepted` for an accept (`record_entry_facts`), each the entry as written (ids,
seats, status, times, its held registrations), its name, email and phone only in the
facts' PII. The drafts' own facts (`registration.created`, `registration.state_changed`)
come from the register verb and the one transition.
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
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.documents import when
from events_svc.models import AttendeeInput
from events_svc.ports import MailRefused, OutgoingMessage, Ports, RenderRequest
from events_svc.text import visible
from events_svc.verbs import partners
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import in_zone
from events_svc.verbs.events import closed_to_registrations
from events_svc.verbs.fence import lock_event
from events_svc.verbs.mail import LinkBuilder, Senders, recipient_context
from events_svc.verbs.registrations import (
    Registered,
    RegisterRequest,
    lock_event_by_id,
    lock_registration,
    lock_scope,
    register_batch_in,
    write_state,
)
from events_svc.verbs.waitlist.records import entry_view, find_entry, read_entry
from events_svc.verbs.waitlist.settings import read_settings

log = logging.getLogger("events_svc.waitlist")

WAITLIST_ACTOR = Actor(id="waitlist", kind="system")
WaitlistLinks = Callable[[UUID, UUID], dict[str, str]]  # (entry, event) -> offer, decline
NAME_MAX = 256

_EVENT = """
SELECT id, name, date_begin, date_end, date_tz, location, event_url, organizer_id,
    company_id, kanban_state::text AS kanban_state, active, seats_limited, seats_max,
    is_multi_slots, clock_timestamp() AS db_now  -- the database's clock: deadlines read it
FROM event.events WHERE id = $1
"""
_OFFERED = """
UPDATE event.waitlist_entry w
SET status = 'offered', offered_at = $2, offer_expires_at = x.until, updated_at = $2,
    registration_ids = x.ids
FROM jsonb_to_recordset($1::jsonb) AS x(id uuid, ids uuid[], until timestamptz)
WHERE w.id = x.id
"""
_SALES_END = "SELECT id, end_sale_datetime FROM event.tickets WHERE id = ANY($1::uuid[])"
_NAMES = """
SELECT (SELECT name FROM event.tickets WHERE id = $1) AS ticket_name,
    s.date_begin AS slot_begin, s.date_end AS slot_end
FROM (SELECT 1) one LEFT JOIN event.slots s ON s.id = $2
"""
_DB_NOW = "SELECT clock_timestamp()"
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
class Offered:
    """What an offer of some entries made: the entries offered, the refusals of the others."""

    offered: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[UUID, errors.DomainError] = field(default_factory=dict)


def closing(event: dict[str, Any]) -> str | None:
    """Why the event takes no one any more (`events.closed_to_registrations` at the
    database's clock), or None; `event` as `read_event` answers it."""
    return closed_to_registrations(event, event["db_now"])


def open_for_offers(event: dict[str, Any]) -> bool:
    """Offers are made: the event takes registrations and is not archived (an archived
    event's entries are held as they are, and served again once it is unarchived)."""
    return bool(event["active"]) and closing(event) is None


async def find_event(conn: Connection, event_id: UUID) -> dict[str, Any] | None:
    """The event as offers read it (the database's clock with it), or None."""
    row = await conn.fetchrow(_EVENT, event_id)
    return dict(row) if row is not None else None


async def read_event(conn: Connection, event_id: UUID) -> dict[str, Any]:
    """The event as offers read it, when it must exist (its row is locked or fenced)."""
    return must(await conn.fetchrow(_EVENT, event_id))


async def record_entry_facts(
    conn: Connection, entry_ids: list[UUID], fact: str, now: datetime
) -> None:
    """The webhook facts (`waitlist.offered`, `waitlist.accepted`) of entries as written."""
    await conn.execute(_ENTRY_FACTS, entry_ids, fact, now)


def _guest_name(name: str, n: int) -> str:
    suffix = f" (guest {n})"
    return name[: NAME_MAX - len(suffix)] + suffix


def _request(entry: dict[str, Any], hold_until: datetime, now: datetime) -> RegisterRequest:
    """The held drafts of an entry's offer, as one request of the register verb. An entry
    joined before names refused control characters keeps its place: its name is written
    without them (`text.visible`), never refused here."""
    name = visible(entry["name"])
    first = AttendeeInput(name=name, email=entry["email"], phone=entry["phone"])
    guests = [
        AttendeeInput(name=_guest_name(name, n), email=entry["email"])
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


async def make_offers(
    conn: Connection,
    ports: Ports,
    options: OfferOptions,
    event: dict[str, Any],
    settings: dict[str, Any],
    entries: list[dict[str, Any]],
    sender: str,
    now: datetime,
) -> Offered:
    """Offer seats to `entries` (locked, waiting, in queue order) where they fit: held
    drafts, the entries `offered`, their mails queued. Inside the caller's transaction,
    after the event lock."""
    served = Offered()
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
    await record_entry_facts(conn, [e["id"] for e, _ in made], "waitlist.offered", now)
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
        links.append({**offer, "deadline": when(entry["offer_expires_at"], zone)})
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


async def release_offer(
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
        details = await read_event(conn, found["event_id"])
    senders = Senders(ports, options.default_sender)
    sender = await partners.answered(senders.of(details["organizer_id"], details["company_id"]))
    async with transaction(pool) as conn:
        await lock_event(conn, actor, found["event_id"])  # the fence: foreign is missing
        locked = await lock_event_by_id(conn, found["event_id"])
        event = {**await read_event(conn, found["event_id"]), **locked}
        await lock_scope(conn, found["event_slot_id"], found["event_ticket_id"])
        entry = await read_entry(conn, entry_id, lock=True)
        if entry["status"] != "waiting":
            raise errors.WaitlistEntryNotWaiting(status=entry["status"])
        if not open_for_offers(event):
            raise errors.RegistrationsClosed()
        settings = await read_settings(conn, entry["event_id"])
        served = await make_offers(conn, ports, options, event, settings, [entry], sender, now)
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
