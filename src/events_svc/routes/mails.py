"""Admin routes for communication: scheduler rows, runs, templates, the outbox."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, status

from events_svc import errors
from events_svc.actors import Actor
from events_svc.models import MailCreate, MailPatch, TemplateCreate, TemplatePatch
from events_svc.routes.deps import Ctx, require
from events_svc.scheduler import pass_options
from events_svc.verbs import mails as verbs
from events_svc.verbs.mail_pass import run_mail_pass

router = APIRouter(tags=["communication"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Run = Annotated[Actor, require("scheduler:run")]
TemplateWrite = Annotated[Actor, require("template:write")]


@router.get("/admin/mails")
async def list_mails(ctx: Ctx, actor: Read, event_id: UUID) -> dict[str, Any]:
    return await verbs.list_mails(ctx.db(), actor, event_id)


@router.post("/admin/mails", status_code=status.HTTP_201_CREATED)
async def create_mail(ctx: Ctx, actor: Write, body: MailCreate) -> dict[str, Any]:
    return await verbs.create_mail(ctx.db(), actor, body, ctx.clock())


@router.get("/admin/mails/{mail_id}")
async def get_mail(ctx: Ctx, actor: Read, mail_id: UUID) -> dict[str, Any]:
    return await verbs.get_mail(ctx.db(), actor, mail_id)


@router.patch("/admin/mails/{mail_id}")
async def patch_mail(ctx: Ctx, actor: Write, mail_id: UUID, body: MailPatch) -> dict[str, Any]:
    return await verbs.patch_mail(ctx.db(), actor, mail_id, body.given(), ctx.clock())


@router.post("/admin/mails/{mail_id}/run")
async def run_mail(ctx: Ctx, actor: Run, mail_id: UUID) -> dict[str, Any]:
    """Run this row now (even before its due time) through the pass's own claims."""
    await verbs.get_mail(ctx.db(), actor, mail_id)  # 404 across companies
    summary = await run_mail_pass(ctx.db(), ctx.ports, pass_options(ctx.settings), ctx.clock(),
                                  mail_id=mail_id, force=True)  # fmt: skip
    ctx.metrics.observe_pass(summary)
    return {"summary": summary.as_dict(), "mail": await verbs.get_mail(ctx.db(), actor, mail_id)}


@router.post("/admin/schedulers/run")
async def run_schedulers(ctx: Ctx, actor: Run) -> dict[str, Any]:
    """One full pass now: everything due."""
    if actor.company_id is not None:
        raise errors.MissingScope("A full pass is for platform operators.", scope="scheduler:run")
    summary = await run_mail_pass(ctx.db(), ctx.ports, pass_options(ctx.settings), ctx.clock())
    ctx.metrics.observe_pass(summary)
    return summary.as_dict()


@router.get("/admin/templates")
async def list_templates(
    ctx: Ctx, actor: Read, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    return await verbs.list_templates(ctx.db(), limit=limit, cursor=cursor)


@router.post("/admin/templates", status_code=status.HTTP_201_CREATED)
async def create_template(ctx: Ctx, actor: TemplateWrite, body: TemplateCreate) -> dict[str, Any]:
    return await verbs.create_template(ctx.db(), actor, body, ctx.clock())


@router.get("/admin/templates/{template_id}")
async def get_template(ctx: Ctx, actor: Read, template_id: UUID) -> dict[str, Any]:
    return await verbs.get_template(ctx.db(), template_id)


@router.patch("/admin/templates/{template_id}")
async def patch_template(
    ctx: Ctx, actor: TemplateWrite, template_id: UUID, body: TemplatePatch
) -> dict[str, Any]:
    return await verbs.patch_template(ctx.db(), actor, template_id, body.given(), ctx.clock())


@router.delete("/admin/templates/{template_id}")
async def delete_template(ctx: Ctx, actor: TemplateWrite, template_id: UUID) -> dict[str, Any]:
    """Deletes the template and the scheduler lines that use it; answers the counts."""
    return await verbs.delete_template(ctx.db(), actor, template_id)


@router.get("/admin/outbox")
async def list_outbox(
    ctx: Ctx,
    actor: Read,
    event_id: UUID,
    pii: Literal["masked", "full"] = "masked",
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    full = pii == "full"
    if full and not actor.has("registration:pii"):
        raise errors.MissingScope("pii=full needs the registration:pii scope.",
                                  scope="registration:pii")  # fmt: skip
    return await verbs.list_outbox(ctx.db(), actor, event_id, pii_full=full, limit=limit,
                                   cursor=cursor)  # fmt: skip
