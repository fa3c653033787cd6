"""Admin routes of event operations and their trigger feed. Every route needs
`event:operate`. An operation's answer carries the event revision it was previewed on
as its ETag: the If-Match its start needs."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Query, Response

from events_svc.actors import Actor
from events_svc.models import OperationCreate, OperationView, TriggerPage, error_responses
from events_svc.routes.deps import Ctx, Cursor, IfMatch, Limit, answer, require
from events_svc.verbs.operations import OperationOptions, commands, feed, preview, start

router = APIRouter(tags=["operations"])

Operate = Annotated[Actor, require("event:operate")]


def _answer(view: dict[str, Any], status_code: int = 200) -> Response:
    return answer(OperationView, view, status_code=status_code, etag=view["revision"])


@router.post(
    "/admin/events/{event_id}/operations",
    status_code=201,
    response_model=OperationView,
)
async def create_operation(
    ctx: Ctx, actor: Operate, event_id: UUID, body: OperationCreate
) -> Response:
    """Preview an operation: the event revision it saw and its audience estimate; nothing
    changes until it is started."""
    view = await preview.create_operation(ctx.db(), actor, event_id, body, ctx.clock())
    return _answer(view, 201)


@router.post(
    "/admin/operations/{operation_id}/start",
    status_code=202,
    response_model=OperationView,
    responses=error_responses(428),
)
async def start_operation(
    ctx: Ctx, actor: Operate, operation_id: UUID, if_match: IfMatch
) -> Response:
    """Apply the change and snapshot the audience in one transaction (If-Match: the
    previewed revision); triggers are then written in batches."""
    view = await start.start_operation(
        ctx.db(), actor, operation_id, ctx.clock(), if_match=if_match
    )
    return _answer(view, 202)


@router.get("/admin/operations/{operation_id}", response_model=OperationView)
async def get_operation(ctx: Ctx, actor: Operate, operation_id: UUID) -> Response:
    return _answer(await commands.get_operation(ctx.db(), actor, operation_id))


@router.post("/admin/operations/{operation_id}/resume", response_model=OperationView)
async def resume_operation(ctx: Ctx, actor: Operate, operation_id: UUID) -> Response:
    """Clear a paused or failed operation's back-off and run its batches now (for a
    bounded time); the operation as it then is."""
    options = OperationOptions.from_settings(ctx.settings)
    view = await commands.resume_operation(ctx.db(), actor, operation_id, options, ctx.clock())
    return _answer(view)


@router.post("/admin/operations/{operation_id}/cancel", response_model=OperationView)
async def cancel_operation(ctx: Ctx, actor: Operate, operation_id: UUID) -> Response:
    """Stop the work no batch has claimed; every trigger written stays."""
    view = await commands.cancel_operation(ctx.db(), actor, operation_id, ctx.clock())
    return _answer(view)


@router.get("/admin/triggers", response_model=TriggerPage)
async def list_triggers(
    ctx: Ctx,
    actor: Operate,
    event_id: Annotated[UUID | None, Query()] = None,
    after: Cursor = None,
    limit: Limit = None,
) -> Response:
    """The trigger feed in creation order; keep `next_cursor` (never null) and pass it as
    `after` to read on without missing or re-reading a trigger."""
    page = await feed.list_triggers(ctx.db(), actor, event_id=event_id, after=after, limit=limit)
    return answer(TriggerPage, page)
