"""Console pages of the registration export (registration:export): choose the columns and a
state filter, preview the count, confirm, download.

The preview is answered as a page (200), not a 303: its confirmation token is a one-use
secret, and a redirect would carry it in a URL (history, logs) or need state kept for it.
The page is `no-store` like every console answer, and the token travels only as the
confirm form's hidden field. The confirm form's answer IS the download: the admin API's
own route function streams it (the same verb, the export slots, the attachment).
"""

from __future__ import annotations

from datetime import UTC
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    needs,
    page,
    refusal_errors,
    validation_errors,
)
from events_svc.errors.exports import EXPORT_COLUMNS
from events_svc.models.base import RegistrationState
from events_svc.models.exports import ExportBody, ExportPreviewBody
from events_svc.routes.deps import ServiceContext
from events_svc.routes.exports import export_registrations
from events_svc.verbs import exports as verbs
from events_svc.verbs.events import get_event

router = APIRouter()

Exporter = needs("registration:export")

# what each column holds, as the choose page labels it
COLUMN_LABELS = {
    "id": "Registration id",
    "name": "Name",
    "email": "Email",
    "phone": "Phone",
    "company_name": "Company",
    "state": "State",
    "ticket": "Ticket",
    "slot": "Slot (start)",
    "barcode": "Barcode",
    "created_at": "Registered at",
    "date_closed": "Attended at",
}
# the columns the choose page ticks at first
DEFAULT_COLUMNS = ("id", "name", "email", "state", "ticket", "barcode", "created_at")
STATES: tuple[RegistrationState, ...] = ("draft", "open", "done", "cancel")
STATE_OPTIONS = [("", "Every state"), *((s, s) for s in STATES)]


async def _event(ctx: ServiceContext, actor: Actor, event_id: UUID) -> dict[str, Any]:
    """The event the export is of (404 when the actor cannot see it)."""
    return await get_event(ctx.db(), actor, event_id, ctx.clock())


def _choose(
    request: Request,
    event: dict[str, Any],
    actor: Actor,
    *,
    chosen: list[str],
    state: str | None,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Response:
    masked = not actor.has("registration:pii")
    columns = [(n, COLUMN_LABELS[n], masked and n in verbs.MASKED_COLUMNS) for n in EXPORT_COLUMNS]
    return page(
        request,
        "export_new.html",
        status_code=status_code,
        problems=problems,
        title=f"Export registrations: {event['name']}",
        event=event,
        columns=columns,
        masked=masked,
        chosen=chosen,
        state=state or "",
        states=STATE_OPTIONS,
    )


@router.get("/events/{event_id}/export")
async def export_page(
    request: Request, ctx: StudioCtx, event_id: UUID, actor: Actor = Exporter
) -> Response:
    """The column choice, the sensible defaults checked."""
    event = await _event(ctx, actor, event_id)
    return _choose(request, event, actor, chosen=list(DEFAULT_COLUMNS), state=None)


@router.post("/events/{event_id}/export/preview")
async def export_preview(
    request: Request, ctx: StudioCtx, form: Posted, event_id: UUID, actor: Actor = Exporter
) -> Response:
    """Count the rows and take a confirmation (the API's preview verb); its page."""
    event = await _event(ctx, actor, event_id)
    chosen = form.lists.get("columns", [])
    state = form.optional("state")
    try:
        body = ExportPreviewBody.model_validate({"columns": chosen, "state": state})
        result = await verbs.preview_export(
            ctx.db(),
            actor,
            event_id,
            body.columns,
            body.state,
            ctx.clock(),
            max_rows=ctx.settings.export_max_rows,
        )
    except ValidationError as exc:
        problems = [_located(p) for p in validation_errors(exc)]
        return _choose(
            request, event, actor, chosen=chosen, state=state, problems=problems, status_code=422
        )
    except errors.DomainError as exc:
        if exc.status != 422:  # not a column or size refusal: the error page
            raise
        return _choose(
            request,
            event,
            actor,
            chosen=chosen,
            state=state,
            problems=[_located(p) for p in refusal_errors(exc)],
            status_code=exc.status,
        )
    return page(
        request,
        "export_preview.html",
        title=f"Confirm the export: {event['name']}",
        event=event,
        preview=result,
        expires=f"{result['expires_at'].astimezone(UTC):%Y-%m-%d %H:%M} UTC",
        labels=COLUMN_LABELS,
    )


def _located(problem: FieldError) -> FieldError:
    """A problem of `columns.3` or `state` linked to the field group it names."""
    name = (problem.field or "columns").split(".")[0]
    field = "state" if name == "state" else "columns"
    return FieldError(problem.message, problem.code, field)


@router.post("/events/{event_id}/export")
async def export_download(
    ctx: StudioCtx, form: Posted, event_id: UUID, actor: Actor = Exporter
) -> Response:
    """Consume the confirmation and stream the CSV: the admin API's own download."""
    try:
        body = ExportBody(confirmation_token=form.text("confirmation_token"))
    except ValidationError:  # blank or oversized: the API's 422 for the same body
        raise errors.ValidationFailed(
            "The confirmation is missing: preview the export again.", field="confirmation_token"
        ) from None
    return await export_registrations(ctx, actor, event_id, body)
