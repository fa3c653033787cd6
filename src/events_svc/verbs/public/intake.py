"""What a public intake may register for, and the guarded intake itself: the event a
request's path names (by id, published and open; or by a private registration link), then
the ONE register verb as the `public-intake` actor, mandatory answers enforced.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import capabilities, errors
from events_svc.actors import Actor
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connection
from events_svc.models import AttendeeInput
from events_svc.verbs.events import closed_to_registrations, is_visible
from events_svc.verbs.public.reads import EVENT
from events_svc.verbs.registrations import Registered, register

PUBLIC_INTAKE = Actor(id="public-intake", kind="public")


def intake_key(codec: CapabilityCodec, key: str, now: datetime) -> tuple[UUID, bool]:
    """(the event id, whether a private intake link named it) of an intake's path key."""
    try:
        return UUID(key), False
    except ValueError:
        event_id = capabilities.open_intake(codec, key, now)
        if event_id is None:
            raise errors.EventNotPublished() from None
        return event_id, True


def check_admitted(event: Any, by_capability: bool, now: datetime) -> None:
    """The intake's door, as the event's page: a missing or archived event, or (by id) one
    that is not published, is the uniform 404 (a private intake link still admits an
    unpublished event); then a cancelled or finished one is 409
    `event_registrations_closed`. `event` needs `active`, `kanban_state`, `date_end`,
    `is_published`, `date_publish`."""
    if event is None or not event["active"]:
        raise errors.EventNotPublished()
    if not by_capability and not is_visible(dict(event), now):
        raise errors.EventNotPublished()
    if closed_to_registrations(event, now) is not None:
        raise errors.RegistrationsClosed()


async def intake_event(pool: Pool, codec: CapabilityCodec, key: str, now: datetime) -> UUID:
    """The event an intake request registers for: by id (published, open) or by capability."""
    event_id, by_capability = intake_key(codec, key, now)
    async with connection(pool) as conn:
        event = await conn.fetchrow(EVENT, event_id)
    check_admitted(event, by_capability, now)
    return event_id


async def register_intake(
    pool: Pool,
    codec: CapabilityCodec,
    key: str,
    attendees: list[AttendeeInput],
    now: datetime,
    *,
    ticket_id: UUID | None = None,
    slot_id: UUID | None = None,
) -> tuple[Registered, str]:
    """The guarded intake: the event `key` admits (`intake_event`), then the ONE register
    verb, acting as `public-intake`, mandatory answers enforced. Answers the new rows and
    the my-tickets token of all of them."""
    event_id = await intake_event(pool, codec, key, now)
    result = await register(
        pool,
        PUBLIC_INTAKE,
        event_id,
        attendees,
        now,
        slot_id=slot_id,
        ticket_id=ticket_id,
        source="intake",
        require_mandatory=True,
    )
    tickets = capabilities.mint_tickets(codec, event_id, [r["id"] for r in result.registrations])
    return result, tickets
