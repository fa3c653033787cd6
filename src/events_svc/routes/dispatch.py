"""Admin routes of the trigger dispatcher's templates: which mail template each trigger
purpose renders. Both routes need `template:write` (the contract's row) and a platform
operator: the mapping, and the receipt counts the list shows, span every company."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from events_svc.actors import Actor
from events_svc.errors.dispatch import TRIGGER_PURPOSES
from events_svc.models import Page, TriggerTemplateSet, TriggerTemplateView
from events_svc.routes.deps import Ctx, answer, require
from events_svc.verbs.dispatch import list_trigger_templates, set_trigger_template

router = APIRouter(tags=["trigger dispatch"])

TemplateWrite = Annotated[Actor, require("template:write")]
Purpose = Annotated[
    str,
    Path(
        max_length=64,
        description="a trigger purpose (404 trigger_purpose_unknown otherwise)",
        json_schema_extra={"enum": list(TRIGGER_PURPOSES)},
    ),
]


@router.get("/admin/trigger-templates", response_model=Page[TriggerTemplateView])
async def list_templates(ctx: Ctx, actor: TemplateWrite) -> Response:
    """Every purpose, mapped or not (`template_id` null: its triggers park), with its
    receipts the dispatcher has not settled. One page: `next_cursor` is always null."""
    items = await list_trigger_templates(ctx.db(), actor)
    return answer(Page[TriggerTemplateView], {"items": items, "next_cursor": None})


@router.put("/admin/trigger-templates/{purpose}", response_model=TriggerTemplateView)
async def set_template(
    ctx: Ctx, actor: TemplateWrite, purpose: Purpose, body: TriggerTemplateSet
) -> Response:
    """Map the purpose to a mail template (422 template_not_found, channel_kind_mismatch);
    its parked triggers are released at once. Platform operators only (the mapping is
    shared by every company)."""
    view = await set_trigger_template(
        ctx.db(),
        actor,
        purpose,
        body.template_id,
        ctx.clock(),
        templates=ctx.ports.template_renderer,
    )
    return answer(TriggerTemplateView, view)
