"""The question library: questions, their suggested answers, and the event links."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import Field

from events_svc.models.base import Bool, Command, Name, QuestionKind, Sequence, View


class AnswerCreate(Command):
    name: Name
    sequence: Sequence = 10


class AnswerPatch(Command):
    name: Name | None = None
    sequence: Sequence | None = None


class QuestionCreate(Command):
    title: Name
    question_type: QuestionKind = "simple_choice"
    is_mandatory_answer: Bool = False
    is_default: Bool = False
    is_reusable: Bool = False
    sequence: Sequence = 10
    answers: list[AnswerCreate] = Field(default_factory=list, max_length=200)


class QuestionPatch(Command):
    title: Name | None = None
    question_type: QuestionKind | None = None
    is_mandatory_answer: Bool | None = None
    is_default: Bool | None = None
    is_reusable: Bool | None = None
    sequence: Sequence | None = None


class AnswerView(View):
    id: UUID
    name: str
    sequence: int


class QuestionView(View):
    id: UUID
    title: str
    question_type: QuestionKind
    is_mandatory_answer: bool
    is_default: bool
    is_reusable: bool
    sequence: int
    answers: list[AnswerView]
    created_at: datetime
    updated_at: datetime


class EventQuestionView(QuestionView):
    """A question as an event asks it: `link_sequence` orders the event's questions."""

    link_sequence: int
    once_per_order: bool = False
