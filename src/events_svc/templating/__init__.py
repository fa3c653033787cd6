"""Organisers' message templates: checked when written, bounded when rendered.

Templates are hostile input. `check_template` (check.py) refuses one whose parsed tree
passes MAX_NODES nodes or MAX_TREE_DEPTH levels (tree.py: `template_too_complex`), that
does not compile, or that names anything outside `CONTEXT_FIELDS`; `check_texts` runs
it, and the store's compiles run, in a small pool of worker threads (worker.py:
`off_loop`), never on the event loop. Jinja's optimizer is off (it made compiling
quadratic while folding nothing in the sandbox). `compile_template` and `render`
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
from events_svc.templating.check import CONTEXT_FIELDS, check_template, check_texts
from events_svc.templating.sandbox import compile_template, render, render_pairs
from events_svc.templating.tree import MAX_NODES, MAX_TREE_DEPTH
from events_svc.templating.worker import off_loop

__all__ = [
    "CONTEXT_FIELDS",
    "DEADLINE_SECONDS",
    "MAX_DEPTH",
    "MAX_GROWTH",
    "MAX_INT_BITS",
    "MAX_ITEMS",
    "MAX_LOOP_ITEMS",
    "MAX_NODES",
    "MAX_OUTPUT",
    "MAX_TREE_DEPTH",
    "RenderFailed",
    "check_template",
    "check_texts",
    "compile_template",
    "off_loop",
    "render",
    "render_pairs",
]
