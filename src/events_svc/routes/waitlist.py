"""The waiting list's routes: joining (beside the intake, behind its throttles), the
entry's link (status, accept, decline: JSON, or a page and form posts for a browser),
and the operators' settings, list, offer out of turn and removal.

The link's page is `pages.render_entry` (autoescaped, inline CSS, no script, nothing
fetched). Its buttons post to the accept and decline routes; a browser's post is
answered with a redirect (303) to the tickets page after an accept, or back to the link's
page otherwise (a refusal included: the page then says what happened).
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse

from events_svc import errors
from events_svc.actors import Actor
from events_svc.links import WAITLIST_PATH
from events_svc.loops import offer_options
from events_svc.models import (
    Page,
    WaitlistEntryView,
    WaitlistJoin,
    WaitlistJoined,
    WaitlistSettingsBody,
    WaitlistSettingsView,
    WaitlistStatusView,
)
from events_svc.pages import PAGE_POLICY, render_entry
from events_svc.routes.deps import (
    Ctx,
    Cursor,
    Limit,
    PiiMode,
    ServiceContext,
    answer,
    pii_full,
    require,
    route_url,
)
from events_svc.routes.public import GuardedIntakeRoute, event_key, secret_set, wants_page
from events_svc.verbs import waitlist as verbs

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
People = Annotated[Actor, require("registration:read")]
Offer = Annotated[Actor, require("registration:write")]
Status = Annotated[
    str | None,
    Query(pattern="^(waiting|offered|accepted|declined|expired|removed)$"),
]

router = APIRouter(tags=["waitlist"])  # the admin routes
public_router = APIRouter(tags=["public"])
intake_router = APIRouter(tags=["public"], route_class=GuardedIntakeRoute)


def _link(request: Request, name: str, capability: str) -> str:
    return route_url(request, name, capability=capability)


# --- joining ---------------------------------------------------------------------------


async def join_through_intake(
    ctx: ServiceContext, key: str, body: WaitlistJoin
) -> tuple[dict[str, Any], str]:
    """A join, for the JSON route and the event page's form alike: the email's window, and
    by event id the event's ceiling (a join counts as one registration), tested before
    the verb and counting only an accepted join. Answers the entry and its link's token."""
    by_id = event_key(key)
    if ctx.throttle is not None:
        await ctx.throttle.admit_intake([body.email], by_id, 1)  # a join counts as one
    entry, token = await verbs.join(ctx.db(), ctx.codec, key, body.model_dump(), ctx.clock())
    if ctx.throttle is not None:
        await ctx.throttle.count_accepted([body.email], by_id, 1)
    return entry, token


@intake_router.post(
    "/intake/{event_id_or_capability}/waitlist",
    status_code=status.HTTP_201_CREATED,
    response_model=WaitlistJoined,
)
async def join_waitlist(
    ctx: Ctx, request: Request, event_id_or_capability: str, body: WaitlistJoin
) -> Response:
    """A place in the queue of the request's event, ticket and slot, with its link
    (`status_url`). Throttled like the intake: the client or link window, then
    `join_through_intake`."""
    entry, token = await join_through_intake(ctx, event_id_or_capability, body)
    joined = {
        "waitlist_entry_id": entry["id"],
        "status": entry["status"],
        "position": entry["position"],
        "status_url": _link(request, "public_waitlist", token),
    }
    return answer(WaitlistJoined, joined, status_code=201)


# --- the entry's link --------------------------------------------------------------------


async def _guard(ctx: Any, request: Request, capability: str) -> None:
    if ctx.throttle is not None:  # one person's link: one window, whoever sends
        await ctx.throttle.check_link(request, "waitlist", capability)
    secret_set(ctx)


@public_router.get(
    f"{WAITLIST_PATH}/{{capability}}",
    name="public_waitlist",
    response_model=WaitlistStatusView,
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}},
)
async def waitlist_status(
    ctx: Ctx,
    request: Request,
    capability: str,
    format: Annotated[str | None, Query(max_length=16)] = None,
    choice: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    """The entry's status and position (JSON), or its page for a browser."""
    await _guard(ctx, request, capability)
    view, tickets = await verbs.entry_status(ctx.db(), ctx.codec, capability, ctx.clock())
    view["my_tickets_url"] = _link(request, "public_my_tickets", tickets) if tickets else None
    if wants_page(request, format):
        urls = {
            "accept_url": _link(request, "public_waitlist_accept", capability),
            "decline_url": _link(request, "public_waitlist_decline", capability),
            "tickets_url": view["my_tickets_url"],
        }
        page = await render_entry(view, urls, choice)
        headers = {"Content-Security-Policy": PAGE_POLICY, "Vary": "Accept"}
        return HTMLResponse(page, headers=headers)
    response = answer(WaitlistStatusView, view)
    response.headers["Vary"] = "Accept"
    return response


def _back(request: Request, capability: str) -> Response:
    return RedirectResponse(_link(request, "public_waitlist", capability), status_code=303)


@public_router.post(
    f"{WAITLIST_PATH}/{{capability}}/accept",
    name="public_waitlist_accept",
    response_model=WaitlistStatusView,
    responses={410: {"description": "waitlist_offer_expired"}},
)
async def accept_offer(ctx: Ctx, request: Request, capability: str) -> Response:
    """The held registrations become `open`; 410 `waitlist_offer_expired` after the
    deadline; twice: the same answer. A browser is sent to its tickets page."""
    await _guard(ctx, request, capability)
    browser = wants_page(request, None)
    try:
        view, tickets = await verbs.accept(ctx.db(), ctx.codec, capability, ctx.clock())
    except errors.DomainError as refused:
        if browser and refused.status in (409, 410):
            return _back(request, capability)
        raise
    view["my_tickets_url"] = _link(request, "public_my_tickets", tickets)
    if browser:
        return RedirectResponse(view["my_tickets_url"], status_code=303)
    return answer(WaitlistStatusView, view)


@public_router.post(
    f"{WAITLIST_PATH}/{{capability}}/decline",
    name="public_waitlist_decline",
    response_model=WaitlistStatusView,
)
async def decline_offer(ctx: Ctx, request: Request, capability: str) -> Response:
    """Decline the offer (its seats go to the next entry) or leave the queue."""
    await _guard(ctx, request, capability)
    browser = wants_page(request, None)
    try:
        view = await verbs.decline(ctx.db(), ctx.codec, capability, ctx.clock())
    except errors.DomainError as refused:
        if browser and refused.status == 409:
            return _back(request, capability)
        raise
    if browser:
        return _back(request, capability)
    return answer(WaitlistStatusView, view)


# --- operators ---------------------------------------------------------------------------


@router.get("/admin/events/{event_id}/waitlist-settings", response_model=WaitlistSettingsView)
async def get_waitlist_settings(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    return answer(WaitlistSettingsView, await verbs.get_settings(ctx.db(), actor, event_id))


@router.put("/admin/events/{event_id}/waitlist-settings", response_model=WaitlistSettingsView)
async def put_waitlist_settings(
    ctx: Ctx, actor: Write, event_id: UUID, body: WaitlistSettingsBody
) -> Response:
    """Replace the settings (an omitted field takes its default); audited."""
    saved = await verbs.put_settings(
        ctx.db(),
        ctx.ports.template_renderer,
        actor,
        event_id,
        body.model_dump(),
        ctx.clock(),
    )
    return answer(WaitlistSettingsView, saved)


@router.get("/admin/events/{event_id}/waitlist", response_model=Page[WaitlistEntryView])
async def list_waitlist(
    ctx: Ctx,
    actor: People,
    event_id: UUID,
    status: Status = None,
    pii: PiiMode = "masked",
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    """The entries in queue order, masked like registrations unless `pii=full`."""
    page = await verbs.list_entries(
        ctx.db(),
        actor,
        event_id,
        status=status,
        cursor=cursor,
        limit=limit,
        pii_full=pii_full(actor, pii),
    )
    return answer(Page[WaitlistEntryView], page)


@router.post("/admin/waitlist/{entry_id}/offer", response_model=WaitlistEntryView)
async def offer_waitlist_entry(ctx: Ctx, actor: Offer, entry_id: UUID) -> Response:
    """Offer seats to a waiting entry now, out of turn (409 `event_seats_exhausted` when
    its seats are not free)."""
    entry = await verbs.offer_now(
        ctx.db(), ctx.ports, offer_options(ctx.settings), actor, entry_id, ctx.clock()
    )
    return answer(WaitlistEntryView, entry)


@router.delete("/admin/waitlist/{entry_id}", response_model=WaitlistEntryView)
async def remove_waitlist_entry(ctx: Ctx, actor: Offer, entry_id: UUID) -> Response:
    """Take an entry off the list (`removed`; a held offer is released)."""
    return answer(
        WaitlistEntryView, await verbs.remove_entry(ctx.db(), actor, entry_id, ctx.clock())
    )
