"""Console pages of event operations (event:operate): choose the kind and its parameters,
the preview with its audience count, the start carrying the previewed revision (the
API's If-Match), progress, resume, cancel and the result.

The form is read into the API's own `OperationCreate`, so its validation errors name the
same fields (`params.date_begin`), which are also the inputs' names and ids. A
`datetime-local` input holds no offset: it is read in the zone the form names (a
reschedule's zone, else the event's), the one a calendar shows the event in.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

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
    see_other,
    validation_errors,
)
from events_svc.documents import when
from events_svc.models import OperationCreate
from events_svc.models.operations import PARAMS_OF_KIND
from events_svc.routes.deps import ServiceContext, parse_if_match
from events_svc.verbs.events import get_event
from events_svc.verbs.operations import OperationOptions, commands, list_operations, preview, start

router = APIRouter()

Operate = needs("event:operate")

KINDS = [
    ("reschedule", "Reschedule: new dates, zone or location"),
    ("cancellation", "Cancellation: cancel the event"),
    ("reminder", "Reminder: remind the attendees"),
    ("follow_up", "Follow-up: after the event"),
]
# the form fields each kind reads (the others are ignored, so every fieldset can show)
FIELDS_OF_KIND = {kind: tuple(model.model_fields) for kind, model in PARAMS_OF_KIND.items()}
PARAM_NAMES = frozenset(n for names in FIELDS_OF_KIND.values() for n in names)
INSTANTS = frozenset({"date_begin", "date_end", "audience_cutoff"})
KEPT_UNLESS_CHANGED = frozenset({"date_tz", "location"})
LOCAL = "%Y-%m-%dT%H:%M"  # a datetime-local input's value
BADGES = {
    "previewed": "info",
    "running": "info",
    "paused": "warn",
    "failed": "bad",
    "completed": "good",
    "cancelled": "warn",
}
IN_PROGRESS = frozenset({"running", "paused"})  # what the loop works: the page polls


def _zone(name: str | None) -> tzinfo | None:
    try:
        return ZoneInfo(name) if name else None
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _local(instant: datetime, zone: tzinfo | None) -> str:
    """An instant as a datetime-local value in `zone` (UTC when the zone is unknown)."""
    try:
        return instant.astimezone(zone or UTC).strftime(LOCAL)
    except OverflowError:
        return instant.astimezone(UTC).strftime(LOCAL)


def _shown(value: Any, zone: tzinfo | None) -> str:
    """An instant (or its RFC 3339 text) for reading: in the event's zone, with it named."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if not isinstance(value, datetime):
        return "—"
    return when(value, str(zone) if zone is not None else "UTC")


def _instant(text: str, zone: tzinfo | None) -> str:
    """A datetime-local value read in `zone`, as RFC 3339; text that is no date is passed
    on as it is, so the model names the field it fails."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return text
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone or UTC)
    return value.isoformat()


def operation_body(values: dict[str, str], event: dict[str, Any]) -> dict[str, Any]:
    """The API body of the posted form: the chosen kind's filled-in fields only (a zone or
    location left as the event has it is not sent: the preview lists what changes)."""
    kind = values.get("kind", "")
    params: dict[str, Any] = {}
    fields = FIELDS_OF_KIND.get(kind, ())
    typed = values.get("params.date_tz", "").strip() if "date_tz" in fields else ""
    zone = _zone(typed) or _zone(event["date_tz"])
    for name in fields:
        text = values.get(f"params.{name}", "").strip()
        if name in KEPT_UNLESS_CHANGED and text == (event[name] or ""):
            continue  # shown prefilled: sent only when the operator changed it
        if text:
            params[name] = _instant(text, zone) if name in INSTANTS else text
    return {"kind": kind, "params": params}


def _form_problems(exc: ValidationError, kind: str) -> list[FieldError]:
    """The model's errors; with no valid kind, only the kind's (the parameters then have
    no model to be read by)."""
    problems = validation_errors(exc)
    if kind not in FIELDS_OF_KIND:
        problems = [p for p in problems if p.field == "kind"]
    return problems


def _param_field(problem: FieldError) -> FieldError:
    """A verb's refusal naming `date_end` links the form's `params.date_end`."""
    if problem.field in PARAM_NAMES:
        return FieldError(problem.message, problem.code, f"params.{problem.field}")
    return problem


def _defaults(event: dict[str, Any], now: datetime) -> dict[str, str]:
    """The form as first shown: the event's dates, zone and location; the cutoff now."""
    zone = _zone(event["date_tz"])
    return {
        "kind": "reschedule",
        "params.date_begin": _local(event["date_begin"], zone),
        "params.date_end": _local(event["date_end"], zone),
        "params.date_tz": event["date_tz"],
        "params.location": event["location"] or "",
        "params.reason": "",
        "params.audience_cutoff": _local(now, zone),
    }


async def _event(ctx: ServiceContext, actor: Actor, event_id: UUID) -> dict[str, Any]:
    return await get_event(ctx.db(), actor, event_id, ctx.clock())


async def _operations_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event: dict[str, Any],
    values: dict[str, str],
    *,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Response:
    zone = _zone(event["date_tz"])
    operations = await list_operations(ctx.db(), actor, event["id"])
    return page(
        request,
        "operations.html",
        status_code=status_code,
        problems=problems,
        title=f"Operations: {event['name']}",
        event=event,
        operations=operations,
        values=values,
        kinds=KINDS,
        badges=BADGES,
        when=lambda value: _shown(value, zone),
    )


@router.get("/events/{event_id}/operations")
async def operations_page(
    request: Request, ctx: StudioCtx, event_id: UUID, actor: Actor = Operate
) -> Response:
    """The event's operations and the form of a new one."""
    event = await _event(ctx, actor, event_id)
    values = _defaults(event, ctx.clock())
    return await _operations_page(request, ctx, actor, event, values)


@router.post("/events/{event_id}/operations")
async def create_operation(
    request: Request, ctx: StudioCtx, form: Posted, event_id: UUID, actor: Actor = Operate
) -> Any:
    """Preview the operation (the API's preview verb), then show it."""
    event = await _event(ctx, actor, event_id)
    body = operation_body(form.values, event)
    values = {**_defaults(event, ctx.clock()), **form.values}
    try:
        command = OperationCreate.model_validate(body)
        view = await preview.create_operation(ctx.db(), actor, event_id, command, ctx.clock())
    except ValidationError as exc:
        problems = _form_problems(exc, body["kind"])
        return await _operations_page(
            request, ctx, actor, event, values, problems=problems, status_code=422
        )
    except errors.DomainError as exc:
        if exc.status not in (409, 422):
            raise
        problems = [_param_field(p) for p in refusal_errors(exc)]
        return await _operations_page(
            request, ctx, actor, event, values, problems=problems, status_code=exc.status
        )
    return see_other(request, f"/operations/{view['id']}", done="operation_previewed")


def _stale(exc: errors.DomainError, previewed: int) -> FieldError:
    now = exc.fields.get("revision")
    at = f" (it is at revision {now} now, this preview saw {previewed})" if now else ""
    message = f"The event changed since you opened it{at}: preview the operation again."
    return FieldError(message, exc.code)


async def _operation_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    operation_id: UUID,
    *,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Response:
    op = await commands.get_operation(ctx.db(), actor, operation_id)
    event = await _event(ctx, actor, op["event_id"])
    zone = _zone(event["date_tz"])
    share = 0 if not op["audience"] else round(100 * op["processed"] / op["audience"])
    return page(
        request,
        "operation_detail.html",
        status_code=status_code,
        problems=problems,
        title=f"Operation: {op['kind'].replace('_', '-')} of {event['name']}",
        op=op,
        event=event,
        kind_label=dict(KINDS)[op["kind"]],
        badge=BADGES[op["state"]],
        polling=op["state"] in IN_PROGRESS,
        share=share,
        when=lambda value: _shown(value, zone),
    )


@router.get("/operations/{operation_id}")
async def operation_page(
    request: Request, ctx: StudioCtx, operation_id: UUID, actor: Actor = Operate
) -> Response:
    """A previewed operation and its confirm form; a started one's progress or result."""
    return await _operation_page(request, ctx, actor, operation_id)


async def _refused(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    operation_id: UUID,
    exc: errors.DomainError,
) -> Response:
    """A form-level refusal (409, 412, 428) over the operation as it now is; any other
    refusal (403, 404, 503) is the error page."""
    if exc.status not in (409, 412, 428):
        raise exc
    problems = refusal_errors(exc)
    if exc.status == 412:
        previewed = (await commands.get_operation(ctx.db(), actor, operation_id))["revision"]
        problems = [_stale(exc, previewed)]
    return await _operation_page(
        request, ctx, actor, operation_id, problems=problems, status_code=exc.status
    )


@router.post("/operations/{operation_id}/start")
async def start_operation(
    request: Request, ctx: StudioCtx, form: Posted, operation_id: UUID, actor: Actor = Operate
) -> Any:
    """Start it with the previewed revision as If-Match (the API's start verb)."""
    try:
        if_match = await parse_if_match(form.optional("revision"))
        await start.start_operation(ctx.db(), actor, operation_id, ctx.clock(), if_match=if_match)
    except errors.DomainError as exc:
        return await _refused(request, ctx, actor, operation_id, exc)
    return see_other(request, f"/operations/{operation_id}", done="operation_started")


@router.post("/operations/{operation_id}/resume")
async def resume_operation(
    request: Request, ctx: StudioCtx, form: Posted, operation_id: UUID, actor: Actor = Operate
) -> Any:
    """Clear a back-off and run the batches now (the API's resume verb)."""
    del form  # the CSRF check is the point
    options = OperationOptions.from_settings(ctx.settings)
    try:
        await commands.resume_operation(ctx.db(), actor, operation_id, options, ctx.clock())
    except errors.DomainError as exc:
        return await _refused(request, ctx, actor, operation_id, exc)
    return see_other(request, f"/operations/{operation_id}", done="operation_resumed")


@router.post("/operations/{operation_id}/cancel")
async def cancel_operation(
    request: Request, ctx: StudioCtx, form: Posted, operation_id: UUID, actor: Actor = Operate
) -> Any:
    """Stop the unclaimed work; written triggers stay (the API's cancel verb)."""
    del form
    try:
        await commands.cancel_operation(ctx.db(), actor, operation_id, ctx.clock())
    except errors.DomainError as exc:
        return await _refused(request, ctx, actor, operation_id, exc)
    return see_other(request, f"/operations/{operation_id}", done="operation_cancelled")
