"""Public routes (capability-carried, throttled, no actor) and the admin minting routes."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Request, Response, status

from events_svc import errors
from events_svc.actors import Actor
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
from events_svc.routes.deps import Ctx, ServiceContext, answer, require
from events_svc.verbs import public as verbs

router = APIRouter(tags=["public"])
intake_router = APIRouter(tags=["public"])
mint_router = APIRouter(tags=["capabilities"])

Mint = Annotated[Actor, require("capability:mint")]


async def _guard(ctx: ServiceContext, request: Request, scope: str, key: str) -> None:
    """Throttle first (every public request counts), then the secret (503 when unset)."""
    if ctx.throttle is not None:
        await ctx.throttle.check(request, scope, key)
    if not ctx.codec.configured:
        raise errors.CapabilitySecretNotConfigured()


def _url(request: Request, name: str, capability: str) -> str:
    return str(request.url_for(name, capability=capability))


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
    await _guard(ctx, request, "ics", capability)
    body = await verbs.calendar(ctx.db(), ctx.codec, capability, ctx.clock())
    return Response(
        body,
        media_type="text/calendar; charset=utf-8",
        headers={"Content-Disposition": 'attachment; filename="event.ics"'},
    )


@router.get(
    f"{MY_TICKETS_PATH}/{{capability}}", name="public_my_tickets", response_model=MyTicketsView
)
async def public_my_tickets(ctx: Ctx, request: Request, capability: str) -> Response:
    await _guard(ctx, request, "my-tickets", capability)
    view = await verbs.my_tickets(
        ctx.db(), ctx.codec, capability, ctx.clock(), ctx.settings.ics_ttl_s
    )
    for item in view["registrations"]:
        item["ics_url"] = _url(request, "public_ics", item.pop("ics_token"))
    return answer(MyTicketsView, view)


@intake_router.post(
    "/intake/{event_id_or_capability}",
    status_code=status.HTTP_201_CREATED,
    response_model=IntakeAnswer,
)
async def public_intake(
    ctx: Ctx, request: Request, event_id_or_capability: str, body: IntakeBody
) -> Response:
    """Register attendees through the one register verb (the intake allowlist in front)."""
    await _guard(ctx, request, "intake", event_id_or_capability)
    if ctx.throttle is not None:
        for attendee in body.attendees:
            await ctx.throttle.check_email(attendee.email)
    attendees = [AttendeeInput.model_validate(a.model_dump()) for a in body.attendees]
    try:
        result, token = await verbs.register_intake(
            ctx.db(),
            ctx.codec,
            event_id_or_capability,
            attendees,
            ctx.clock(),
            ticket_id=body.event_ticket_id,
            slot_id=body.event_slot_id,
        )
    except errors.DomainError as refused:
        ctx.metrics.observe_registration(refused.code, len(attendees))
        raise
    ctx.metrics.observe_registration("created", len(attendees))
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
    if not ctx.codec.configured:
        raise errors.CapabilitySecretNotConfigured()
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
    ctx: Ctx, actor: Mint, request: Request, event_id: UUID, body: MyTicketsMint
) -> Response:
    if not ctx.codec.configured:
        raise errors.CapabilitySecretNotConfigured()
    token = await verbs.mint_my_tickets(ctx.db(), actor, ctx.codec, event_id, body.registration_ids)
    link = {"token": token, "url": _url(request, "public_my_tickets", token), "expires_at": None}
    return answer(CapabilityView, link)


@mint_router.post("/admin/events/{event_id}/capabilities/intake", response_model=CapabilityView)
async def mint_intake(
    ctx: Ctx, actor: Mint, request: Request, event_id: UUID, body: IntakeMint | None = None
) -> Response:
    if not ctx.codec.configured:
        raise errors.CapabilitySecretNotConfigured()
    spec = body or IntakeMint()
    token, expires = await verbs.mint_intake(
        ctx.db(),
        actor,
        ctx.codec,
        event_id,
        spec.ttl_seconds or ctx.settings.intake_ttl_s,
        ctx.clock(),
    )
    url = str(request.url_for("public_intake", event_id_or_capability=token))
    return answer(CapabilityView, {"token": token, "url": url, "expires_at": expires})
