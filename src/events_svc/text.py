"""What typed text may hold, for every layer that reads it (the models, the forms, the
query strings, the body limit).

- A whole number typed by a person or carried by a query string or a header is ASCII
  digits only: `str.isdigit()` also accepts superscripts and other scripts' digits,
  which `int()` then refuses; a sign, a space, an underscore or a fraction is not a
  whole number either.
- Person-facing text (names, company names, answers) holds no control character: C0
  (U+0000 to U+001F), U+007F, C1 (U+0080 to U+009F) and no unpaired surrogate; a
  multi-line field may hold tab, LF and CR. Letters of every script, combining marks,
  emoji and punctuation are all accepted.
"""

from __future__ import annotations

import re

MAX_DIGITS = 18  # far past every bound a field states; int() stays cheap

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_BUT_BREAKS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_BREAKS = re.compile("[\t\n\r]")


def whole_number(raw: str, max_digits: int = MAX_DIGITS) -> int | None:
    """The whole number `raw` spells in ASCII digits (1 to `max_digits` of them), or None."""
    if 0 < len(raw) <= max_digits and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def has_control(text: str, *, multiline: bool = False) -> bool:
    """Whether person-facing `text` holds a character it may not (see the module)."""
    return (_CONTROL_BUT_BREAKS if multiline else _CONTROL).search(text) is not None


def has_breaks(text: str) -> bool:
    """Whether `text` holds a tab or a line break (only a multi-line field may)."""
    return _BREAKS.search(text) is not None


def visible(text: str, *, multiline: bool = False) -> str:
    """`text` without the characters `has_control` refuses: what a page may show again of
    a refused entry."""
    return (_CONTROL_BUT_BREAKS if multiline else _CONTROL).sub("", text)
