"""Admin routes of the attendance import: create a job from a CSV or JSON body, read it,
resume it, cancel it. Every route needs `attendance:write`.

The create route reads its body itself (two media types): `text/csv` goes to the CSV
reader, `application/json` is validated into `ImportRows` (refusals rendered like every
other body's), anything else is 415 `unsupported_media_type`. The body limit of this
route is 5 MiB (`bodylimit.py`); more than 10 000 rows is 413 `payload_too_large` too.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.models.attendance import (
    MAX_IMPORT_ROWS,
    ImportJobView,
    ImportRows,
    import_body_schema,
)
from events_svc.models.service import ErrorBody
from events_svc.routes.deps import Ctx, RequiredIdempotencyKey, answer, require
from events_svc.verbs.attendance import ImportOptions, jobs, parse

router = APIRouter(tags=["attendance"])

Write = Annotated[Actor, require("attendance:write")]

_CREATED: dict[int | str, dict[str, Any]] = {
    200: {"model": ImportJobView, "description": "a replay: the job of this Idempotency-Key"},
    415: {"model": ErrorBody, "description": "unsupported_media_type"},
}


def _json_rows(body: bytes) -> list[parse.StoredRow]:
    try:
        doc = json.loads(body)
    except UnicodeDecodeError:
        raise errors.InvalidJson("The body is not UTF-8 encoded JSON.") from None
    except json.JSONDecodeError as exc:
        problem = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([problem], body=body) from None
    except (ValueError, RecursionError):  # an integer past the digit limit, deep nesting
        raise errors.InvalidJson("The body is JSON this service does not read.") from None
    listed = doc.get("rows") if isinstance(doc, dict) else None
    if isinstance(listed, list) and len(listed) > MAX_IMPORT_ROWS:
        raise parse.too_many_rows()
    try:
        rows = ImportRows.model_validate(doc).rows
    except ValidationError as exc:
        problems = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(problems, body=body) from None
    return parse.rows_from_values((r.barcode, r.registration_id) for r in rows)


def _rows(content_type: str | None, body: bytes) -> list[parse.StoredRow]:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "text/csv":
        return parse.rows_from_csv(body)
    if media == "application/json":
        return _json_rows(body)
    raise errors.UnsupportedMediaType()


@router.post(
    "/admin/events/{event_id}/attendance-imports",
    status_code=202,
    response_model=ImportJobView,
    responses=_CREATED,
    openapi_extra={"requestBody": import_body_schema()},
)
async def create_attendance_import(
    ctx: Ctx, actor: Write, event_id: UUID, request: Request, key: RequiredIdempotencyKey
) -> Response:
    """Store the rows of an import and queue its job (202); a replay of the key answers
    the job it made (202 too, marked `Idempotent-Replayed: true`), storing nothing."""
    rows = _rows(request.headers.get("content-type"), await request.body())
    job, created = await jobs.create_import(ctx.db(), actor, event_id, key, rows, ctx.clock())
    response = answer(ImportJobView, job, status_code=202)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@router.get("/admin/attendance-imports/{job_id}", response_model=ImportJobView)
async def get_attendance_import(ctx: Ctx, actor: Write, job_id: UUID) -> Response:
    return answer(ImportJobView, await jobs.get_import(ctx.db(), actor, job_id))


@router.post("/admin/attendance-imports/{job_id}/resume", response_model=ImportJobView)
async def resume_attendance_import(ctx: Ctx, actor: Write, job_id: UUID) -> Response:
    """Clear a paused or failed job's back-off and run its batches now (for a bounded
    time); the job as it then is."""
    options = ImportOptions.from_settings(ctx.settings)
    view = await jobs.resume_import(ctx.db(), actor, job_id, options, ctx.clock())
    return answer(ImportJobView, view)


@router.post("/admin/attendance-imports/{job_id}/cancel", response_model=ImportJobView)
async def cancel_attendance_import(ctx: Ctx, actor: Write, job_id: UUID) -> Response:
    """Stop the rows no batch has claimed; processed rows keep their outcome."""
    return answer(ImportJobView, await jobs.cancel_import(ctx.db(), actor, job_id, ctx.clock()))
