"""CRM lead rules: typed predicates over a closed vocabulary of axes, the answer-to-rule
bridge, the queue, one lead pass's summary, and the relink of a merged lead.

An axis outside the vocabulary is refused at parse: 422 `lead_axis_unknown`, whose
detail names the vocabulary. Every list and text is bounded."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import AfterValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from events_svc.errors.leads import LEAD_AXES
from events_svc.models.base import Bool, Command, Name, View

MAX_PREDICATES = 20
MAX_VALUE_IDS = 200

LeadTrigger = Literal["create", "confirm"]
LeadId = Annotated[str, Field(min_length=1, max_length=200)]


def _axis(value: str) -> str:
    if value not in LEAD_AXES:
        # the typed refusal of app._TYPED_REFUSALS; the value itself is never echoed
        raise PydanticCustomError(
            "lead_axis_unknown", "axis must be one of: event, event_type, company, question_answer"
        )
    return value


Axis = Annotated[
    str,
    AfterValidator(_axis),
    Field(max_length=32, json_schema_extra={"enum": list(LEAD_AXES)}),
]
ValueIds = Annotated[list[UUID], Field(min_length=1, max_length=MAX_VALUE_IDS)]


class LeadPredicate(Command):
    """One typed predicate: the axis and the ids it admits (ORed); `question_id` names the
    question of a `question_answer` predicate, whose `value_ids` are its answers."""

    axis: Axis
    value_ids: ValueIds
    question_id: UUID | None = None

    @model_validator(mode="after")
    def _question_on_answer_axis(self) -> LeadPredicate:
        if (self.axis == "question_answer") != (self.question_id is not None):
            raise ValueError("question_id is given on the question_answer axis, and only there")
        if len(set(self.value_ids)) != len(self.value_ids):
            raise ValueError("a value appears twice in value_ids")
        return self


Predicates = Annotated[list[LeadPredicate], Field(min_length=1, max_length=MAX_PREDICATES)]


class LeadRuleCreate(Command):
    """A rule: its predicates are ANDed (at least one)."""

    name: Name
    active: Bool = True
    trigger: LeadTrigger = "create"
    predicates: Predicates


class LeadRulePatch(Command):
    """The writable fields; `predicates`, when sent, replace the rule's predicates."""

    name: Name | None = None
    active: Bool | None = None
    trigger: LeadTrigger | None = None
    predicates: Predicates | None = None


class LeadRuleFromAnswer(Command):
    """A rule whose one predicate is (question, answers): the operator's "make a lead rule
    from this answer"."""

    question_id: UUID
    answer_ids: ValueIds
    name: Name | None = None


class LeadPredicateView(View):
    axis: str
    value_ids: list[UUID]
    question_id: UUID | None


class LeadGroups(View):
    """How many groups the rule handed to the sink, per grain."""

    per_order: int
    per_event_day: int


class LeadRuleView(View):
    """A rule as read; `company_id` (read-only) is the company of the actor that created
    it, null for a platform rule."""

    id: UUID
    company_id: UUID | None
    name: str
    active: bool
    trigger: LeadTrigger
    predicates: list[LeadPredicateView]
    groups: LeadGroups
    last_error: str | None
    last_error_at: datetime | None
    created_at: datetime
    updated_at: datetime


class LeadRequestView(View):
    """One event's entry in the queue."""

    event_id: UUID
    done: bool
    claimed_at: datetime | None
    error_detail: str | None
    attempts: int
    next_attempt_at: datetime | None
    queued_at: datetime
    updated_at: datetime


class LeadRunView(View):
    """What one lead pass did."""

    requests: int
    finished: int
    parked: int
    groups_created: int
    groups_updated: int
    registrations: int
    more: bool


class LeadRelink(Command):
    """The host merged `old_lead_id` into `new_lead_id`."""

    old_lead_id: LeadId
    new_lead_id: LeadId


class LeadRelinkView(View):
    moved: int


def predicates_of(cmd: Any) -> list[dict[str, Any]]:
    """The predicates of a command as rows: canonical uuid text in `value_ids`."""
    return [
        {
            "axis": p.axis,
            "value_ids": [str(v) for v in p.value_ids],
            "question_id": p.question_id,
        }
        for p in cmd.predicates
    ]
