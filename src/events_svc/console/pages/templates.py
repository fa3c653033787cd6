"""Console pages of message templates: the list, a new template, editing one.

They call the template verbs of `routes/mail.py` (GET, POST and PATCH /admin/templates):
the same checks (422 `template_invalid`, `template_variable_unknown`, ...), the same
company fence and the same audit. A mail template's `attach_tickets` box sends the
attendee's tickets PDF with the mail; a text message carries none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.web import (
    FieldError,
    Form,
    Posted,
    StudioCtx,
    needs,
    page,
    refusal_errors,
    see_other,
    validation_errors,
)
from events_svc.models import TemplateCreate, TemplatePatch
from events_svc.routes.deps import ServiceContext
from events_svc.verbs.mail import templates

router = APIRouter()

Read = Annotated[Actor, needs("event:read")]
Write = Annotated[Actor, needs("template:write")]
LIST_SIZE = 200
KINDS = [("mail", "Email"), ("sms", "Text message")]
BLANK = {"kind": "mail", "name": "", "subject": "", "body": "", "attach_tickets": False}


def _values(form: Form) -> dict[str, Any]:
    return {
        "name": form.text("name"),
        "subject": form.values.get("subject", ""),
        "body": form.values.get("body", ""),
        "attach_tickets": form.values.get("attach_tickets") == "1",
    }


async def _list(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    *,
    typed: dict[str, Any] | None = None,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Any:
    listing = await templates.list_templates(
        ctx.db(), actor, links_unavailable=ctx.links.unavailable, limit=LIST_SIZE
    )
    return page(
        request,
        "templates.html",
        status_code=status_code,
        problems=problems,
        title="Templates",
        rows=listing["items"],
        kinds=KINDS,
        typed=typed or BLANK,
        can_write=actor.has("template:write"),
    )


async def _edit(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    template_id: UUID,
    *,
    typed: dict[str, Any] | None = None,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Any:
    template = await templates.get_template(
        ctx.db(), actor, template_id, links_unavailable=ctx.links.unavailable
    )
    return page(
        request,
        "template_edit.html",
        status_code=status_code,
        problems=problems,
        title=f"Template · {template['name']}",
        stored=template,
        typed=typed or template,
        can_write=actor.has("template:write"),
    )


@router.get("/templates")
async def template_list(request: Request, ctx: StudioCtx, actor: Read) -> Any:
    return await _list(request, ctx, actor)


async def _saved(
    write: Callable[[], Awaitable[dict[str, Any]]],
) -> tuple[dict[str, Any] | None, list[FieldError]]:
    """Run a template write; its refusals (the model's, or a verb's 422) as the form's
    problems."""
    try:
        return await write(), []
    except ValidationError as exc:
        return None, validation_errors(exc)
    except errors.DomainError as exc:
        if exc.status != 422:
            raise
        return None, refusal_errors(exc)


@router.post("/templates")
async def template_create(request: Request, ctx: StudioCtx, actor: Write, form: Posted) -> Any:
    """POST /admin/templates; its refusals show beside the form, the values kept."""
    typed = {"kind": form.text("kind") or "mail", **_values(form)}

    async def create() -> dict[str, Any]:
        command = TemplateCreate.model_validate(typed)
        return await templates.create_template(
            ctx.db(), actor, command, ctx.clock(), links_unavailable=ctx.links.unavailable
        )

    made, problems = await _saved(create)
    if made is not None:
        return see_other(request, f"/templates/{made['id']}", done="template_saved")
    return await _list(request, ctx, actor, typed=typed, problems=problems, status_code=422)


@router.get("/templates/{template_id}")
async def template_detail(request: Request, ctx: StudioCtx, actor: Read, template_id: UUID) -> Any:
    return await _edit(request, ctx, actor, template_id)


@router.post("/templates/{template_id}")
async def template_update(
    request: Request, ctx: StudioCtx, actor: Write, template_id: UUID, form: Posted
) -> Any:
    """PATCH /admin/templates/{id} with the form's fields."""
    typed = _values(form)

    async def update() -> dict[str, Any]:
        changes = TemplatePatch.model_validate(typed).given()
        return await templates.patch_template(
            ctx.db(),
            actor,
            template_id,
            changes,
            ctx.clock(),
            links_unavailable=ctx.links.unavailable,
        )

    saved, problems = await _saved(update)
    if saved is not None:
        return see_other(request, f"/templates/{template_id}", done="template_saved")
    return await _edit(
        request, ctx, actor, template_id, typed=typed, problems=problems, status_code=422
    )
