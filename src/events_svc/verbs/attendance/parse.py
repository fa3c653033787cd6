"""Import rows as stored: a CSV body or the JSON rows, turned into what resolves each row.

A stored row keeps only a barcode (1 to 20 decimal digits) or a registration id (a
canonical uuid), trimmed; a row with neither usable value is `malformed` and keeps
nothing. Values are never evaluated: `=1+1` or `@SUM(A1)` is text that is not a barcode,
so its row is malformed. Rows are numbered from 1, the header not counted.

The CSV is UTF-8 (a BOM is dropped), comma or semicolon separated (whichever the header
line holds more of), with a header row naming a `barcode` and/or a `registration_id`
column (any case; other columns are ignored and never stored). Blank lines are skipped
and not numbered. More than `MAX_IMPORT_ROWS` data rows is a 413, like a body too large.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from uuid import UUID

from events_svc import errors
from events_svc.models.attendance import MAX_IMPORT_ROWS

_BARCODE = re.compile(r"[0-9]{1,20}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_COLUMNS = ("barcode", "registration_id")


@dataclass(frozen=True)
class StoredRow:
    """What one data row keeps: its number and what resolves it (or `malformed`)."""

    row_no: int
    barcode: str | None
    registration_id: UUID | None

    @property
    def malformed(self) -> bool:
        return self.barcode is None and self.registration_id is None


def too_many_rows() -> errors.PayloadTooLarge:
    return errors.PayloadTooLarge(
        f"An import holds at most {MAX_IMPORT_ROWS} rows.", limit_rows=MAX_IMPORT_ROWS
    )


def _row(row_no: int, barcode: str | None, registration_id: str | None) -> StoredRow:
    """A row from its two raw values: both must be usable when both are given."""
    code = (barcode or "").strip()
    ident = (registration_id or "").strip()
    good_code = code if _BARCODE.fullmatch(code) else None
    good_id = UUID(ident) if _UUID.fullmatch(ident) else None
    if (code and good_code is None) or (ident and good_id is None):
        return StoredRow(row_no, None, None)  # a value given that cannot name anything
    return StoredRow(row_no, good_code, good_id)


def rows_from_values(values: Iterable[tuple[str | None, str | None]]) -> list[StoredRow]:
    """Stored rows from (barcode, registration_id) pairs, numbered from 1."""
    rows: list[StoredRow] = []
    for number, (barcode, registration_id) in enumerate(values, start=1):
        if number > MAX_IMPORT_ROWS:
            raise too_many_rows()
        rows.append(_row(number, barcode, registration_id))
    return rows


def _delimiter(text: str) -> str:
    header = text.split("\n", 1)[0]
    return ";" if header.count(";") > header.count(",") else ","


def _key_columns(header: list[str]) -> tuple[int | None, int | None]:
    names = [cell.strip().lower() for cell in header]
    found: list[int | None] = []
    for column in _COLUMNS:
        at = [i for i, name in enumerate(names) if name == column]
        if len(at) > 1:
            raise errors.ImportHeaderInvalid(
                f"The header names the {column} column twice.", column=column
            )
        found.append(at[0] if at else None)
    if found[0] is None and found[1] is None:
        raise errors.ImportHeaderInvalid()
    return found[0], found[1]


def _cell(record: list[str], index: int | None) -> str | None:
    if index is None or index >= len(record):
        return None
    return record[index]


def rows_from_csv(body: bytes) -> list[StoredRow]:
    """Stored rows of a CSV body (see the module docstring for the format)."""
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise errors.ImportCsvInvalid("The CSV is not UTF-8 text.") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=_delimiter(text), strict=True)
    try:
        header = next(reader, None)
        if header is None:
            raise errors.ImportHeaderInvalid("The CSV is empty: a header row is required.")
        barcode_at, id_at = _key_columns(header)
        pairs = ((_cell(record, barcode_at), _cell(record, id_at)) for record in reader if record)
        return rows_from_values(pairs)
    except csv.Error:
        # the line only: the reader's message may quote the record
        raise errors.ImportCsvInvalid(
            f"The CSV is not well formed near line {reader.line_num}.", line=reader.line_num
        ) from None
