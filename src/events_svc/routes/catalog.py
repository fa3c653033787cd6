"""Admin routes for configuration: stages, tag categories, tags, types (with their
template lines), questions (with their suggested answers), tickets and slots.
"""

# No `from __future__ import annotations`: the route factory below hands FastAPI
# real classes through closures, which string annotations could not resolve.
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Response, status
from pydantic import BaseModel

from events_svc.actors import Actor
from events_svc.models import (
    AnswerCreate,
    AnswerPatch,
    QuestionCreate,
    QuestionPatch,
    SlotCreate,
    SlotPatch,
    StageCreate,
    StagePatch,
    TagCategoryCreate,
    TagCategoryPatch,
    TagCreate,
    TagPatch,
    TicketCreate,
    TicketPatch,
    TypeCreate,
    TypeMailLine,
    TypePatch,
    TypeQuestionLine,
    TypeTicketLine,
)
from events_svc.routes.deps import Ctx, require
from events_svc.verbs import catalog, questions, tickets, types

router = APIRouter(tags=["configuration"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Delete = Annotated[Actor, require("event:delete")]
NO_CONTENT = status.HTTP_204_NO_CONTENT


def _crud(path: str, noun: catalog.Noun, create: type[BaseModel], patch: type[BaseModel]) -> None:
    """The five routes of a company-shared configuration noun."""

    async def list_(
        ctx: Ctx, actor: Read, limit: int | None = None, cursor: str | None = None
    ) -> dict[str, Any]:
        return await catalog.list_page(ctx.db(), noun, limit=limit, cursor=cursor)

    async def create_(ctx: Ctx, actor: Write, body: create) -> dict[str, Any]:  # type: ignore[valid-type]
        values: dict[str, Any] = body.model_dump()  # type: ignore[attr-defined]
        return await catalog.create(ctx.db(), actor, noun, values, ctx.clock())

    async def get_(ctx: Ctx, actor: Read, obj_id: UUID) -> dict[str, Any]:
        return await catalog.get(ctx.db(), noun, obj_id)

    async def patch_(ctx: Ctx, actor: Write, obj_id: UUID, body: patch) -> dict[str, Any]:  # type: ignore[valid-type]
        changes = {k: getattr(body, k) for k in body.model_fields_set}  # type: ignore[attr-defined]
        return await catalog.patch(ctx.db(), actor, noun, obj_id, changes, ctx.clock())

    async def delete_(ctx: Ctx, actor: Delete, obj_id: UUID) -> Response:
        await catalog.delete(ctx.db(), actor, noun, obj_id)
        return Response(status_code=NO_CONTENT)

    name = noun.kind
    router.add_api_route(path, list_, methods=["GET"], name=f"list_{name}")
    router.add_api_route(path, create_, methods=["POST"], status_code=201, name=f"create_{name}")
    router.add_api_route(f"{path}/{{obj_id}}", get_, methods=["GET"], name=f"get_{name}")
    router.add_api_route(f"{path}/{{obj_id}}", patch_, methods=["PATCH"], name=f"patch_{name}")
    router.add_api_route(
        f"{path}/{{obj_id}}", delete_, methods=["DELETE"], status_code=204, name=f"delete_{name}"
    )


_crud("/admin/stages", catalog.STAGES, StageCreate, StagePatch)
_crud("/admin/tag-categories", catalog.TAG_CATEGORIES, TagCategoryCreate, TagCategoryPatch)
_crud("/admin/tags", catalog.TAGS, TagCreate, TagPatch)
_crud("/admin/types", catalog.TYPES, TypeCreate, TypePatch)


# --- type template lines --------------------------------------------------------------------


@router.post("/admin/types/{type_id}/mails", status_code=201)
async def add_type_mail(
    ctx: Ctx, actor: Write, type_id: UUID, body: TypeMailLine
) -> dict[str, Any]:
    return await types.add_type_line(ctx.db(), actor, type_id, body, ctx.clock())


@router.post("/admin/types/{type_id}/tickets", status_code=201)
async def add_type_ticket(
    ctx: Ctx, actor: Write, type_id: UUID, body: TypeTicketLine
) -> dict[str, Any]:
    return await types.add_type_line(ctx.db(), actor, type_id, body, ctx.clock())


@router.post("/admin/types/{type_id}/questions", status_code=201)
async def add_type_question(
    ctx: Ctx, actor: Write, type_id: UUID, body: TypeQuestionLine
) -> dict[str, Any]:
    return await types.add_type_line(ctx.db(), actor, type_id, body, ctx.clock())


@router.delete("/admin/types/{type_id}/{kind}/{line_id}")
async def delete_type_line(
    ctx: Ctx, actor: Write, type_id: UUID, kind: types.LineKind, line_id: UUID
) -> dict[str, Any]:
    return await types.delete_type_line(ctx.db(), actor, type_id, kind, line_id)


# --- questions and suggested answers --------------------------------------------------------


@router.get("/admin/questions")
async def list_questions(
    ctx: Ctx, actor: Read, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    return await questions.list_questions(ctx.db(), limit=limit, cursor=cursor)


@router.post("/admin/questions", status_code=201)
async def create_question(ctx: Ctx, actor: Write, body: QuestionCreate) -> dict[str, Any]:
    return await questions.create_question(ctx.db(), actor, body, ctx.clock())


@router.get("/admin/questions/{question_id}")
async def get_question(ctx: Ctx, actor: Read, question_id: UUID) -> dict[str, Any]:
    return await questions.get_question(ctx.db(), question_id)


@router.patch("/admin/questions/{question_id}")
async def patch_question(
    ctx: Ctx, actor: Write, question_id: UUID, body: QuestionPatch
) -> dict[str, Any]:
    return await questions.patch_question(ctx.db(), actor, question_id, body.given(), ctx.clock())


@router.delete("/admin/questions/{question_id}", status_code=204)
async def delete_question(ctx: Ctx, actor: Delete, question_id: UUID) -> Response:
    await questions.delete_question(ctx.db(), actor, question_id)
    return Response(status_code=NO_CONTENT)


@router.post("/admin/questions/{question_id}/answers", status_code=201)
async def add_answer(
    ctx: Ctx, actor: Write, question_id: UUID, body: AnswerCreate
) -> dict[str, Any]:
    return await questions.add_answer(ctx.db(), actor, question_id, body, ctx.clock())


@router.patch("/admin/questions/{question_id}/answers/{answer_id}")
async def patch_answer(
    ctx: Ctx, actor: Write, question_id: UUID, answer_id: UUID, body: AnswerPatch
) -> dict[str, Any]:
    return await questions.patch_answer(ctx.db(), actor, question_id, answer_id, body.given())


@router.delete("/admin/questions/{question_id}/answers/{answer_id}", status_code=204)
async def delete_answer(ctx: Ctx, actor: Write, question_id: UUID, answer_id: UUID) -> Response:
    await questions.delete_answer(ctx.db(), actor, question_id, answer_id)
    return Response(status_code=NO_CONTENT)


# --- tickets and slots (fenced by their event's company) -------------------------------------


@router.get("/admin/tickets")
async def list_tickets(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    return await tickets.list_tickets(
        ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor
    )


@router.post("/admin/tickets", status_code=201)
async def create_ticket(ctx: Ctx, actor: Write, body: TicketCreate) -> dict[str, Any]:
    return await tickets.create_ticket(ctx.db(), actor, body, ctx.clock())


@router.get("/admin/tickets/{ticket_id}")
async def get_ticket(ctx: Ctx, actor: Read, ticket_id: UUID) -> dict[str, Any]:
    return await tickets.get_ticket(ctx.db(), actor, ticket_id)


@router.patch("/admin/tickets/{ticket_id}")
async def patch_ticket(
    ctx: Ctx, actor: Write, ticket_id: UUID, body: TicketPatch
) -> dict[str, Any]:
    return await tickets.patch_ticket(ctx.db(), actor, ticket_id, body.given(), ctx.clock())


@router.delete("/admin/tickets/{ticket_id}", status_code=204)
async def delete_ticket(ctx: Ctx, actor: Delete, ticket_id: UUID) -> Response:
    await tickets.delete_ticket(ctx.db(), actor, ticket_id)
    return Response(status_code=NO_CONTENT)


@router.get("/admin/slots")
async def list_slots(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    return await tickets.list_slots(ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor)


@router.post("/admin/slots", status_code=201)
async def create_slot(ctx: Ctx, actor: Write, body: SlotCreate) -> dict[str, Any]:
    return await tickets.create_slot(ctx.db(), actor, body, ctx.clock())


@router.get("/admin/slots/{slot_id}")
async def get_slot(ctx: Ctx, actor: Read, slot_id: UUID) -> dict[str, Any]:
    return await tickets.get_slot(ctx.db(), actor, slot_id)


@router.patch("/admin/slots/{slot_id}")
async def patch_slot(ctx: Ctx, actor: Write, slot_id: UUID, body: SlotPatch) -> dict[str, Any]:
    return await tickets.patch_slot(ctx.db(), actor, slot_id, body.given(), ctx.clock())


@router.delete("/admin/slots/{slot_id}", status_code=204)
async def delete_slot(ctx: Ctx, actor: Delete, slot_id: UUID) -> Response:
    await tickets.delete_slot(ctx.db(), actor, slot_id)
    return Response(status_code=NO_CONTENT)
