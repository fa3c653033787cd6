"""The attendance import: the JSON form of an import (its CSV twin is read by
`verbs.attendance.parse`), and the job with its progress and first errors.

A row's values are plain data checked by the parser: a value that is not a barcode or a
registration id makes its row `malformed_row` (a NUL too), so the row model does not
refuse NUL characters the way commands do; the strings are bounded by the schema."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from events_svc.models.base import Command, View

MAX_IMPORT_ROWS = 10_000
MAX_IMPORT_BYTES = 5 * 1024 * 1024  # the body limit of this one route (bodylimit.py)
MAX_CELL = 200  # characters of one JSON value (a barcode is at most 20 digits)

ImportState = Literal["queued", "running", "paused", "completed", "cancelled", "failed"]
RowError = Literal[
    "unknown_barcode", "wrong_event", "not_confirmed", "duplicate_row", "malformed_row"
]
NOT_TEXT = "\x00"  # what a number or a boolean becomes: no barcode, no id, so malformed


def _scalar_text(value: Any) -> Any:
    """A number or a boolean names nothing (a barcode is a string of digits: `12345` would
    lose leading zeros): it makes its row `malformed_row`, never the whole body."""
    if isinstance(value, int | float | bool):
        return NOT_TEXT
    return value


Cell = Annotated[Annotated[str, Field(max_length=MAX_CELL)] | None, BeforeValidator(_scalar_text)]


class ImportRow(BaseModel):
    """One data row: a barcode or a registration id (both: they must name the same
    registration)."""

    model_config = ConfigDict(extra="forbid")

    barcode: Cell = None
    registration_id: Cell = None


class ImportRows(Command):
    """The JSON body of an import: at most 10 000 rows (more: 413 payload_too_large)."""

    rows: Annotated[list[ImportRow], Field(max_length=MAX_IMPORT_ROWS)]


class ImportRowError(View):
    """A row in error: its 1-based data row number and its code, never its text."""

    row: int
    code: RowError


class ImportJobView(View):
    """An import job: progress counters, the first 100 rows in error (by row number), and
    the state of its back-off when a batch failed (`last_error` is an error class)."""

    id: UUID
    event_id: UUID
    state: ImportState
    total: int
    processed: int
    marked: int
    already_marked: int
    error_count: int
    errors: list[ImportRowError]
    last_error: str | None = None
    attempts: int = 0
    next_attempt_at: datetime | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def import_body_schema() -> dict[str, Any]:
    """The OpenAPI request body of an import: a CSV text, or the JSON rows (inlined: the
    route reads its body itself, so the framework does not list the model)."""
    rows = ImportRows.model_json_schema()
    defs = rows.pop("$defs", {})
    csv_text = {"type": "string", "maxLength": MAX_IMPORT_BYTES}
    return {
        "required": True,
        "content": {
            "text/csv": {"schema": csv_text},
            "application/json": {"schema": _inline(rows, defs)},
        },
    }
