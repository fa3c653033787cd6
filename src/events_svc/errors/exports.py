"""The refusals of the registration export: its columns (422) and its confirmation (409)."""

from __future__ import annotations

from typing import Any

from events_svc.errors.base import DomainError

# the closed list of exportable columns (api.md, "Operator operations")
EXPORT_COLUMNS = (
    "id",
    "name",
    "email",
    "phone",
    "company_name",
    "state",
    "ticket",
    "slot",
    "barcode",
    "created_at",
    "date_closed",
)


class ExportColumnUnknown(DomainError):
    """A column must be one of the closed list: id, name, email, phone, company_name, state,
    ticket, slot, barcode, created_at, date_closed."""

    code = "export_column_unknown"
    status = 422

    def __init__(self, detail: str | None = None, **fields: Any) -> None:
        super().__init__(detail, allowed=list(EXPORT_COLUMNS), **fields)


class ExportColumnDuplicate(DomainError):
    """A column may be asked for once."""

    code = "export_column_duplicate"
    status = 422


class ExportConfirmationInvalid(DomainError):
    """The confirmation is unknown, used, expired, or another actor's or event's: preview
    the export again."""

    code = "export_confirmation_invalid"
    status = 409


class ExportTooLarge(DomainError):
    """The export would hold more rows than one export may (EVENTS_EXPORT_MAX_ROWS): filter
    it by state, or raise the limit."""

    code = "export_too_large"
    status = 422


class TooManyBadges(DomainError):
    """One badge sheet holds at most 5 000 badges: filter by ticket, slot or state."""

    code = "too_many_badges"
    status = 422
