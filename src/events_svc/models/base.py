"""The two bases (commands in, views out) and the field types every noun shares.

Commands forbid unknown fields and refuse NUL characters (PostgreSQL cannot
store them). JSON types are strict field by field: an integer is a JSON number
without a fraction, a boolean is `true`/`false`, an instant is RFC 3339 text
with an offset in the years 1900 to 9999. Every integer has bounds, so the
OpenAPI document states them and an out-of-range value is a 422 naming the
field, never a database overflow. Views are lax (rows and jsonb read back) and
ignore what they do not declare: a view is the contract of its answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    field_validator,
)
from pydantic_core import PydanticCustomError

from events_svc.addresses import PHONE_CHARS, PHONE_MAX, is_email, is_phone
from events_svc.text import has_control, whole_number

KanbanState = Literal["normal", "blocked", "done", "cancel"]
BadgeFormat = Literal["A4_french_fold", "A6", "four_per_sheet"]
IntervalUnit = Literal["now", "hours", "days", "weeks", "months"]
IntervalKind = Literal[
    "after_sub", "before_event", "after_event_start", "after_event", "before_event_end"
]
Channel = Literal["mail", "sms"]
QuestionKind = Literal["simple_choice", "text_box", "name", "email", "phone", "company_name"]
RegistrationState = Literal["draft", "open", "done", "cancel"]

# --- bounds (docs/architecture.md, "Input bounds") ---------------------------------------

MAX_SEATS = 1_000_000
MAX_SEQUENCE = 1_000_000
MAX_PER_ORDER = 30
MAX_COLOR = 11
MAX_INTERVAL = 10_000
MIN_TTL_S = 60
MAX_TTL_S = 5 * 365 * 86400
MIN_YEAR, MAX_YEAR = 1900, 9999

Bool = StrictBool
Seats = Annotated[int, Strict(), Field(ge=0, le=MAX_SEATS)]
Sequence = Annotated[int, Strict(), Field(ge=0, le=MAX_SEQUENCE)]
PerOrder = Annotated[int, Strict(), Field(ge=0, le=MAX_PER_ORDER)]
Color = Annotated[int, Strict(), Field(ge=0, le=MAX_COLOR)]
IntervalNbr = Annotated[int, Strict(), Field(ge=0, le=MAX_INTERVAL)]
TtlSeconds = Annotated[int, Strict(), Field(ge=MIN_TTL_S, le=MAX_TTL_S)]

Name = Annotated[str, Field(min_length=1, max_length=256)]


def _one_line(value: str) -> str:
    if has_control(value):
        # the message never repeats the value: it may be personal data
        raise PydanticCustomError("invalid_characters", "Control characters are not allowed")
    return value


def _multi_line(value: str) -> str:
    if has_control(value, multiline=True):
        raise PydanticCustomError(
            "invalid_characters", "Control characters (but tab and line breaks) are not allowed"
        )
    return value


# person-facing text: no control character (text.has_control); multi-line: tab, LF, CR too
PersonText = AfterValidator(_one_line)
MultiLineText = AfterValidator(_multi_line)


def _whole_text(value: Any) -> Any:
    # a whole number typed (a form, a query string) is ASCII digits only: no sign, space,
    # fraction or another script's digits; a JSON number goes on to the field's own checks
    if isinstance(value, str):
        number = whole_number(value)
        if number is None:
            raise PydanticCustomError("int_parsing", "Input should be a whole number (digits 0-9)")
        return number
    return value


WholeNumber = BeforeValidator(_whole_text)
Text = Annotated[str, Field(max_length=20_000)]
ZoneName = Annotated[str, Field(max_length=64)]


def _instant_text(value: Any) -> Any:
    # Lax parsing would read a JSON number as epoch seconds: an instant is RFC 3339 text.
    if isinstance(value, str | datetime):
        return value
    raise PydanticCustomError("datetime_type", "Input should be an RFC 3339 date-time string")


def _instant_range(value: datetime) -> datetime:
    # Checked in UTC, by naive arithmetic: converting 9999-12-31T23:00-05:00 overflows.
    try:
        offset = value.utcoffset()
        utc = value.replace(tzinfo=None) - offset if offset is not None else value
        inside = MIN_YEAR <= utc.year <= MAX_YEAR
    except OverflowError:
        inside = False
    if not inside:
        raise PydanticCustomError(
            "date_out_of_range", "Instants must lie in the years 1900 to 9999 (UTC)"
        )
    return value


Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_instant_text),
    AfterValidator(_instant_range),
    Field(description="RFC 3339 with an offset, years 1900 to 9999 in UTC"),
]


def _phone_shape(value: str) -> str:
    if value and not is_phone(value):  # an optional phone may be empty
        # the message never repeats the value: it is personal data
        raise PydanticCustomError("phone_invalid", "Not a phone number")
    return value


Phone = Annotated[
    str,
    AfterValidator(_phone_shape),
    # documented shape; the validator decides, so every miss is phone_invalid
    Field(json_schema_extra={"maxLength": PHONE_MAX, "pattern": f"^{PHONE_CHARS}$"}),
]


def _email_shape(value: str) -> str:
    if value and not is_email(value):
        raise ValueError("not an email address")
    return value


Email = Annotated[str, Field(max_length=320), AfterValidator(_email_shape)]


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list | tuple):
        return any(_has_nul(v) for v in value)
    return False


class Command(BaseModel):
    """Base of every request body."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        if _has_nul(value):
            raise ValueError("NUL characters are not allowed in text")
        return value

    def given(self) -> dict[str, Any]:
        """Only the fields the client sent (for patches)."""
        return {k: getattr(self, k) for k in self.model_fields_set}


class View(BaseModel):
    """Base of every answer body: built once from the verb's dict, serialised once."""

    model_config = ConfigDict(extra="ignore")


ItemT = TypeVar("ItemT", bound=BaseModel)


class Page(View, Generic[ItemT]):
    """A keyset page: `next_cursor` is null on the last page."""

    items: list[ItemT]
    next_cursor: str | None = None
