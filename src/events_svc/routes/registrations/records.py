"""Admin routes for registrations: the register verb, reads and counts, the state verbs,
archiving and the partner sync (the reasoned commands are `corrections`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Response, status

from events_svc import errors
from events_svc.actors import Actor
from events_svc.models import Page, RegistrationCounts, RegistrationCreate, RegistrationView
from events_svc.routes.deps import (
    BarcodeText,
    Ctx,
    Cursor,
    IfMatch,
    Limit,
    PiiMode,
    SearchText,
    answer,
    no_nul,
    pii_full,
    require,
)
from events_svc.verbs.pii import mask_registration
from events_svc.verbs.registrations import records as verbs
from events_svc.verbs.registrations import register, states

router = APIRouter(tags=["registrations"])

Read = Annotated[Actor, require("registration:read")]
Write = Annotated[Actor, require("registration:write")]


def _answer(view: dict[str, Any], full: bool, status_code: int = 200) -> Response:
    shown = view if full else mask_registration(view)
    return answer(RegistrationView, shown, status_code=status_code, etag=view["version"])


@router.post(
    "/admin/registrations", status_code=status.HTTP_201_CREATED, response_model=RegistrationView
)
async def create_registration(
    ctx: Ctx, actor: Write, body: RegistrationCreate, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    try:
        # the body is an AttendeeInput already: no second validation on the hot path
        result = await register(
            ctx.db(),
            actor,
            body.event_id,
            [body],
            ctx.clock(),
            slot_id=body.event_slot_id,
            ticket_id=body.event_ticket_id,
            partner_id=body.partner_id,
        )
    except errors.DomainError as refused:
        ctx.metrics.observe_registration(refused.code)
        raise
    ctx.metrics.observe_registration("created")
    return _answer(result.registrations[0], full, status_code=201)


@router.get("/admin/registrations", response_model=Page[RegistrationView])
async def list_registrations(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    sale_order_id: UUID | None = None,
    state: verbs.State | None = None,
    active: bool | None = None,
    q: SearchText = None,
    barcode: BarcodeText = None,
    pii: PiiMode = "masked",
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    """`q` matches an exact barcode; with `registration:pii` also any part of a name or
    an email, without it only a whole name (case-insensitive)."""
    page = await verbs.list_registrations(
        ctx.db(),
        actor,
        event_id,
        sale_order_id=sale_order_id,
        state=state,
        active=active,
        q=no_nul(q, "q"),
        barcode=no_nul(barcode, "barcode"),
        pii_full=pii_full(actor, pii),
        limit=limit,
        cursor=cursor,
    )
    return answer(Page[RegistrationView], page)


@router.get("/admin/events/{event_id}/registrations/count", response_model=RegistrationCounts)
async def count_registrations(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    return answer(RegistrationCounts, await verbs.count_registrations(ctx.db(), actor, event_id))


@router.get("/admin/registrations/{registration_id}", response_model=RegistrationView)
async def get_registration(
    ctx: Ctx, actor: Read, registration_id: UUID, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view = await verbs.get_registration(ctx.db(), actor, registration_id, pii_full=full)
    return answer(RegistrationView, view, etag=view["version"])


Action = Callable[[Ctx, Actor, UUID, IfMatch], Awaitable[dict[str, Any]]]


def _action_route(path: str, run: Action) -> None:
    """POST /admin/registrations/{id}/<path>: one state or archive verb."""

    async def change(
        ctx: Ctx,
        actor: Write,
        registration_id: UUID,
        if_match: IfMatch,
        pii: PiiMode = "masked",
    ) -> Response:
        full = pii_full(actor, pii)
        return _answer(await run(ctx, actor, registration_id, if_match), full)

    router.add_api_route(
        f"/admin/registrations/{{registration_id}}/{path}",
        change,
        methods=["POST"],
        name=f"registration_{path}",
        response_model=RegistrationView,
    )


def _to_state(target: states.OfficerTarget) -> Action:
    async def run(ctx: Ctx, actor: Actor, rid: UUID, if_match: int | None) -> dict[str, Any]:
        return await states.transition(ctx.db(), actor, rid, target, ctx.clock(), if_match=if_match)

    return run


def _to_active(active: bool) -> Action:
    async def run(ctx: Ctx, actor: Actor, rid: UUID, if_match: int | None) -> dict[str, Any]:
        return await states.set_active(ctx.db(), actor, rid, active, ctx.clock(), if_match=if_match)

    return run


_action_route("confirm", _to_state("open"))
_action_route("set-draft", _to_state("draft"))
_action_route("set-done", _to_state("done"))
_action_route("archive", _to_active(False))
_action_route("unarchive", _to_active(True))


@router.post(
    "/admin/registrations/{registration_id}/sync-from-partner", response_model=RegistrationView
)
async def sync_from_partner(
    ctx: Ctx, actor: Write, registration_id: UUID, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view = await verbs.sync_from_partner(
        ctx.db(), actor, registration_id, ctx.ports.partner_directory, ctx.clock()
    )
    return _answer(view, full)
