"""Admin routes for booths: categories, booths with their bookings, the exclusive
confirm and release. Reads need `event:read`, writes `booth:write`; booking contacts are
masked unless `registration:pii` and `pii=full`."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Response, status

from events_svc.actors import Actor
from events_svc.models import Page
from events_svc.models.booths import (
    BookingCreate,
    BookingView,
    BoothCategoryCreate,
    BoothCategoryPatch,
    BoothCategoryView,
    BoothCreate,
    BoothPatch,
    BoothView,
)
from events_svc.routes.deps import Ctx, Cursor, Limit, PiiMode, answer, pii_full, require
from events_svc.verbs.booths import BOOTH_CATEGORIES
from events_svc.verbs.booths import bookings as booth_bookings
from events_svc.verbs.booths import records as booths
from events_svc.verbs.events import catalog

router = APIRouter(tags=["booths"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("booth:write")]
NO_CONTENT = status.HTTP_204_NO_CONTENT
BoothStateFilter = Literal["available", "unavailable"]


def _booking(view: dict[str, Any], full: bool) -> dict[str, Any]:
    if full:
        return view
    return {**booths.mask_booking(view), "booth": booths.shown(view["booth"], False)}


# --- categories ------------------------------------------------------------------------------


@router.get("/admin/booth-categories", response_model=Page[BoothCategoryView])
async def list_booth_categories(
    ctx: Ctx, actor: Read, limit: Limit = None, cursor: Cursor = None
) -> Response:
    found = await catalog.list_page(ctx.db(), BOOTH_CATEGORIES, limit=limit, cursor=cursor)
    return answer(Page[BoothCategoryView], found)


@router.post("/admin/booth-categories", status_code=201, response_model=BoothCategoryView)
async def create_booth_category(ctx: Ctx, actor: Write, body: BoothCategoryCreate) -> Response:
    view = await catalog.create(ctx.db(), actor, BOOTH_CATEGORIES, body.model_dump(), ctx.clock())
    return answer(BoothCategoryView, view, status_code=201)


@router.get("/admin/booth-categories/{booth_category_id}", response_model=BoothCategoryView)
async def get_booth_category(ctx: Ctx, actor: Read, booth_category_id: UUID) -> Response:
    return answer(
        BoothCategoryView, await catalog.get(ctx.db(), BOOTH_CATEGORIES, booth_category_id)
    )


@router.patch("/admin/booth-categories/{booth_category_id}", response_model=BoothCategoryView)
async def patch_booth_category(
    ctx: Ctx, actor: Write, booth_category_id: UUID, body: BoothCategoryPatch
) -> Response:
    view = await catalog.patch(
        ctx.db(), actor, BOOTH_CATEGORIES, booth_category_id, body.given(), ctx.clock()
    )
    return answer(BoothCategoryView, view)


@router.delete(
    "/admin/booth-categories/{booth_category_id}", status_code=204, response_class=Response
)
async def delete_booth_category(ctx: Ctx, actor: Write, booth_category_id: UUID) -> Response:
    await catalog.delete(ctx.db(), actor, BOOTH_CATEGORIES, booth_category_id)
    return Response(status_code=NO_CONTENT)


# --- booths ----------------------------------------------------------------------------------


@router.get("/admin/booths", response_model=Page[BoothView])
async def list_booths(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    state: BoothStateFilter | None = None,
    pii: PiiMode = "masked",
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    found = await booths.list_booths(
        ctx.db(),
        actor,
        event_id=event_id,
        state=state,
        pii_full=pii_full(actor, pii),
        limit=limit,
        cursor=cursor,
    )
    return answer(Page[BoothView], found)


@router.post("/admin/booths", status_code=201, response_model=BoothView)
async def create_booth(ctx: Ctx, actor: Write, body: BoothCreate) -> Response:
    view = await booths.create_booth(ctx.db(), actor, body, ctx.clock())
    return answer(BoothView, booths.shown(view, False), status_code=201)


@router.get("/admin/booths/{booth_id}", response_model=BoothView)
async def get_booth(ctx: Ctx, actor: Read, booth_id: UUID, pii: PiiMode = "masked") -> Response:
    full = pii_full(actor, pii)
    return answer(BoothView, await booths.get_booth(ctx.db(), actor, booth_id, pii_full=full))


@router.patch("/admin/booths/{booth_id}", response_model=BoothView)
async def patch_booth(
    ctx: Ctx, actor: Write, booth_id: UUID, body: BoothPatch, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view = await booths.patch_booth(ctx.db(), actor, booth_id, body.given(), ctx.clock())
    return answer(BoothView, booths.shown(view, full))


@router.delete("/admin/booths/{booth_id}", status_code=204, response_class=Response)
async def delete_booth(ctx: Ctx, actor: Write, booth_id: UUID) -> Response:
    await booths.delete_booth(ctx.db(), actor, booth_id)
    return Response(status_code=NO_CONTENT)


@router.post("/admin/booths/{booth_id}/release", response_model=BoothView)
async def release_booth(
    ctx: Ctx, actor: Write, booth_id: UUID, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view = await booth_bookings.release_booth(ctx.db(), actor, booth_id, ctx.clock())
    return answer(BoothView, booths.shown(view, full))


# --- bookings --------------------------------------------------------------------------------


@router.post(
    "/admin/booths/{booth_id}/bookings",
    status_code=201,
    response_model=BookingView,
    responses={200: {"model": BookingView, "description": "this order line's booking again"}},
)
async def book_booth(
    ctx: Ctx, actor: Write, booth_id: UUID, body: BookingCreate, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view, created = await booth_bookings.book_booth(ctx.db(), actor, booth_id, body, ctx.clock())
    return answer(BookingView, _booking(view, full), status_code=201 if created else 200)


@router.post("/admin/booth-bookings/{booking_id}/confirm", response_model=BookingView)
async def confirm_booking(
    ctx: Ctx, actor: Write, booking_id: UUID, pii: PiiMode = "masked"
) -> Response:
    full = pii_full(actor, pii)
    view = await booth_bookings.confirm_booking(ctx.db(), actor, booking_id, ctx.clock())
    return answer(BookingView, _booking(view, full))
