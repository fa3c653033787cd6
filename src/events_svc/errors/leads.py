"""The refusals of the CRM lead rules (a 404 and two 422s)."""

from __future__ import annotations

from typing import Any

from events_svc.errors.base import DomainError

LEAD_AXES = ("event", "event_type", "company", "question_answer")


class LeadNotFound(DomainError):
    """No provenance names this lead."""

    code = "lead_not_found"
    status = 404


class LeadAxisUnknown(DomainError):
    """A predicate axis must be one of the closed vocabulary: event, event_type, company,
    question_answer."""

    code = "lead_axis_unknown"
    status = 422

    def __init__(self, detail: str | None = None, **fields: Any) -> None:
        super().__init__(detail, vocabulary=list(LEAD_AXES), **fields)


class LeadPredicateOutOfScope(DomainError):
    """A predicate names an event, type, company or question the actor cannot see."""

    code = "lead_predicate_out_of_scope"
    status = 422
