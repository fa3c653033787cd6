"""Service answers: liveness, readiness, and the one error body every refusal uses,
with the table of error answers the routers declare in the OpenAPI document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict

from events_svc.models.base import View


class HealthView(View):
    status: Literal["ok"]


class ReadyView(View):
    """`ready`, or `unavailable` with the reason (and the pending migrations)."""

    status: Literal["ready", "unavailable"]
    reason: str | None = None
    pending: list[str] | None = None


class ErrorDetail(View):
    """A stable `code`, a safe `detail`; refusals may add fields (`field`, `errors`,
    `line`, `column`, `scope` ...), never an input value."""

    model_config = ConfigDict(extra="allow")

    code: str
    detail: str


class ErrorBody(View):
    """Every refusal: a stable code, a safe detail, sometimes more fields."""

    error: ErrorDetail


_ERROR_TEXT = {
    401: "unauthenticated",
    403: "missing_scope",
    404: "not_found (or the uniform event_not_published of public links)",
    409: "a conflict with the current state (typed code)",
    410: "waitlist_offer_expired (the offer's deadline has passed)",
    412: "stale_revision",
    413: "payload_too_large",
    428: "precondition_required (this write needs If-Match)",
    422: "unknown_field, validation_failed (with `field` and `errors`), invalid_json "
    "(with `line` and `column`), date_out_of_range, phone_invalid, or a typed refusal",
    429: "rate_limited (Retry-After)",
    503: "busy, database_unavailable or a missing composition (Retry-After)",
}
ADMIN_ERRORS = (401, 403, 404, 409, 412, 413, 422, 503)
PUBLIC_ERRORS = (404, 409, 413, 422, 429, 503)


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` entries of these error statuses, all with the error body."""
    return {code: {"model": ErrorBody, "description": _ERROR_TEXT[code]} for code in codes}


def json_error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The same entries for a route whose success is not JSON: FastAPI would file a
    `model` under the route's own media type, so the JSON error body is named outright."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {code: {"description": _ERROR_TEXT[code], "content": body} for code in codes}
