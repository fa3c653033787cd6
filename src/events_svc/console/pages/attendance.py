"""Console pages: the attendance import — upload, progress, per-row errors, resume, cancel.

The upload form posts a CSV file (or pasted CSV text) to the same parser and the same
`verbs.attendance.jobs.create_import` as `POST /admin/events/{id}/attendance-imports`. Its
Idempotency-Key is minted per form render and carried as a hidden field, so a double
submit of one form makes one job (the second answers the first's job). The file holds at
most the API's 5 MiB (the route's body limit leaves room for the form around it) and
10 000 rows.

The job page shows the counters, a `<progress>`, the first 100 rows in error (row number
and code, never the row's text), and resume/cancel forms calling the API's verbs; while
the job still has work the progress block carries `data-poll` (studio.js refreshes it).
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request

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
)
from events_svc.models.attendance import MAX_IMPORT_BYTES, MAX_IMPORT_ROWS
from events_svc.routes.deps import ServiceContext, checked_key
from events_svc.verbs.attendance import ImportOptions, jobs, parse
from events_svc.verbs.events import records as event_verbs

router = APIRouter()

SCOPE = "attendance:write"
Writer = Annotated[Actor, needs(SCOPE)]
ACTIVE = ("queued", "running", "paused")  # states whose counters still move on their own

# job state -> (badge kind, words); a completed job with errors is the partial failure
STATES: dict[str, tuple[str, str]] = {
    "queued": ("info", "Queued"),
    "running": ("info", "Running"),
    "paused": ("warn", "Paused after a failed batch: retrying"),
    "completed": ("good", "Completed"),
    "cancelled": ("warn", "Cancelled"),
    "failed": ("bad", "Failed: resume it to retry"),
}
PARTIAL = ("warn", "Completed with refused rows")

# what each per-row code means, for the errors table
ROW_CODES = {
    "unknown_barcode": "no active registration has this barcode or id",
    "wrong_event": "the registration belongs to another event",
    "not_confirmed": "the registration is a draft or cancelled",
    "duplicate_row": "an earlier row named the same registration",
    "malformed_row": "the row holds neither a barcode nor a registration id",
}


def state_badge(job: dict[str, Any]) -> tuple[str, str]:
    if job["state"] == "completed" and job["error_count"]:
        return PARTIAL
    return STATES.get(job["state"], ("info", job["state"]))


async def _event_name(ctx: ServiceContext, actor: Actor, event_id: UUID) -> str | None:
    """The event's name for an operator who may read events (the API's scope for it)."""
    if not actor.has("event:read"):
        return None
    event = await event_verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
    return str(event["name"])


async def _upload_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event_id: UUID,
    *,
    status_code: int = 200,
    problems: list[FieldError] | None = None,
) -> Any:
    """The upload form with a fresh Idempotency-Key, and the event's imports."""
    listed = await jobs.list_imports(ctx.db(), actor, event_id)
    return page(
        request,
        "attendance_new.html",
        status_code=status_code,
        problems=problems,
        title="Import attendance",
        event_id=str(event_id),
        event_name=await _event_name(ctx, actor, event_id),
        idempotency_key=secrets.token_urlsafe(24),
        imports=[{**j, "badge": state_badge(j)} for j in listed],
        max_rows=MAX_IMPORT_ROWS,
        max_mib=MAX_IMPORT_BYTES // (1024 * 1024),
    )


@router.get("/events/{event_id}/attendance", name="attendance_new")
async def upload_page(request: Request, ctx: StudioCtx, event_id: UUID, actor: Writer) -> Any:
    return await _upload_page(request, ctx, actor, event_id)


async def _csv_body(form: Any) -> tuple[bytes, str]:
    """(the CSV bytes, the field they came from): the file when one was chosen, else the
    pasted text; both at once is refused rather than guessed."""
    data = b""
    if form.file is not None:
        try:
            data = await form.file.read(MAX_IMPORT_BYTES + 1)
        finally:
            await form.file.close()  # its spooled temporary file, now
    pasted = form.values.get("csv_text", "")
    if data and pasted.strip():
        raise errors.ValidationFailed(
            "Choose a file or paste the rows, not both.", field="csv_file"
        )
    if len(data) > MAX_IMPORT_BYTES:
        raise errors.PayloadTooLarge(
            f"The file is larger than {MAX_IMPORT_BYTES} bytes.", limit_bytes=MAX_IMPORT_BYTES
        )
    if data:
        return data, "csv_file"
    return pasted.encode(), "csv_text"


@router.post("/events/{event_id}/attendance")
async def start_import(
    request: Request,
    ctx: StudioCtx,
    event_id: UUID,
    actor: Writer,
    form: Posted,
) -> Any:
    """Parse the CSV as the API does and create the job under the form's key; 303 to the
    job. A refusal of the body re-renders the form with the API's code."""
    try:
        key = checked_key(form.optional("idempotency_key"), required=True) or ""
    except (errors.ValidationFailed, errors.IdempotencyKeyRequired) as exc:
        # a form this page did not render: no field of it to point at
        problems = [FieldError(exc.detail, exc.code)]
        return await _upload_page(
            request, ctx, actor, event_id, status_code=exc.status, problems=problems
        )
    source = "csv_file"
    try:
        body, source = await _csv_body(form)
        rows = parse.rows_from_csv(body)
        job, created = await jobs.create_import(ctx.db(), actor, event_id, key, rows, ctx.clock())
    except (
        errors.ValidationFailed,
        errors.PayloadTooLarge,
        errors.ImportHeaderInvalid,
        errors.ImportCsvInvalid,
    ) as exc:
        problems = [FieldError(p.message, p.code, p.field or source) for p in refusal_errors(exc)]
        return await _upload_page(
            request, ctx, actor, event_id, status_code=exc.status, problems=problems
        )
    done = "import_started" if created else "import_replayed"
    return see_other(request, f"/attendance-imports/{job['id']}", done=done)


async def _job_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    job: dict[str, Any],
    *,
    status_code: int = 200,
    problems: list[FieldError] | None = None,
) -> Any:
    kind, words = state_badge(job)
    return page(
        request,
        "attendance_job.html",
        status_code=status_code,
        problems=problems,
        title=f"Attendance import: {words}",
        job=job,
        badge_kind=kind,
        badge_words=words,
        active=job["state"] in ACTIVE,
        can_resume=job["state"] not in ("completed", "cancelled"),
        can_cancel=job["state"] not in ("completed", "cancelled"),
        event_name=await _event_name(ctx, actor, job["event_id"]),
        row_codes=ROW_CODES,
    )


@router.get("/attendance-imports/{job_id}", name="attendance_job")
async def job_page(request: Request, ctx: StudioCtx, job_id: UUID, actor: Writer) -> Any:
    """The job: progress, counters, rows in error, resume and cancel."""
    job = await jobs.get_import(ctx.db(), actor, job_id)
    if request.query_params.get("done") == "import_started" and job["state"] != "queued":
        # the page refreshed itself after the job moved on: "queued" would now mislead
        return see_other(request, f"/attendance-imports/{job_id}")
    return await _job_page(request, ctx, actor, job)


@router.post("/attendance-imports/{job_id}/resume")
async def resume(
    request: Request, ctx: StudioCtx, job_id: UUID, actor: Writer, form: Posted
) -> Any:
    """Resume as the API does (clears a back-off, runs batches now for a bounded time)."""
    del form  # the CSRF check is the point
    options = ImportOptions.from_settings(ctx.settings)
    try:
        await jobs.resume_import(ctx.db(), actor, job_id, options, ctx.clock())
    except errors.ImportFinished as exc:
        return await _refused(request, ctx, actor, job_id, exc)
    return see_other(request, f"/attendance-imports/{job_id}", done="import_resumed")


@router.post("/attendance-imports/{job_id}/cancel")
async def cancel(
    request: Request, ctx: StudioCtx, job_id: UUID, actor: Writer, form: Posted
) -> Any:
    """Cancel as the API does: unclaimed rows stop, processed rows keep their outcome."""
    del form  # the CSRF check is the point
    try:
        await jobs.cancel_import(ctx.db(), actor, job_id, ctx.clock())
    except errors.ImportFinished as exc:
        return await _refused(request, ctx, actor, job_id, exc)
    return see_other(request, f"/attendance-imports/{job_id}", done="import_cancelled")


async def _refused(
    request: Request, ctx: ServiceContext, actor: Actor, job_id: UUID, exc: errors.DomainError
) -> Any:
    """The job page as it is now, with the refusal's code in the error summary."""
    job = await jobs.get_import(ctx.db(), actor, job_id)
    return await _job_page(
        request, ctx, actor, job, status_code=exc.status, problems=refusal_errors(exc)
    )
