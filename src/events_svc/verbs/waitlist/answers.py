"""The answers to an offer: the person's accept and decline, and an operator's removal.

Accepting turns the offer's drafts into `open` through the one state transition (armed
like any new attendee); declining and an operator's removal close the entry and release a
held offer (its drafts cancelled, their seats freed, the offer pass woken). Every deadline
is read against the database's clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import capabilities, errors
from events_svc.actors import Actor
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Connection, Pool, must, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.fence import lock_event
from events_svc.verbs.registrations import (
    lock_event_by_id,
    lock_registration,
    lock_scope,
    write_state,
)
from events_svc.verbs.waitlist.entries import open_link, public_status
from events_svc.verbs.waitlist.offering import WAITLIST_ACTOR, record_entry_facts, release_offer
from events_svc.verbs.waitlist.records import entry_view, find_entry, position_of, read_entry

_CLOSE = """
UPDATE event.waitlist_entry w
SET status = $2::event.waitlist_status, decided_at = clock_timestamp(),
    updated_at = clock_timestamp()
WHERE w.id = $1
RETURNING w.*
"""
_DB_NOW = "SELECT clock_timestamp()"


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
        await release_offer(conn, event, list(entry["registration_ids"]), reason, now)
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
            await record_entry_facts(conn, [entry_id], "waitlist.accepted", now)
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
    return view, capabilities.mint_tickets(codec, event_id, list(entry["registration_ids"]))


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
