"""The registration export: the preview (columns and filter), its answer, the export body."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from events_svc.errors.exports import EXPORT_COLUMNS
from events_svc.models.base import Command, RegistrationState, View

# The columns are plain text here and checked by the verb, which answers a typed 422 naming
# the unknown or repeated column; the schema still documents the closed list.
ColumnName = Annotated[str, Field(min_length=1, max_length=64)]
PiiMode = Literal["masked", "full"]


class ExportPreviewBody(Command):
    columns: Annotated[
        list[ColumnName],
        Field(
            min_length=1,
            max_length=len(EXPORT_COLUMNS),
            description="Exported columns, in this order (each once): " + ", ".join(EXPORT_COLUMNS),
            json_schema_extra={"items": {"enum": list(EXPORT_COLUMNS), "maxLength": 64}},
        ),
    ]
    state: RegistrationState | None = Field(
        default=None, description="only registrations in this state (active rows only)"
    )


class ExportPreview(View):
    row_count: int
    columns: list[str]
    state: RegistrationState | None
    pii: PiiMode
    confirmation_token: str
    expires_at: datetime


class ExportBody(Command):
    confirmation_token: Annotated[str, Field(min_length=1, max_length=128)]
