"""The refusals of the attendance import (a 409, a 415 and 422s). None of them carries
a cell of the import: a row's problem is its outcome, never an error body."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class IdempotencyKeyRequired(DomainError):
    """This write needs an Idempotency-Key header (1 to 200 visible ASCII characters)."""

    code = "idempotency_key_required"
    status = 422


class UnsupportedMediaType(DomainError):
    """The body must be text/csv or application/json."""

    code = "unsupported_media_type"
    status = 415


class ImportHeaderInvalid(DomainError):
    """The CSV needs a header row naming a barcode or registration_id column (once each)."""

    code = "import_header_invalid"
    status = 422


class ImportCsvInvalid(DomainError):
    """The CSV cannot be read: it is not UTF-8 text, or a record is not well formed."""

    code = "import_csv_invalid"
    status = 422


class ImportFinished(DomainError):
    """The import job is finished (completed or cancelled): it cannot change any more."""

    code = "import_finished"
    status = 409
