"""Organisers' message templates: checked when written, bounded when rendered.

Templates are hostile input. `check_template` (check.py) refuses one that does not
compile or names anything outside `CONTEXT_FIELDS`. `compile_template` and `render`
(sandbox.py) run them in one bounded sandbox, and any failure is `RenderFailed`, whose
message is safe to log and store (exception type, template line, spent budget; never
the exception's text, which may quote attendee data). The limits (budget.py):
MAX_OUTPUT bytes of output (UTF-8), and characters of any one value built (strings,
lists, format widths, filter and str-method results: sized before they are built where
an argument could inflate them); MAX_LOOP_ITEMS items in one loop or range and MAX_ITEMS in a whole
render, so nested loops cannot multiply; MAX_INT_BITS per integer; MAX_GROWTH
characters appended to lists, dicts and sets; MAX_DEPTH nested macro calls;
DEADLINE_SECONDS of wall-clock time, checked by every hook. `render_pairs` renders a
batch of recipients in a worker thread, so the event loop keeps serving, within ONE
DEADLINE_SECONDS for the whole batch.
"""

from events_svc.templating.budget import (
    DEADLINE_SECONDS,
    MAX_DEPTH,
    MAX_GROWTH,
    MAX_INT_BITS,
    MAX_ITEMS,
    MAX_LOOP_ITEMS,
    MAX_OUTPUT,
    RenderFailed,
)
from events_svc.templating.check import CONTEXT_FIELDS, check_template
from events_svc.templating.sandbox import compile_template, render, render_pairs

__all__ = [
    "CONTEXT_FIELDS",
    "DEADLINE_SECONDS",
    "MAX_DEPTH",
    "MAX_GROWTH",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_LOOP_ITEMS",
    "MAX_OUTPUT",
    "RenderFailed",
    "check_template",
    "compile_template",
    "render",
    "render_pairs",
]
