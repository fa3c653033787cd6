"""Answers about the request itself: who asks, what they may see, its size and rate."""

from __future__ import annotations

from events_svc.errors.base import DomainError


class Unauthenticated(DomainError):
    """A valid bearer token is required."""

    code = "unauthenticated"
    status = 401
    headers = {"WWW-Authenticate": "Bearer"}


class MissingScope(DomainError):
    """The token lacks the scope this route needs."""

    code = "missing_scope"
    status = 403


class EventNotPublished(DomainError):
    """Not found."""

    code = "event_not_published"
    status = 404


class NoActiveTickets(DomainError):
    """The link's registrations are all cancelled or drafts: no ticket to print."""

    code = "no_active_tickets"
    status = 404


class NotFound(DomainError):
    """No such object."""

    code = "not_found"
    status = 404


class StaleRevision(DomainError):
    """The object changed since the revision named in If-Match."""

    code = "stale_revision"
    status = 412


class PreconditionRequired(DomainError):
    """This write needs If-Match naming the version it was based on."""

    code = "precondition_required"
    status = 428


class PayloadTooLarge(DomainError):
    """The request body is larger than this route accepts."""

    code = "payload_too_large"
    status = 413


class RateLimited(DomainError):
    """Too many requests; retry later."""

    code = "rate_limited"
    status = 429


class CsrfRefused(DomainError):
    """The form was not sent from a page of this console session; reload the page and send
    it again."""

    code = "csrf_failed"
    status = 403


class MethodNotAllowed(DomainError):
    """This address does not answer that method."""

    code = "method_not_allowed"
    status = 405
