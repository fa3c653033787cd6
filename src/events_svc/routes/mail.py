"""Admin routes for communication: scheduler rows, runs, templates, the outbox."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Response, status

from events_svc import errors
from events_svc.actors import Actor
from events_svc.loops import Entry, pass_options, run_view
from events_svc.models import (
    MailCreate,
    MailPatch,
    MailRunView,
    MailView,
    OutboxMessage,
    OutboxSummary,
    Page,
    PassesRunView,
    TemplateCreate,
    TemplateDeleted,
    TemplatePatch,
    TemplateView,
)
from events_svc.routes.deps import (
    Ctx,
    Cursor,
    Limit,
    PiiMode,
    ServiceContext,
    answer,
    pii_full,
    require,
)
from events_svc.verbs.mail import lines, outbox, run_mail_pass, templates

router = APIRouter(tags=["communication"])


def _links_unavailable(ctx: ServiceContext) -> list[str]:
    """The template context links this deployment cannot mint (they render empty)."""
    return ctx.links.unavailable


Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Run = Annotated[Actor, require("scheduler:run")]
TemplateWrite = Annotated[Actor, require("template:write")]
RegistrationRead = Annotated[Actor, require("registration:read")]


@router.get("/admin/mails", response_model=Page[MailView])
async def list_mails(ctx: Ctx, actor: Read, event_id: UUID) -> Response:
    return answer(Page[MailView], await lines.list_mails(ctx.db(), actor, event_id))


@router.post("/admin/mails", status_code=status.HTTP_201_CREATED, response_model=MailView)
async def create_mail(ctx: Ctx, actor: Write, body: MailCreate) -> Response:
    view = await lines.create_mail(
        ctx.db(), actor, body, ctx.clock(), templates=ctx.ports.template_renderer
    )
    return answer(MailView, view, status_code=201)


@router.get("/admin/mails/{mail_id}", response_model=MailView)
async def get_mail(ctx: Ctx, actor: Read, mail_id: UUID) -> Response:
    return answer(MailView, await lines.get_mail(ctx.db(), actor, mail_id))


@router.patch("/admin/mails/{mail_id}", response_model=MailView)
async def patch_mail(ctx: Ctx, actor: Write, mail_id: UUID, body: MailPatch) -> Response:
    view = await lines.patch_mail(
        ctx.db(), actor, mail_id, body.given(), ctx.clock(), templates=ctx.ports.template_renderer
    )
    return answer(MailView, view)


@router.post("/admin/mails/{mail_id}/run", response_model=MailRunView)
async def run_mail(ctx: Ctx, actor: Run, mail_id: UUID) -> Response:
    """Run this row now (even before its due time) through the pass's own claims."""
    await lines.get_mail(ctx.db(), actor, mail_id)  # 404 across companies
    summary = await run_mail_pass(
        ctx.db(), ctx.ports, pass_options(ctx.settings), ctx.clock(), mail_id=mail_id, force=True
    )
    ctx.metrics.observe_pass(summary)
    mail = await lines.get_mail(ctx.db(), actor, mail_id)
    return answer(MailRunView, {"summary": summary.as_dict(), "mail": mail})


@router.post("/admin/schedulers/run", response_model=PassesRunView)
async def run_schedulers(ctx: Ctx, actor: Run) -> Response:
    """Every pass once, now, through the one composition the loop, `events-svc scheduler
    run-once` and the host surface run: the summary keys of before, `passes` (each pass in
    its order: ran, skipped with why, or failed with the error's class) and `more`."""
    if actor.company_id is not None:
        raise errors.MissingScope("A full pass is for platform operators.", scope="scheduler:run")
    reports = await ctx.composition().run(Entry("route"))
    return answer(PassesRunView, run_view(reports))


@router.get("/admin/templates", response_model=Page[TemplateView])
async def list_templates(
    ctx: Ctx, actor: Read, limit: Limit = None, cursor: Cursor = None
) -> Response:
    """The templates the actor sees: its company's and the platform ones (`company_id`
    null); every template for an actor without a company."""
    page = await templates.list_templates(
        ctx.db(), actor, links_unavailable=_links_unavailable(ctx), limit=limit, cursor=cursor
    )
    return answer(Page[TemplateView], page)


@router.post("/admin/templates", status_code=status.HTTP_201_CREATED, response_model=TemplateView)
async def create_template(ctx: Ctx, actor: TemplateWrite, body: TemplateCreate) -> Response:
    """A template of the actor's company (a platform one for an actor without a company),
    checked off the event loop (422 template_invalid, template_variable_unknown,
    template_too_complex)."""
    view = await templates.create_template(
        ctx.db(), actor, body, ctx.clock(), links_unavailable=_links_unavailable(ctx)
    )
    return answer(TemplateView, view, status_code=201)


@router.get("/admin/templates/{template_id}", response_model=TemplateView)
async def get_template(ctx: Ctx, actor: Read, template_id: UUID) -> Response:
    """Another company's template answers 404, like a missing one."""
    view = await templates.get_template(
        ctx.db(), actor, template_id, links_unavailable=_links_unavailable(ctx)
    )
    return answer(TemplateView, view)


@router.patch("/admin/templates/{template_id}", response_model=TemplateView)
async def patch_template(
    ctx: Ctx, actor: TemplateWrite, template_id: UUID, body: TemplatePatch
) -> Response:
    """Another company's template answers 404; a platform template is edited by platform
    operators only (403 missing_scope for a company actor)."""
    view = await templates.patch_template(
        ctx.db(),
        actor,
        template_id,
        body.given(),
        ctx.clock(),
        links_unavailable=_links_unavailable(ctx),
    )
    return answer(TemplateView, view)


@router.delete("/admin/templates/{template_id}", response_model=TemplateDeleted)
async def delete_template(ctx: Ctx, actor: TemplateWrite, template_id: UUID) -> Response:
    """Deletes the template and the lines that use it on the events the actor sees;
    answers the counts (404 and 403 as for a PATCH)."""
    return answer(TemplateDeleted, await templates.delete_template(ctx.db(), actor, template_id))


DeliveryStateFilter = Literal["queued", "sending", "sent", "retrying", "failed"]
ChannelFilter = Literal["mail", "sms"]


@router.get("/admin/outbox", response_model=Page[OutboxMessage])
async def list_outbox(
    ctx: Ctx,
    actor: RegistrationRead,
    event_id: UUID | None = None,
    delivery_state: DeliveryStateFilter | None = None,
    channel: ChannelFilter | None = None,
    pii: PiiMode = "masked",
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    """What the standalone adapters queued and how far each message got (without
    `event_id`: every event the actor sees); recipients masked unless pii=full."""
    full = pii_full(actor, pii)
    page = await outbox.list_outbox(
        ctx.db(),
        actor,
        event_id,
        delivery_state=delivery_state,
        channel=channel,
        pii_full=full,
        limit=limit,
        cursor=cursor,
    )
    return answer(Page[OutboxMessage], page)


@router.get("/admin/outbox/summary", response_model=OutboxSummary)
async def outbox_summary(
    ctx: Ctx, actor: RegistrationRead, event_id: UUID | None = None
) -> Response:
    """Messages in each delivery state, of an event or of every event the actor sees."""
    return answer(OutboxSummary, await outbox.outbox_summary(ctx.db(), actor, event_id))


@router.post("/admin/outbox/{message_id}/retry", response_model=OutboxMessage)
async def retry_outbox_message(ctx: Ctx, actor: Run, message_id: UUID) -> Response:
    """A failed or retrying message back in the queue, due now (409
    `outbox_message_not_retryable` otherwise)."""
    row = await outbox.retry_message(ctx.db(), actor, message_id, ctx.clock())
    return answer(OutboxMessage, row)
