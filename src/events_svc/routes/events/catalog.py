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
    Page,
    QuestionCreate,
    QuestionPatch,
    QuestionView,
    SlotCreate,
    SlotPatch,
    SlotView,
    StageCreate,
    StagePatch,
    StageView,
    TagCategoryCreate,
    TagCategoryPatch,
    TagCategoryView,
    TagCreate,
    TagPatch,
    TagView,
    TicketCreate,
    TicketPatch,
    TicketView,
    TypeCreate,
    TypeMailLine,
    TypePatch,
    TypeQuestionLine,
    TypeTicketLine,
    TypeView,
    View,
)
from events_svc.models.catalog import TypeBoothLine
from events_svc.routes.deps import Ctx, Cursor, Limit, ServiceContext, answer, require
from events_svc.verbs.events import catalog, questions, tickets, types

router = APIRouter(tags=["configuration"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("event:write")]
Delete = Annotated[Actor, require("event:delete")]
NO_CONTENT = status.HTTP_204_NO_CONTENT


def _crud(
    path: str,
    noun: catalog.Noun,
    create: type[BaseModel],
    patch: type[BaseModel],
    view: type[View],
) -> None:
    """The five routes of a company-shared configuration noun."""
    page_view: type[View] = Page[view]  # type: ignore[valid-type]

    async def list_(ctx: Ctx, actor: Read, limit: Limit = None, cursor: Cursor = None) -> Response:
        return answer(
            page_view, await catalog.list_page(ctx.db(), noun, limit=limit, cursor=cursor)
        )

    async def create_(ctx: Ctx, actor: Write, body: create) -> Response:  # type: ignore[valid-type]
        values: dict[str, Any] = body.model_dump()  # type: ignore[attr-defined]
        created = await catalog.create(ctx.db(), actor, noun, values, ctx.clock())
        return answer(view, created, status_code=201)

    async def get_(ctx: Ctx, actor: Read, obj_id: UUID) -> Response:
        return answer(view, await catalog.get(ctx.db(), noun, obj_id))

    async def patch_(ctx: Ctx, actor: Write, obj_id: UUID, body: patch) -> Response:  # type: ignore[valid-type]
        changes = {k: getattr(body, k) for k in body.model_fields_set}  # type: ignore[attr-defined]
        return answer(
            view, await catalog.patch(ctx.db(), actor, noun, obj_id, changes, ctx.clock())
        )

    async def delete_(ctx: Ctx, actor: Delete, obj_id: UUID) -> Response:
        await catalog.delete(ctx.db(), actor, noun, obj_id)
        return Response(status_code=NO_CONTENT)

    name, one = noun.kind, f"{path}/{{obj_id}}"
    add = router.add_api_route
    add(path, list_, methods=["GET"], name=f"list_{name}", response_model=page_view)
    add(
        path, create_, methods=["POST"], status_code=201, name=f"create_{name}", response_model=view
    )
    add(one, get_, methods=["GET"], name=f"get_{name}", response_model=view)
    add(one, patch_, methods=["PATCH"], name=f"patch_{name}", response_model=view)
    add(
        one,
        delete_,
        methods=["DELETE"],
        status_code=204,
        name=f"delete_{name}",
        response_class=Response,
    )


_crud("/admin/stages", catalog.STAGES, StageCreate, StagePatch, StageView)
_crud(
    "/admin/tag-categories",
    catalog.TAG_CATEGORIES,
    TagCategoryCreate,
    TagCategoryPatch,
    TagCategoryView,
)
_crud("/admin/tags", catalog.TAGS, TagCreate, TagPatch, TagView)
_crud("/admin/types", catalog.TYPES, TypeCreate, TypePatch, TypeView)


# --- type template lines --------------------------------------------------------------------


async def _add_type_line(
    ctx: ServiceContext,
    actor: Actor,
    type_id: UUID,
    line: TypeMailLine | TypeTicketLine | TypeQuestionLine | TypeBoothLine,
) -> Response:
    view = await types.add_type_line(
        ctx.db(), actor, type_id, line, ctx.clock(), templates=ctx.ports.template_renderer
    )
    return answer(TypeView, view, status_code=201)


@router.post("/admin/types/{type_id}/mails", status_code=201, response_model=TypeView)
async def add_type_mail(ctx: Ctx, actor: Write, type_id: UUID, body: TypeMailLine) -> Response:
    """A mail line of the type: its template must be of the actor's company or a platform
    template (422 template_not_in_company); types are shared by every company."""
    return await _add_type_line(ctx, actor, type_id, body)


@router.post("/admin/types/{type_id}/tickets", status_code=201, response_model=TypeView)
async def add_type_ticket(ctx: Ctx, actor: Write, type_id: UUID, body: TypeTicketLine) -> Response:
    return await _add_type_line(ctx, actor, type_id, body)


@router.post("/admin/types/{type_id}/questions", status_code=201, response_model=TypeView)
async def add_type_question(
    ctx: Ctx, actor: Write, type_id: UUID, body: TypeQuestionLine
) -> Response:
    return await _add_type_line(ctx, actor, type_id, body)


@router.post("/admin/types/{type_id}/booths", status_code=201, response_model=TypeView)
async def add_type_booth(ctx: Ctx, actor: Write, type_id: UUID, body: TypeBoothLine) -> Response:
    return await _add_type_line(ctx, actor, type_id, body)


@router.delete("/admin/types/{type_id}/{kind}/{line_id}", response_model=TypeView)
async def delete_type_line(
    ctx: Ctx, actor: Write, type_id: UUID, kind: types.LineKind, line_id: UUID
) -> Response:
    return answer(TypeView, await types.delete_type_line(ctx.db(), actor, type_id, kind, line_id))


# --- questions and suggested answers --------------------------------------------------------


@router.get("/admin/questions", response_model=Page[QuestionView])
async def list_questions(
    ctx: Ctx, actor: Read, limit: Limit = None, cursor: Cursor = None
) -> Response:
    page = await questions.list_questions(ctx.db(), limit=limit, cursor=cursor)
    return answer(Page[QuestionView], page)


@router.post("/admin/questions", status_code=201, response_model=QuestionView)
async def create_question(ctx: Ctx, actor: Write, body: QuestionCreate) -> Response:
    view = await questions.create_question(ctx.db(), actor, body, ctx.clock())
    return answer(QuestionView, view, status_code=201)


@router.get("/admin/questions/{question_id}", response_model=QuestionView)
async def get_question(ctx: Ctx, actor: Read, question_id: UUID) -> Response:
    return answer(QuestionView, await questions.get_question(ctx.db(), question_id))


@router.patch("/admin/questions/{question_id}", response_model=QuestionView)
async def patch_question(
    ctx: Ctx, actor: Write, question_id: UUID, body: QuestionPatch
) -> Response:
    view = await questions.patch_question(ctx.db(), actor, question_id, body.given(), ctx.clock())
    return answer(QuestionView, view)


@router.delete("/admin/questions/{question_id}", status_code=204, response_class=Response)
async def delete_question(ctx: Ctx, actor: Delete, question_id: UUID) -> Response:
    await questions.delete_question(ctx.db(), actor, question_id)
    return Response(status_code=NO_CONTENT)


@router.post("/admin/questions/{question_id}/answers", status_code=201, response_model=QuestionView)
async def add_answer(ctx: Ctx, actor: Write, question_id: UUID, body: AnswerCreate) -> Response:
    view = await questions.add_answer(ctx.db(), actor, question_id, body, ctx.clock())
    return answer(QuestionView, view, status_code=201)


@router.patch("/admin/questions/{question_id}/answers/{answer_id}", response_model=QuestionView)
async def patch_answer(
    ctx: Ctx, actor: Write, question_id: UUID, answer_id: UUID, body: AnswerPatch
) -> Response:
    view = await questions.patch_answer(ctx.db(), actor, question_id, answer_id, body.given())
    return answer(QuestionView, view)


@router.delete(
    "/admin/questions/{question_id}/answers/{answer_id}", status_code=204, response_class=Response
)
async def delete_answer(ctx: Ctx, actor: Write, question_id: UUID, answer_id: UUID) -> Response:
    await questions.delete_answer(ctx.db(), actor, question_id, answer_id)
    return Response(status_code=NO_CONTENT)


# --- tickets and slots (fenced by their event's company) -------------------------------------


@router.get("/admin/tickets", response_model=Page[TicketView])
async def list_tickets(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    page = await tickets.list_tickets(
        ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor
    )
    return answer(Page[TicketView], page)


@router.post("/admin/tickets", status_code=201, response_model=TicketView)
async def create_ticket(ctx: Ctx, actor: Write, body: TicketCreate) -> Response:
    view = await tickets.create_ticket(ctx.db(), actor, body, ctx.clock())
    return answer(TicketView, view, status_code=201)


@router.get("/admin/tickets/{ticket_id}", response_model=TicketView)
async def get_ticket(ctx: Ctx, actor: Read, ticket_id: UUID) -> Response:
    return answer(TicketView, await tickets.get_ticket(ctx.db(), actor, ticket_id))


@router.patch("/admin/tickets/{ticket_id}", response_model=TicketView)
async def patch_ticket(ctx: Ctx, actor: Write, ticket_id: UUID, body: TicketPatch) -> Response:
    view = await tickets.patch_ticket(ctx.db(), actor, ticket_id, body.given(), ctx.clock())
    return answer(TicketView, view)


@router.delete("/admin/tickets/{ticket_id}", status_code=204, response_class=Response)
async def delete_ticket(ctx: Ctx, actor: Delete, ticket_id: UUID) -> Response:
    await tickets.delete_ticket(ctx.db(), actor, ticket_id)
    return Response(status_code=NO_CONTENT)


@router.get("/admin/slots", response_model=Page[SlotView])
async def list_slots(
    ctx: Ctx,
    actor: Read,
    event_id: UUID | None = None,
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    page = await tickets.list_slots(ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor)
    return answer(Page[SlotView], page)


@router.post("/admin/slots", status_code=201, response_model=SlotView)
async def create_slot(ctx: Ctx, actor: Write, body: SlotCreate) -> Response:
    view = await tickets.create_slot(ctx.db(), actor, body, ctx.clock())
    return answer(SlotView, view, status_code=201)


@router.get("/admin/slots/{slot_id}", response_model=SlotView)
async def get_slot(ctx: Ctx, actor: Read, slot_id: UUID) -> Response:
    return answer(SlotView, await tickets.get_slot(ctx.db(), actor, slot_id))


@router.patch("/admin/slots/{slot_id}", response_model=SlotView)
async def patch_slot(ctx: Ctx, actor: Write, slot_id: UUID, body: SlotPatch) -> Response:
    view = await tickets.patch_slot(ctx.db(), actor, slot_id, body.given(), ctx.clock())
    return answer(SlotView, view)


@router.delete("/admin/slots/{slot_id}", status_code=204, response_class=Response)
async def delete_slot(ctx: Ctx, actor: Delete, slot_id: UUID) -> Response:
    await tickets.delete_slot(ctx.db(), actor, slot_id)
    return Response(status_code=NO_CONTENT)
