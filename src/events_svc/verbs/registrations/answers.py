"""The register verb's answers: general questions shared across a group, and each
attendee's answers checked against the event's questions (identity kinds fill the
attendee's fields and store no answer row)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.models import AnswerInput, AttendeeInput
from events_svc.text import has_breaks

_IDENTITY_KINDS = {"name", "email", "phone", "company_name"}
IDENTITY_FIELDS = ("name", "email", "phone", "company_name")


def share_general_answers(
    attendees: list[AttendeeInput], questions: dict[UUID, dict[str, Any]]
) -> list[AttendeeInput]:
    """General questions (`once_per_order`) are asked once per group: the first attendee's
    answer is copied to every other attendee; another attendee may repeat it, never differ."""
    general = {qid for qid, q in questions.items() if q["once_per_order"]}
    if not general or len(attendees) < 2:
        return attendees
    shared = [a for a in attendees[0].answers if a.question_id in general]
    given = {(a.question_id, a.value_answer_id, a.value_text) for a in shared}
    group = [attendees[0]]
    for attendee in attendees[1:]:
        own = []
        for a in attendee.answers:
            if a.question_id not in general:
                own.append(a)
            elif (a.question_id, a.value_answer_id, a.value_text) not in given:
                raise errors.AnswerInvalid(
                    "This question is asked once per order: answer it on the first attendee.",
                    question_id=str(a.question_id),
                )
        group.append(attendee.model_copy(update={"answers": own + shared}))
    return group


def one_line_answers(
    attendee: AttendeeInput, questions: dict[UUID, dict[str, Any]], at: str
) -> None:
    """Only a `text_box` answer is multi-line: any other text answer with a tab or a line
    break is refused, naming it at `at` (where the attendee's answers are in the caller's
    body). The model refused every other control character already."""
    for index, answer in enumerate(attendee.answers):
        q = questions.get(answer.question_id)
        text = answer.value_text
        if q is not None and q["kind"] != "text_box" and text is not None and has_breaks(text):
            raise errors.InvalidCharacters(
                "This answer is one line: tab and line breaks are not allowed.",
                field=f"{at}.{index}.value_text",
                question_id=str(q["id"]),
            )


def resolve_answers(
    attendee: AttendeeInput, questions: dict[UUID, dict[str, Any]], require_mandatory: bool
) -> tuple[dict[str, str], list[AnswerInput]]:
    """(identity fields filled from identity questions, answer rows to store)."""
    identity: dict[str, str] = {}
    rows: list[AnswerInput] = []
    seen: set[UUID] = set()
    for answer in attendee.answers:
        q = questions.get(answer.question_id)
        if q is None:
            raise errors.QuestionNotOnEvent(question_id=str(answer.question_id))
        if answer.question_id in seen:
            raise errors.AnswerInvalid("One answer per question.", question_id=str(q["id"]))
        seen.add(answer.question_id)
        kind = q["kind"]
        if kind == "simple_choice":
            if answer.value_answer_id is None or answer.value_text is not None:
                raise errors.AnswerInvalid(
                    "Choose one of the suggested answers.", question_id=str(q["id"])
                )
            if answer.value_answer_id not in q["answer_ids"]:
                raise errors.AnswerNotOfQuestion(question_id=str(q["id"]))
            rows.append(answer)
        elif answer.value_text is None or answer.value_answer_id is not None:
            raise errors.AnswerInvalid("This question takes a text.", question_id=str(q["id"]))
        elif kind in _IDENTITY_KINDS:
            identity[kind] = answer.value_text  # identity kinds create no answer rows
        else:
            rows.append(answer)
    if require_mandatory:
        for q in questions.values():
            if q["is_mandatory_answer"] and q["id"] not in seen:
                raise errors.AnswerRequired(question_id=str(q["id"]))
    return identity, rows
