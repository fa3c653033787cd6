"""Capability links minted by operators: a calendar link, a my-tickets link, a private
registration link. Each checks the event against the actor's company fence, mints through
the one codec's typed helpers (`events_svc.capabilities`) and writes one audit row (the
token is never stored, nor logged).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from events_svc import capabilities, errors
from events_svc.actors import Actor
from events_svc.capabilities import ICS, INTAKE, MY_TICKETS, CapabilityCodec
from events_svc.db import Pool, connection, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.fence import get_event_row

_SLOT = "SELECT id FROM event.slots WHERE id = $1 AND event_id = $2"
_OWN_REGISTRATIONS = """
SELECT count(*) FROM event.registrations WHERE id = ANY($1::uuid[]) AND event_id = $2
"""


async def _audit_mint(pool: Pool, actor: Actor, event_id: UUID, summary: dict[str, Any]) -> None:
    async with transaction(pool) as conn:
        await write_audit(
            conn, actor, "capability_minted", "event", event_id, event_id=event_id, summary=summary
        )


async def mint_ics(
    pool: Pool,
    actor: Actor,
    codec: CapabilityCodec,
    event_id: UUID,
    slot_id: UUID | None,
    ttl_s: int,
    now: datetime,
) -> tuple[str, datetime]:
    """A calendar link for an event (or one of its slots); the token is never stored."""
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        if slot_id is not None and await conn.fetchrow(_SLOT, slot_id, event_id) is None:
            raise errors.SlotNotInEvent(field="slot_id")
    expires = now + timedelta(seconds=ttl_s)
    token = capabilities.mint_ics(codec, event_id, slot_id, expires)
    await _audit_mint(
        pool,
        actor,
        event_id,
        {"purpose": ICS, "expires_at": expires.isoformat(), "slot": slot_id is not None},
    )
    return token, expires


async def mint_my_tickets(
    pool: Pool, actor: Actor, codec: CapabilityCodec, event_id: UUID, registration_ids: list[UUID]
) -> str:
    """A never-expiring link to the tickets of these registrations (all of this event).
    The link shows their full names, so minting it needs `registration:pii` (403
    missing_scope, before anything is read; the route asks it too) and the audit row
    names the registrations it discloses."""
    if not actor.has("registration:pii"):
        raise errors.MissingScope(
            "A my-tickets link shows full names: it needs the registration:pii scope.",
            scope="registration:pii",
        )
    ids = sorted(set(registration_ids))
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
        if await conn.fetchval(_OWN_REGISTRATIONS, ids, event_id) != len(ids):
            raise errors.RegistrationNotInEvent(field="registration_ids")
    token = capabilities.mint_tickets(codec, event_id, ids)
    summary = {"purpose": MY_TICKETS, "registrations": len(ids), "ids": [str(i) for i in ids]}
    await _audit_mint(pool, actor, event_id, summary)
    return token


async def mint_intake(
    pool: Pool, actor: Actor, codec: CapabilityCodec, event_id: UUID, ttl_s: int, now: datetime
) -> tuple[str, datetime]:
    """A private registration link: it also admits an unpublished event."""
    async with connection(pool) as conn:
        await get_event_row(conn, actor, event_id)
    expires = now + timedelta(seconds=ttl_s)
    token = capabilities.mint_intake(codec, event_id, expires)
    await _audit_mint(pool, actor, event_id, {"purpose": INTAKE, "expires_at": expires.isoformat()})
    return token, expires
