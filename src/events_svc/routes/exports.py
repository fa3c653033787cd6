"""Admin routes of the registration export: the preview, and the CSV download it confirms.

The download is a streamed `text/csv` attachment. The response owns the stream: whatever
ends it (the last row, a failure, a client that goes away), the COPY is stopped and its
connection given back (`ExportStream.aclose`). `Cache-Control: no-store` and
`X-Robots-Tag: noindex` are set by the app on every answer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from events_svc import errors
from events_svc.actors import Actor
from events_svc.models import (
    ADMIN_ERRORS,
    ExportBody,
    ExportPreview,
    ExportPreviewBody,
    json_error_responses,
)
from events_svc.routes.deps import Ctx, answer, require
from events_svc.verbs import exports as verbs
from events_svc.verbs.exports import ExportStream

router = APIRouter(tags=["exports"])

Export = Annotated[Actor, require("registration:export")]


class CsvStream(StreamingResponse):
    """A streamed CSV that closes its export however the response ends."""

    media_type = "text/csv"

    def __init__(self, export: ExportStream, filename: str, release: Callable[[], None]) -> None:
        super().__init__(
            export.chunks(),
            media_type="text/csv; charset=utf-8",
            headers={
                "Content-Disposition": f'attachment; filename="{filename}"',
                "X-Export-Rows": str(export.row_count),
            },
        )
        self.export = export
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                await self.export.aclose()
            finally:
                self.release()  # the download slot, once the connection is back


@router.post("/admin/events/{event_id}/exports/preview", response_model=ExportPreview)
async def preview_export(
    ctx: Ctx, actor: Export, event_id: UUID, body: ExportPreviewBody
) -> Response:
    """Count what an export of these columns would hold and answer a confirmation token
    (10 minutes, single use, for this actor, event, columns and filter)."""
    result = await verbs.preview_export(
        ctx.db(),
        actor,
        event_id,
        body.columns,
        body.state,
        ctx.clock(),
        max_rows=ctx.settings.export_max_rows,
    )
    return answer(ExportPreview, result)


@router.post(
    "/admin/events/{event_id}/exports",
    status_code=200,
    response_class=CsvStream,
    responses={
        200: {
            "description": "The CSV: a header row of the column names, then one row per "
            "active registration, formula-neutralised, PII masked without registration:pii",
            "content": {"text/csv": {"schema": {"type": "string"}}},
        },
        **json_error_responses(*ADMIN_ERRORS),
    },
)
async def export_registrations(
    ctx: Ctx, actor: Export, event_id: UUID, body: ExportBody
) -> Response:
    """Download the export a preview confirmed (the confirmation is consumed)."""
    now = ctx.clock()
    slots = ctx.export_slots()
    if slots.locked():  # every download slot of this process streams: come back shortly
        raise errors.Busy("Other exports are streaming; retry shortly.", slots="exports")
    await slots.acquire()
    try:
        stream = await verbs.start_export(
            ctx.db(),
            actor,
            event_id,
            body.confirmation_token,
            now,
            timeout_s=ctx.settings.export_timeout_s,
            max_rows=ctx.settings.export_max_rows,
        )
    except BaseException:
        slots.release()
        raise
    filename = f"registrations-{event_id}-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}.csv"
    return CsvStream(stream, filename, slots.release)
