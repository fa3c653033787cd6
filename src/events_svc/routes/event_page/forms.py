"""The event page's forms as typed: their fields read (bounded) into the intake's own
models, and a verb's refusal put beside the field it is about, or at the top, in an
attendee's words (the refusal's code stays on the page)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from fastapi import Request
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from events_svc import errors
from events_svc.models import MAX_PER_ORDER, AttendeeInput, IntakeAttendee
from events_svc.pages import EventForm
from events_svc.pages.event import IDENTITY, Alert
from events_svc.text import visible, whole_number

MAX_ITEMS = 5000  # fields read from a form: 30 attendees' fields and 100 answers each fit
MAX_ATTENDEES = MAX_PER_ORDER  # the intake's own bound

# what a refusal says, in the attendee's words (the code stays on the page, for machines)
WORDS = {
    "answer_required": "Please answer this question.",
    "answer_invalid": "Please check this answer.",
    "answer_not_of_question": "Choose one of the answers shown.",
    "question_not_on_event": "This question is not asked for this event any more.",
    "slot_required": "Choose a session.",
    "slot_not_in_event": "Choose one of the sessions shown.",
    "ticket_not_in_event": "Choose one of the tickets shown.",
    "event_seats_exhausted": "Sorry, there are not enough seats left for this choice.",
    "event_sale_window_closed": "This ticket is not on sale at the moment.",
    "event_registrations_closed": "Registration for this event is closed.",
    "event_cancelled": "This event is cancelled: registration is closed.",
    "rate_limited": "Too many attempts from here: please wait a minute and try again.",
    "form_expired": "This form has expired. Your entries are kept: check them and send the "
    "form again.",
    "form_unreadable": "The form could not be read: please fill it in again.",
    "waitlist_disabled": "This event has no waiting list.",
    "waitlist_not_needed": "Seats are free for this choice: you can register now.",
    "waitlist_already_joined": "This email is already on the waiting list for this choice.",
    "invalid_characters": "Please remove the control characters from this field.",
}
FIELD_WORDS = {
    "name": "Enter the full name.",
    "email": "Enter an email address, like name@example.org.",
    "phone": "Enter a phone number, like +44 20 7946 0000.",
    "company_name": "This company name is too long.",
    "seats": "Choose how many seats.",
    "attendees": "Choose how many attendees.",
}
# refusals shown at the top of the form, with their status
_TOP = frozenset(
    {
        "event_seats_exhausted",
        "event_sale_window_closed",
        "event_registrations_closed",
        "event_cancelled",
        "rate_limited",
        "waitlist_disabled",
        "waitlist_not_needed",
        "waitlist_already_joined",
    }
)
_ANSWER_CODES = frozenset(
    {
        "answer_required",
        "answer_invalid",
        "answer_not_of_question",
        "question_not_on_event",
        "invalid_characters",
    }
)


@dataclass
class Posted:
    """A posted form's text fields (first value of each name), bounded; `unreadable` when
    the body is no form this service can read."""

    values: dict[str, str]
    unreadable: bool = False

    def text(self, name: str) -> str:
        return self.values.get(name, "").strip()

    def raw(self, name: str) -> str:
        """The field exactly as sent (a whole number: no space is trimmed)."""
        return self.values.get(name, "")

    def shown(self, name: str) -> str:
        """The field as the page shows it again: no control character (a refused entry
        is shown, never acted on); line breaks kept for a multi-line answer."""
        return visible(self.values.get(name, ""), multiline=True)


async def read_form(request: Request) -> Posted:
    """The form's fields (NUL characters dropped); an unreadable body reads as an empty
    form that says so."""
    try:
        data = await request.form(max_files=0, max_fields=MAX_ITEMS, max_part_size=64 * 1024)
    except (StarletteHTTPException, ValueError, KeyError, AssertionError):
        return Posted({}, unreadable=True)
    values: dict[str, str] = {}
    for name, value in data.multi_items()[:MAX_ITEMS]:
        if isinstance(value, UploadFile) or len(name) > 80:
            continue
        values.setdefault(name, value.replace("\x00", ""))
    return Posted(values)


def uuid_of(raw: str) -> UUID | None:
    try:
        return UUID(raw) if raw else None
    except ValueError:
        return None


def count_of(raw: str) -> int:
    """The number of attendee blocks asked for, 1 to the intake's bound (1 when it is not
    a number: `count_valid` says so)."""
    number = number_of(raw)
    return max(1, min(number, MAX_ATTENDEES)) if number is not None else 1


def count_valid(raw: str) -> bool:
    """Whether the attendees' number as typed is one (empty: the default, 1)."""
    return not raw or number_of(raw) is not None


def number_of(raw: str) -> int | None:
    """A small whole number as typed, ASCII digits only (None: not one)."""
    return whole_number(raw, max_digits=4)


def typed(posted: Posted, page: dict[str, Any]) -> EventForm:
    """What the attendee typed, as the page shows it again."""
    count = count_of(posted.raw("attendees"))
    attendees = []
    for n in range(1, count + 1):
        prefix = f"attendee-{n}-"
        values: dict[str, Any] = {k: posted.shown(prefix + k) for k in IDENTITY}
        values["answers"] = {
            str(q["id"]): posted.shown(f"{prefix}q-{q['id']}")
            for q in page["questions"]
            if not q["once_per_order"]
        }
        attendees.append(values)
    general = {
        str(q["id"]): posted.shown(f"q-{q['id']}") for q in page["questions"] if q["once_per_order"]
    }
    return EventForm(
        ticket=posted.text("event_ticket_id")[:40],
        slot=posted.text("event_slot_id")[:40],
        count=count,
        attendees=attendees,
        general=general,
    )


def _question_field(page: dict[str, Any], form: EventForm, question_id: str, code: str) -> str:
    """Where a refusal about a question shows: its field on the first attendee whose answer
    is missing (or the first attendee), once per order its one field."""
    question = next((q for q in page["questions"] if str(q["id"]) == question_id), None)
    if question is None:
        return ""
    if question["once_per_order"] and question["kind"] not in IDENTITY:
        return f"q-{question_id}"
    suffix = question["kind"] if question["kind"] in IDENTITY else f"q-{question_id}"
    for n, values in enumerate(form.attendees, start=1):
        given = values[suffix] if suffix in IDENTITY else values["answers"].get(question_id, "")
        if code != "answer_required" or not str(given).strip():
            return f"attendee-{n}-{suffix}"
    return f"attendee-1-{suffix}"


def attendees_of(posted: Posted, page: dict[str, Any], form: EventForm) -> list[AttendeeInput]:
    """The intake's attendees from the form; every field problem noted on `form.errors`."""
    attendees = []
    for n in range(1, form.count + 1):
        prefix = f"attendee-{n}-"
        raw = {k: posted.text(prefix + k) for k in IDENTITY}
        answers: list[dict[str, Any]] = []
        fields: list[str] = []
        for q in page["questions"]:
            qid = str(q["id"])
            if q["kind"] in IDENTITY:  # the attendee's own field answers it
                name, value = prefix + q["kind"], raw[q["kind"]]
            elif q["once_per_order"]:
                if n > 1:
                    continue
                name, value = f"q-{qid}", posted.text(f"q-{qid}")
            else:
                name, value = f"{prefix}q-{qid}", posted.text(f"{prefix}q-{qid}")
            if not value:
                continue
            if q["kind"] == "simple_choice":
                choice = uuid_of(value)
                if choice is None:
                    form.errors[name] = WORDS["answer_not_of_question"]
                    continue
                answers.append({"question_id": q["id"], "value_answer_id": choice})
            else:
                answers.append({"question_id": q["id"], "value_text": value})
            fields.append(name)
        try:
            attendees.append(IntakeAttendee.model_validate({**raw, "answers": answers}))
        except ValidationError as exc:
            for err in exc.errors():
                loc = err.get("loc", ())
                control = err.get("type") == "invalid_characters"
                if loc and loc[0] in IDENTITY:
                    words = WORDS["invalid_characters"] if control else FIELD_WORDS[str(loc[0])]
                    form.errors.setdefault(prefix + str(loc[0]), words)
                elif len(loc) > 1 and loc[0] == "answers" and isinstance(loc[1], int):
                    words = WORDS["invalid_characters"] if control else "This answer is too long."
                    form.errors.setdefault(fields[loc[1]], words)
    return [AttendeeInput.model_validate(a.model_dump()) for a in attendees]


def refusal(exc: errors.DomainError, page: dict[str, Any], form: EventForm, prefix: str) -> int:
    """Put a verb's refusal on the form; answers the status (raises what a form cannot
    show: the uniform 404, an unavailable database)."""
    code = exc.code
    words = WORDS.get(code, exc.detail)
    if code in _TOP:
        form.alerts.append(Alert(code, words))
        return exc.status
    if code == "per_order_cap_exceeded":
        field = prefix + "seats" if prefix else "attendees"
        maximum = exc.fields.get("maximum")
        words = f"At most {maximum} can register together for this choice."
    elif code in _ANSWER_CODES:
        field = _question_field(page, form, str(exc.fields.get("question_id", "")), code)
    elif code in ("slot_required", "slot_not_in_event"):
        field = prefix + "event_slot_id"
    elif code == "ticket_not_in_event":
        field = prefix + "event_ticket_id"
    elif exc.status == 422:
        field = ""
    else:
        raise exc
    if field and not _shown(page, field.removeprefix("waitlist-")):
        field = ""  # not a field of this page: the message goes to the top
    if field:
        form.errors[field] = words
    else:
        form.alerts.append(Alert(code, words))
    return 422


def _shown(page: dict[str, Any], field: str) -> bool:
    """Whether the page has this field (a ticket choice only with tickets, a session only
    on a multi-slot event)."""
    if field == "event_ticket_id":
        return bool(page["tickets"])
    if field == "event_slot_id":
        return bool(page["event"]["is_multi_slots"])
    return True
