"""Admin routes for events: CRUD, publication, mark-done, seats, question links."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Body, Response, status

from events_svc.actors import Actor
from events_svc.models import (
    EventCreate,
    EventPatch,
    EventQuestionView,
    EventView,
    Instant,
    Page,
    PublishBody,
    QuestionLink,
    SeatsView,
)
from events_svc.routes.deps import Ctx, Cursor, IfMatch, Limit, SearchText, answer, no_nul, require
from events_svc.verbs.events import lifecycle, publication
from events_svc.verbs.events import questions as question_verbs
from events_svc.verbs.events import records as verbs

router = APIRouter(tags=["events"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Delete = Annotated[Actor, require("event:delete")]
NO_CONTENT = status.HTTP_204_NO_CONTENT


def _event(view: dict[str, Any], status_code: int = 200) -> Response:
    return answer(EventView, view, status_code=status_code, etag=view["revision"])


@router.get("/admin/events", response_model=Page[EventView])
async def list_events(
    ctx: Ctx,
    actor: Read,
    q: SearchText = None,
    published: bool | None = None,
    stage_id: UUID | None = None,
    date_from: Instant | None = None,
    date_to: Instant | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    page = await verbs.list_events(
        ctx.db(),
        actor,
        ctx.clock(),
        q=no_nul(q, "q"),
        published=published,
        stage_id=stage_id,
        date_from=date_from,
        date_to=date_to,
        limit=limit,
        cursor=cursor,
    )
    return answer(Page[EventView], page)


@router.post("/admin/events", status_code=status.HTTP_201_CREATED, response_model=EventView)
async def create_event(ctx: Ctx, actor: Write, body: EventCreate) -> Response:
    return _event(await verbs.create_event(ctx.db(), actor, body, ctx.clock()), 201)


@router.get("/admin/events/{event_id}", response_model=EventView)
async def get_event(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    return _event(await verbs.get_event(ctx.db(), actor, event_id, ctx.clock()))


@router.patch("/admin/events/{event_id}", response_model=EventView)
async def patch_event(
    ctx: Ctx, actor: Write, event_id: UUID, body: EventPatch, if_match: IfMatch
) -> Response:
    view = await verbs.patch_event(ctx.db(), actor, event_id, body, ctx.clock(), if_match=if_match)
    return _event(view)


@router.post("/admin/events/{event_id}/publish", response_model=EventView)
async def publish_event(
    ctx: Ctx,
    actor: Write,
    event_id: UUID,
    body: Annotated[PublishBody | None, Body()] = None,
) -> Response:
    when = body.date_publish if body else None
    view = await publication.publish_event(
        ctx.db(), actor, event_id, ctx.clock(), date_publish=when
    )
    return _event(view)


@router.post("/admin/events/{event_id}/unpublish", response_model=EventView)
async def unpublish_event(ctx: Ctx, actor: Write, event_id: UUID) -> Response:
    return _event(await publication.unpublish_event(ctx.db(), actor, event_id, ctx.clock()))


@router.post("/admin/events/{event_id}/mark-done", response_model=EventView)
async def mark_event_done(ctx: Ctx, actor: Write, event_id: UUID) -> Response:
    return _event(await lifecycle.mark_event_done(ctx.db(), actor, event_id, ctx.clock()))


@router.delete("/admin/events/{event_id}", status_code=NO_CONTENT, response_class=Response)
async def delete_event(ctx: Ctx, actor: Delete, event_id: UUID) -> Response:
    await verbs.delete_event(ctx.db(), actor, event_id)
    return Response(status_code=NO_CONTENT)


@router.get("/admin/events/{event_id}/seats", response_model=SeatsView)
async def get_seats(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    view = await verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
    return answer(SeatsView, view["seats"])


@router.get("/admin/events/{event_id}/questions", response_model=Page[EventQuestionView])
async def list_event_questions(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    items = await question_verbs.list_event_questions(ctx.db(), actor, event_id)
    return answer(Page[EventQuestionView], {"items": items, "next_cursor": None})


@router.post(
    "/admin/events/{event_id}/questions",
    status_code=status.HTTP_201_CREATED,
    response_model=Page[EventQuestionView],
)
async def link_question(ctx: Ctx, actor: Write, event_id: UUID, body: QuestionLink) -> Response:
    items = await question_verbs.link_question(
        ctx.db(),
        actor,
        event_id,
        body.question_id,
        body.sequence,
        once_per_order=body.once_per_order,
    )
    return answer(Page[EventQuestionView], {"items": items, "next_cursor": None}, status_code=201)


@router.delete(
    "/admin/events/{event_id}/questions/{question_id}",
    status_code=NO_CONTENT,
    response_class=Response,
)
async def unlink_question(ctx: Ctx, actor: Write, event_id: UUID, question_id: UUID) -> Response:
    await question_verbs.unlink_question(ctx.db(), actor, event_id, question_id)
    return Response(status_code=NO_CONTENT)


__all__ = ["router"]
