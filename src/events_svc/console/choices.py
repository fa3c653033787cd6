"""The one event picker of the console's pages (registrations, desk, outbox): the events
the operator may list, through the events list verb as GET /admin/events, or None when the
operator lacks `event:read` (the page then asks for the event's id)."""

from __future__ import annotations

from contextlib import suppress
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.routes.deps import ServiceContext
from events_svc.verbs.events import get_event, list_events

EVENT_CHOICES = 200  # the events list verb's largest page


async def event_choices(
    ctx: ServiceContext, actor: Actor, chosen: UUID | None = None, *, upcoming: bool = False
) -> list[tuple[str, str]] | None:
    """The picker's options, a blank one first: each event as "name (first day)", by start;
    `upcoming` keeps the events not yet ended (a desk's). A chosen event the list does not
    hold (past, or beyond the first page) is added when the operator can see it."""
    if not actor.has("event:read"):
        return None
    now = ctx.clock()
    since = now if upcoming else None
    listed = await list_events(ctx.db(), actor, now, date_from=since, limit=EVENT_CHOICES)
    events = list(listed["items"])
    if chosen is not None and all(e["id"] != chosen for e in events):
        with suppress(errors.NotFound):  # an id the operator cannot see: the page says so
            events.insert(0, await get_event(ctx.db(), actor, chosen, now))
    return [("", "Choose an event")] + [
        (str(e["id"]), f"{e['name']} ({e['date_begin']:%Y-%m-%d})") for e in events
    ]
