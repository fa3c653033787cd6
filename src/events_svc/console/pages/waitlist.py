"""The waiting list's console routes: the event's settings form, and an entry's offer out
of turn and removal. Each does what its admin route does, through the same verb
(`put_settings`: PUT /admin/events/{id}/waitlist-settings; `offer_now`: POST
/admin/waitlist/{id}/offer; `remove_entry`: DELETE /admin/waitlist/{id}), and answers
the event's page (`events.detail_page`): a refusal shows there with the values kept. The
section of that page (settings, entries, masked) is `waitlist_section`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.pages import waitlist_section as section
from events_svc.console.pages.events import FORM_REFUSALS, Write, act, detail_page
from events_svc.console.web import Form, Posted, StudioCtx, needs, refusal_errors, see_other
from events_svc.loops import offer_options
from events_svc.models import WaitlistSettingsBody
from events_svc.routes.deps import ServiceContext
from events_svc.verbs import waitlist as verbs

router = APIRouter()

WaitlistWrite = Annotated[Actor, needs("registration:write")]


@router.post("/events/{event_id}/waitlist-settings")
async def waitlist_settings(
    request: Request, ctx: StudioCtx, actor: Write, event_id: UUID, form: Posted
) -> Any:
    """PUT /admin/events/{id}/waitlist-settings with the form's fields (the body model's
    checks, then the verb's); a refusal shows on the detail, the values kept."""
    typed = section.settings_values(form)
    try:
        body = WaitlistSettingsBody.model_validate(typed)
    except ValidationError as exc:
        return await detail_page(
            request,
            ctx,
            actor,
            event_id,
            problems=section.settings_problems(exc),
            status_code=422,
            waitlist_typed=typed,
        )
    return await act(
        request,
        ctx,
        actor,
        event_id,
        lambda: verbs.put_settings(
            ctx.db(),
            ctx.ports.template_renderer,
            actor,
            event_id,
            body.model_dump(),
            ctx.clock(),
        ),
        "waitlist_saved",
        waitlist_typed=typed,
    )


EntryVerb = Callable[[], Awaitable[dict[str, Any]]]


async def entry_action(
    request: Request, ctx: ServiceContext, actor: Actor, form: Form, verb: EntryVerb, done: str
) -> Any:
    """Run an entry's verb; back to its event's page and the same view of the list. A
    refusal shows on the page the form was sent from (its hidden `event_id`); a 404 (an
    entry that does not exist, or another company's) is the error page."""
    query = section.list_query(form.values)
    try:
        entry = await verb()
    except errors.DomainError as exc:
        back = section.event_of(form)
        if exc.status not in FORM_REFUSALS or back is None or not actor.has("event:read"):
            raise
        return await detail_page(
            request,
            ctx,
            actor,
            back,
            problems=refusal_errors(exc),
            status_code=exc.status,
            waitlist_query=query,
        )
    return see_other(request, f"/events/{entry['event_id']}", done=done, **query.kept())


@router.post("/waitlist/{entry_id}/offer")
async def waitlist_offer(
    request: Request, ctx: StudioCtx, actor: WaitlistWrite, entry_id: UUID, form: Posted
) -> Any:
    """POST /admin/waitlist/{id}/offer: the entry's seats are offered now, out of turn
    (409 `event_seats_exhausted` when they are not free)."""
    return await entry_action(
        request,
        ctx,
        actor,
        form,
        lambda: verbs.offer_now(
            ctx.db(), ctx.ports, offer_options(ctx.settings), actor, entry_id, ctx.clock()
        ),
        "waitlist_offered",
    )


@router.post("/waitlist/{entry_id}/remove")
async def waitlist_remove(
    request: Request, ctx: StudioCtx, actor: WaitlistWrite, entry_id: UUID, form: Posted
) -> Any:
    """DELETE /admin/waitlist/{id}: the entry is taken off the list (a held offer is
    released)."""
    return await entry_action(
        request,
        ctx,
        actor,
        form,
        lambda: verbs.remove_entry(ctx.db(), actor, entry_id, ctx.clock()),
        "waitlist_removed",
    )
