"""What counts as an email address and as a phone number: ONE definition, for the input
checks of the API (models) and for the scheduler deciding whether an attendee can be
reached (an address that fails here is `recipient_invalid`)."""

from __future__ import annotations

import re

EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
PHONE_MAX = 32
PHONE_MIN_DIGITS = 6
PHONE_CHARS = r"[0-9 +().-]*"  # digits, spaces and + - ( ) .
_PHONE = re.compile(PHONE_CHARS)


def is_email(text: str) -> bool:
    return bool(EMAIL.match(text))


def is_phone(text: str) -> bool:
    """At most 32 characters of digits, spaces and `+ - ( ) .`, with at least 6 digits."""
    return (
        len(text) <= PHONE_MAX
        and _PHONE.fullmatch(text) is not None
        and sum(c.isdigit() for c in text) >= PHONE_MIN_DIGITS
    )
