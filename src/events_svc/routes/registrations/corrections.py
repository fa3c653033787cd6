"""Admin routes for the reasoned commands on a registration: the correction (PATCH), cancel
and reactivate with a reason, and the revision history."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Response

from events_svc.actors import Actor
from events_svc.models import (
    Page,
    ReasonBody,
    RegistrationPatch,
    RegistrationView,
    RevisionView,
    error_responses,
)
from events_svc.routes.deps import (
    Ctx,
    Cursor,
    IdempotencyKey,
    IfMatch,
    Limit,
    PiiMode,
    answer,
    pii_full,
    require,
)
from events_svc.verbs.pii import mask_registration
from events_svc.verbs.registrations import corrections, revisions

router = APIRouter(tags=["registrations"])

Read = Annotated[Actor, require("registration:read")]
Correct = Annotated[Actor, require("registration:correct")]
Lifecycle = Annotated[Actor, require("registration:lifecycle")]


def _answer(view: dict[str, Any], full: bool) -> Response:
    shown = view if full else mask_registration(view)
    return answer(RegistrationView, shown, etag=view["version"])


@router.patch(
    "/admin/registrations/{registration_id}",
    response_model=RegistrationView,
    responses=error_responses(428),
)
async def correct_registration(
    ctx: Ctx,
    actor: Correct,
    registration_id: UUID,
    body: RegistrationPatch,
    if_match: IfMatch,
    idempotency_key: IdempotencyKey = None,
    pii: PiiMode = "masked",
) -> Response:
    """A correction: attendee fields and a reason, with If-Match (428 without it)."""
    full = pii_full(actor, pii)
    view = await corrections.correct_registration(
        ctx.db(),
        actor,
        registration_id,
        body,
        ctx.clock(),
        if_match=if_match,
        idempotency_key=idempotency_key,
        pii_full=full,
    )
    return _answer(view, full)


def _lifecycle_route(path: str, reactivate: bool) -> None:
    async def change(
        ctx: Ctx,
        actor: Lifecycle,
        registration_id: UUID,
        body: ReasonBody,
        if_match: IfMatch,
        idempotency_key: IdempotencyKey = None,
        pii: PiiMode = "masked",
    ) -> Response:
        full = pii_full(actor, pii)
        view = await corrections.change_lifecycle(
            ctx.db(),
            actor,
            registration_id,
            reactivate=reactivate,
            reason=body.reason,
            now=ctx.clock(),
            if_match=if_match,
            idempotency_key=idempotency_key,
            pii_full=full,
        )
        return _answer(view, full)

    router.add_api_route(
        f"/admin/registrations/{{registration_id}}/{path}",
        change,
        methods=["POST"],
        name=f"registration_{path}",
        response_model=RegistrationView,
    )


_lifecycle_route("cancel", reactivate=False)
_lifecycle_route("reactivate", reactivate=True)


@router.get("/admin/registrations/{registration_id}/revisions", response_model=Page[RevisionView])
async def list_revisions(
    ctx: Ctx,
    actor: Read,
    registration_id: UUID,
    pii: PiiMode = "masked",
    limit: Limit = None,
    cursor: Cursor = None,
) -> Response:
    full = pii_full(actor, pii)
    page = await revisions.list_revisions(
        ctx.db(), actor, registration_id, pii_full=full, limit=limit, cursor=cursor
    )
    return answer(Page[RevisionView], page)
