"""Public routes (capability-carried, throttled, no actor) and the admin minting routes.

Throttles (`events_svc.throttle`): a calendar link is counted per client (it opens a
published event's calendar, a shared public document); a my-tickets or private intake
link per link (it is one person's); the intake by event id per client IP, and, like
every intake, per email and (by id) against the event's safety ceiling, both counting
accepted registrations only: no window every client shares fills with refusals. The
intake's client and link windows count before its body is even read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from events_svc import errors
from events_svc.actors import Actor
from events_svc.documents import Slot, render_off_loop
from events_svc.links import ICS_PATH, MY_TICKETS_PATH
from events_svc.models import (
    PUBLIC_ERRORS,
    AttendeeInput,
    CapabilityView,
    IcsMint,
    IntakeAnswer,
    IntakeBody,
    IntakeMint,
    MyTicketsMint,
    MyTicketsView,
    json_error_responses,
)
from events_svc.pages import PAGE_POLICY, render_tickets
from events_svc.routes.deps import (
    Ctx,
    ServiceContext,
    answer,
    require,
    route_url,
    service_context,
)
from events_svc.verbs import public as verbs
from events_svc.verbs.registrations import Registered

Mint = Annotated[Actor, require("capability:mint")]
# a my-tickets link shows its attendees' full names: minting one is a PII disclosure
Pii = Annotated[Actor, require("registration:pii")]


def secret_set(ctx: ServiceContext) -> None:
    if not ctx.codec.configured:
        raise errors.CapabilitySecretNotConfigured()


def event_key(key: str) -> UUID | None:
    """The event id of an intake by event id (parsed as the verb parses it); None for a
    capability."""
    try:
        return UUID(key)
    except ValueError:
        return None


async def _guard_intake(request: Request) -> None:
    ctx = service_context(request)
    await count_intake_request(
        ctx, request, str(request.path_params.get("event_id_or_capability", ""))
    )


async def count_intake_request(ctx: ServiceContext, request: Request, key: str) -> None:
    """The intake's throttles before anything else (every request counts against its
    client; a private link's requests against the link), then the secret (503 unset):
    the JSON intake's and the event page's forms'."""
    if ctx.throttle is not None:
        if event_key(key) is not None:
            await ctx.throttle.check_client(request, "intake")
        else:
            await ctx.throttle.check_link(request, "intake", key)
    secret_set(ctx)


class GuardedIntakeRoute(APIRoute):
    """The intake's route: `_guard_intake` runs before the body is read and parsed, so
    malformed bodies count against their client's window like any other request."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            await _guard_intake(request)
            return await handler(request)

        return guarded


router = APIRouter(tags=["public"])
intake_router = APIRouter(tags=["public"], route_class=GuardedIntakeRoute)
mint_router = APIRouter(tags=["capabilities"])


def _url(request: Request, name: str, capability: str) -> str:
    return route_url(request, name, capability=capability)


class CalendarResponse(Response):
    media_type = "text/calendar"


# Capabilities are not bounded in the schema on purpose: an overlong token is one more
# tampered link, answered by the uniform 404 after the throttle counted it.
@router.get(
    f"{ICS_PATH}/{{capability}}",
    name="public_ics",
    response_class=CalendarResponse,
    responses={
        200: {"description": "The event's iCalendar document (event.ics)"},
        **json_error_responses(*PUBLIC_ERRORS),
    },
)
async def public_ics(ctx: Ctx, request: Request, capability: str) -> Response:
    if ctx.throttle is not None:  # a shared public link: its window is per client
        await ctx.throttle.check_public_link(request, "ics", capability)
    secret_set(ctx)
    body = await verbs.calendar(ctx.db(), ctx.codec, capability, ctx.clock())
    return Response(
        body,
        media_type="text/calendar; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="event.ics"'},
    )


def _quality(accept: str, media: str) -> float:
    """How much the Accept header wants `media` (its q; 0 when absent)."""
    best = 0.0
    for part in accept.lower().split(",")[:50]:
        kind, *params = (p.strip() for p in part.split(";"))
        if kind != media:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = max(0.0, min(1.0, float(value)))
                except ValueError:
                    q = 0.0
        best = max(best, q)
    return best


def wants_page(request: Request, format: str | None) -> bool:
    """A browser asking for HTML (at least as much as for JSON) gets the page; any other
    client, or `?format=json`, the JSON."""
    if format == "json":
        return False
    accept = request.headers.get("accept", "")
    html = _quality(accept, "text/html")
    return html > 0 and html >= _quality(accept, "application/json")


@router.get(
    f"{MY_TICKETS_PATH}/{{capability}}",
    name="public_my_tickets",
    response_model=MyTicketsView,
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}},
)
async def public_my_tickets(
    ctx: Ctx,
    request: Request,
    capability: str,
    format: Annotated[str | None, Query(max_length=16)] = None,
) -> Response:
    """The attendee's tickets: an HTML page for a browser (`Accept: text/html`), the JSON
    otherwise or with `?format=json`."""
    if ctx.throttle is not None:  # one person's link: one window, whoever sends
        await ctx.throttle.check_link(request, "my-tickets", capability)
    secret_set(ctx)
    view = await verbs.my_tickets(
        ctx.db(), ctx.codec, capability, ctx.clock(), ctx.settings.ics_ttl_s
    )
    for item in view["registrations"]:
        item["ics_url"] = _url(request, "public_ics", item.pop("ics_token"))
    event_ics = view.pop("ics_token")
    view["ics_url"] = _url(request, "public_ics", event_ics) if event_ics else None
    view["tickets_pdf_url"] = _url(request, "public_my_tickets_pdf", capability)
    if wants_page(request, format):
        page = await render_tickets(view, view["ics_url"], view["tickets_pdf_url"])
        headers = {"Content-Security-Policy": PAGE_POLICY, "Vary": "Accept"}
        return HTMLResponse(page, headers=headers)
    response = answer(MyTicketsView, view)
    response.headers["Vary"] = "Accept"
    return response


class PdfResponse(Response):
    media_type = "application/pdf"


class HeldPdf(PdfResponse):
    """A rendered PDF that holds its document place until its last byte is sent (or the
    sending fails), then gives it back."""

    def __init__(self, body: bytes, slot: Slot, headers: dict[str, str]) -> None:
        super().__init__(body, media_type="application/pdf", headers=headers)
        self.slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


@router.get(
    f"{MY_TICKETS_PATH}/{{capability}}/tickets.pdf",
    name="public_my_tickets_pdf",
    response_class=PdfResponse,
    responses={
        200: {"description": "One A6 page per open or done registration of the link"},
        **json_error_responses(*PUBLIC_ERRORS),
        503: {
            **json_error_responses(503)[503],
            "description": "documents_busy: no place to render the PDF within 10 s "
            "(Retry-After); busy, database_unavailable, or no capability secret",
        },
    },
)
async def public_tickets_pdf(ctx: Ctx, request: Request, capability: str) -> Response:
    """The link's tickets to print (404 `no_active_tickets` when none is left); the link
    is checked first, then the PDF takes a place in the process's document bound (503
    `documents_busy` when none frees up within 10 s) until its last byte is sent."""
    if ctx.throttle is not None:  # the same window as the link's page
        await ctx.throttle.check_link(request, "my-tickets", capability)
    secret_set(ctx)
    pages, title = await verbs.link_tickets(ctx.db(), ctx.codec, capability, ctx.clock())
    slot = await ctx.documents.place()
    render = asyncio.ensure_future(render_off_loop(pages, title=title))
    try:
        body = await asyncio.shield(render)
    except BaseException:
        if not render.done():  # a request cancelled: its thread renders on, then the place
            await asyncio.wait({render})
        slot.release()
        raise
    return HeldPdf(body, slot, {"Content-Disposition": 'inline; filename="tickets.pdf"'})


async def register_through_intake(
    ctx: ServiceContext,
    key: str,
    attendees: list[AttendeeInput],
    ticket_id: UUID | None,
    slot_id: UUID | None,
) -> tuple[Registered, str]:
    """The intake's registration, for the JSON route and the event page's form alike: the
    email windows and, by event id, the event's ceiling tested before the one register
    verb (behind the intake's door) and counting only what it accepted. Answers the rows
    and their my-tickets token."""
    by_id = event_key(key)
    emails = [a.email for a in attendees]
    if ctx.throttle is not None:
        await ctx.throttle.admit_intake(emails, by_id, len(emails))
    try:
        result, token = await verbs.register_intake(
            ctx.db(), ctx.codec, key, attendees, ctx.clock(), ticket_id=ticket_id, slot_id=slot_id
        )
    except errors.DomainError as refused:
        ctx.metrics.observe_registration(refused.code, len(attendees))
        raise
    ctx.metrics.observe_registration("created", len(attendees))
    if ctx.throttle is not None:
        await ctx.throttle.count_accepted(emails, by_id, len(result.registrations))
    return result, token


@intake_router.post(
    "/intake/{event_id_or_capability}",
    status_code=status.HTTP_201_CREATED,
    response_model=IntakeAnswer,
)
async def public_intake(
    ctx: Ctx, request: Request, event_id_or_capability: str, body: IntakeBody
) -> Response:
    """Register attendees through the one register verb (the intake allowlist in front).
    The client and link windows have counted (`GuardedIntakeRoute`); then
    `register_through_intake`."""
    attendees = [AttendeeInput.model_validate(a.model_dump()) for a in body.attendees]
    result, token = await register_through_intake(
        ctx, event_id_or_capability, attendees, body.event_ticket_id, body.event_slot_id
    )
    first = result.registrations[0]
    intake = {
        "registration_id": first["id"],
        "state": first["state"],
        "registrations": [
            {"registration_id": r["id"], "state": r["state"]} for r in result.registrations
        ],
        "my_tickets_url": _url(request, "public_my_tickets", token),
    }
    return answer(IntakeAnswer, intake, status_code=201)


@mint_router.post("/admin/events/{event_id}/capabilities/ics", response_model=CapabilityView)
async def mint_ics(
    ctx: Ctx, actor: Mint, request: Request, event_id: UUID, body: IcsMint | None = None
) -> Response:
    secret_set(ctx)
    spec = body or IcsMint()
    token, expires = await verbs.mint_ics(
        ctx.db(),
        actor,
        ctx.codec,
        event_id,
        spec.slot_id,
        spec.ttl_seconds or ctx.settings.ics_ttl_s,
        ctx.clock(),
    )
    link = {"token": token, "url": _url(request, "public_ics", token), "expires_at": expires}
    return answer(CapabilityView, link)


@mint_router.post("/admin/events/{event_id}/capabilities/my-tickets", response_model=CapabilityView)
async def mint_my_tickets(
    ctx: Ctx, actor: Mint, _: Pii, request: Request, event_id: UUID, body: MyTicketsMint
) -> Response:
    """Needs `capability:mint` AND `registration:pii` (the link shows full names);
    audited like every mint."""
    secret_set(ctx)
    token = await verbs.mint_my_tickets(ctx.db(), actor, ctx.codec, event_id, body.registration_ids)
    link = {"token": token, "url": _url(request, "public_my_tickets", token), "expires_at": None}
    return answer(CapabilityView, link)


@mint_router.post("/admin/events/{event_id}/capabilities/intake", response_model=CapabilityView)
async def mint_intake(
    ctx: Ctx, actor: Mint, request: Request, event_id: UUID, body: IntakeMint | None = None
) -> Response:
    secret_set(ctx)
    spec = body or IntakeMint()
    token, expires = await verbs.mint_intake(
        ctx.db(),
        actor,
        ctx.codec,
        event_id,
        spec.ttl_seconds or ctx.settings.intake_ttl_s,
        ctx.clock(),
    )
    url = route_url(request, "public_intake", event_id_or_capability=token)
    return answer(CapabilityView, {"token": token, "url": url, "expires_at": expires})
