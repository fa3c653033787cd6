"""Admin route of the check-in desk: one scan, throttled per actor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Response

from events_svc.actors import Actor
from events_svc.models.desk import DeskOutcome, DeskScan
from events_svc.routes.deps import Ctx, answer, require
from events_svc.verbs import desk

router = APIRouter(tags=["desk"])

Scan = Annotated[Actor, require("desk:scan")]


@router.post("/admin/desk/scan", response_model=DeskOutcome)
async def scan(ctx: Ctx, actor: Scan, body: DeskScan) -> Response:
    """Check an attendee in by barcode: the outcome (a result, not an error) and the
    attendee the desk checks, without email or phone."""
    if ctx.throttle is not None:
        await ctx.throttle.check_actor("desk", actor.id)
    result = await desk.scan(ctx.db(), actor, body.event_id, body.barcode, ctx.clock())
    return answer(DeskOutcome, result)
