"""Admin routes for events: CRUD, publication, mark-done, seats, question links."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Query, Response, status
from pydantic import AwareDatetime

from events_svc.actors import Actor
from events_svc.models import Command, EventCreate, EventPatch, QuestionLink
from events_svc.routes.deps import Ctx, IfMatch, no_nul, require, with_etag
from events_svc.verbs import events as verbs
from events_svc.verbs import questions as question_verbs

router = APIRouter(tags=["events"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Delete = Annotated[Actor, require("event:delete")]


class PublishBody(Command):
    date_publish: AwareDatetime | None = None


def _answer(response: Response, view: dict[str, Any]) -> dict[str, Any]:
    with_etag(response, view["revision"])
    return view


@router.get("/admin/events")
async def list_events(
    ctx: Ctx,
    actor: Read,
    q: str | None = None,
    published: bool | None = None,
    stage_id: UUID | None = None,
    date_from: AwareDatetime | None = None,
    date_to: AwareDatetime | None = None,
    limit: Annotated[int | None, Query()] = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    return await verbs.list_events(
        ctx.db(), actor, ctx.clock(), q=no_nul(q, "q"), published=published, stage_id=stage_id,
        date_from=date_from, date_to=date_to, limit=limit, cursor=cursor,
    )  # fmt: skip


@router.post("/admin/events", status_code=status.HTTP_201_CREATED)
async def create_event(
    ctx: Ctx, actor: Write, body: EventCreate, response: Response
) -> dict[str, Any]:
    return _answer(response, await verbs.create_event(ctx.db(), actor, body, ctx.clock()))


@router.get("/admin/events/{event_id}")
async def get_event(ctx: Ctx, actor: Read, event_id: UUID, response: Response) -> dict[str, Any]:
    return _answer(response, await verbs.get_event(ctx.db(), actor, event_id, ctx.clock()))


@router.patch("/admin/events/{event_id}")
async def patch_event(
    ctx: Ctx, actor: Write, event_id: UUID, body: EventPatch, if_match: IfMatch, response: Response
) -> dict[str, Any]:
    view = await verbs.patch_event(ctx.db(), actor, event_id, body, ctx.clock(), if_match=if_match)
    return _answer(response, view)


@router.post("/admin/events/{event_id}/publish")
async def publish_event(
    ctx: Ctx,
    actor: Write,
    event_id: UUID,
    response: Response,
    body: Annotated[PublishBody | None, Body()] = None,
) -> dict[str, Any]:
    when = body.date_publish if body else None
    view = await verbs.publish_event(ctx.db(), actor, event_id, ctx.clock(), date_publish=when)
    return _answer(response, view)


@router.post("/admin/events/{event_id}/unpublish")
async def unpublish_event(
    ctx: Ctx, actor: Write, event_id: UUID, response: Response
) -> dict[str, Any]:
    return _answer(response, await verbs.unpublish_event(ctx.db(), actor, event_id, ctx.clock()))


@router.post("/admin/events/{event_id}/mark-done")
async def mark_event_done(
    ctx: Ctx, actor: Write, event_id: UUID, response: Response
) -> dict[str, Any]:
    return _answer(response, await verbs.mark_event_done(ctx.db(), actor, event_id, ctx.clock()))


@router.delete("/admin/events/{event_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_event(ctx: Ctx, actor: Delete, event_id: UUID) -> Response:
    await verbs.delete_event(ctx.db(), actor, event_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/admin/events/{event_id}/seats")
async def get_seats(ctx: Ctx, actor: Read, event_id: UUID) -> dict[str, Any]:
    view = await verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
    seats: dict[str, Any] = view["seats"]
    return seats


@router.get("/admin/events/{event_id}/questions")
async def list_event_questions(ctx: Ctx, actor: Read, event_id: UUID) -> dict[str, Any]:
    items = await question_verbs.list_event_questions(ctx.db(), actor, event_id)
    return {"items": items, "next_cursor": None}


@router.post("/admin/events/{event_id}/questions", status_code=status.HTTP_201_CREATED)
async def link_question(
    ctx: Ctx, actor: Write, event_id: UUID, body: QuestionLink
) -> dict[str, Any]:
    items = await question_verbs.link_question(
        ctx.db(), actor, event_id, body.question_id, body.sequence
    )
    return {"items": items, "next_cursor": None}


@router.delete(
    "/admin/events/{event_id}/questions/{question_id}", status_code=status.HTTP_204_NO_CONTENT
)
async def unlink_question(ctx: Ctx, actor: Write, event_id: UUID, question_id: UUID) -> Response:
    await question_verbs.unlink_question(ctx.db(), actor, event_id, question_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


__all__ = ["router"]
