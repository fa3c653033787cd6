"""The budget of one render, and the sizes of operations computed before they run.

A render gets a `Budget` (in a ContextVar: renders run concurrently in worker threads).
Every hook of the sandbox calls `tick()`, which refuses once the budget is spent or
its deadline has passed; `need()` refuses a value, a loop or an integer over its limit.
The size functions say how large an operation's result would be BEFORE it is built
(string repetition, `%` and `format` widths, padding, replace, join ...), and the
guarded filters check them around the built-in filters.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections import abc
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, NoReturn

import jinja2
from jinja2.filters import make_attrgetter, sync_do_join
from jinja2.sandbox import SandboxedEscapeFormatter, SandboxedFormatter
from jinja2.utils import Namespace

MAX_OUTPUT = 256 * 1024  # bytes of one render's output; characters of any one value built
MAX_LOOP_ITEMS = 10_000  # items of one loop or one range
MAX_ITEMS = 100_000  # loop and range items over a whole render
MAX_GROWTH = 4 * MAX_OUTPUT  # characters a render may append to containers
MAX_INT_BITS = 16_384  # beyond Python's own 4300-digit limit for printing an int
MAX_DEPTH = 32  # nested macro, caller() and recursive-loop calls
DEADLINE_SECONDS = 2.0


class RenderFailed(Exception):
    """A template did not compile or render; the message is safe to log and store."""

    def __init__(self, kind: str, *, reason: str | None = None, line: int | None = None) -> None:
        self.kind, self.reason, self.line = kind, reason or kind, line
        at = f" at template line {line}" if line is not None else ""
        super().__init__(f"{kind}{at}" + (f": {reason}" if reason else ""))


# --- the budget of one render ----------------------------------------------------------


@dataclass(slots=True)
class Budget:
    deadline: float
    items: int = MAX_ITEMS
    growth: int = MAX_GROWTH
    depth: int = 0
    spent: str | None = None  # once set, every later hook refuses too


# a ContextVar, not a global: renders run concurrently in worker threads, each in its
# own copy of the context (asyncio.to_thread copies it)
BUDGET: ContextVar[Budget | None] = ContextVar("template_budget", default=None)


def fail(reason: str) -> NoReturn:
    budget = BUDGET.get()
    if budget is not None and budget.spent is None:
        budget.spent = reason
    raise RenderFailed("BudgetExceeded", reason=reason)


def tick() -> Budget:
    """The running render's budget, refused once spent or late; every hook calls it."""
    budget = BUDGET.get()
    if budget is None:
        # outside render(); this also keeps the compiler from folding guarded operations
        # into constants at compile time, where no budget bounds them
        raise RuntimeError("templates run only through templating.render")
    if budget.spent is None and time.monotonic() > budget.deadline:
        budget.spent = f"deadline of {DEADLINE_SECONDS:g} s"
    if budget.spent is not None:
        raise RenderFailed("BudgetExceeded", reason=budget.spent)
    return budget


def need(size: int, limit: int = MAX_OUTPUT, what: str = "value over {} characters") -> None:
    if size > limit:
        fail(what.format(limit))


def spend(budget: Budget, items: int) -> None:
    budget.items -= items
    if budget.items < 0:
        fail(f"over {MAX_ITEMS} loop and range items")


def weigh(value: Any) -> int:
    """About how many characters `value` prints as, counted until MAX_OUTPUT is passed.

    Containers count what they hold, so a list holding one string many times weighs
    what printing, hashing or comparing it would cost.
    """
    if type(value) is str:
        return len(value)
    total, stack = 0, [value]
    while stack and total <= MAX_OUTPUT:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, jinja2.Undefined) or not isinstance(
            item, int | Namespace | abc.Collection
        ):
            total += 16  # None, floats, dates, undefined: short whatever their value
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 1
        else:
            if isinstance(item, Namespace):
                item = object.__getattribute__(item, "_Namespace__attrs")
            total += 2 + len(item)
            if total <= MAX_OUTPUT:  # which bounds these copies too
                stack.extend(item.values() if isinstance(item, abc.Mapping) else ())
                stack.extend(item)
    return total


def checked(value: Any) -> Any:
    # every printed value, and every container literal holding variables, passes here
    tick()
    need(weigh(value))
    return value


# --- sizes computed before an operation builds its result ------------------------------

_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?.", re.S)
_DIGITS = re.compile(r"\d+")


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def percent_size(template: str, values: Any) -> int:
    specs = _PERCENT.findall(template)
    if any("*" in number for spec in specs for number in spec):
        fail("'*' width in a % format")  # the width would come from the values
    widest = max((int(number or 0) for spec in specs for number in spec), default=0)
    if isinstance(values, abc.Mapping):  # `%(name)s` may print one value many times
        printed = len(specs) * max(map(weigh, values.values()), default=0)
    else:
        printed = weigh(values)
    return len(template) + printed + len(specs) * widest


def _replace_size(text: Any, old: Any, new: Any, count: Any = -1) -> int:
    if not (isinstance(text, str) and isinstance(old, str) and isinstance(new, str)):
        return 0  # str.replace itself refuses these
    hits = text.count(old) if old else len(text) + 1
    hits = min(hits, count) if isinstance(count, int) and count >= 0 else hits
    return len(text) + hits * max(len(new) - len(old), 0)


def _padded(text: Any, width: Any = 80, *_: Any) -> int:
    return max(weigh(text), _int(width))


# str methods and filters whose arguments can inflate their result, sized with their own
# signatures; the others (truncate, upper, escape ...) return a small multiple of their
# inputs and are checked after
METHOD_SIZES: dict[str, Callable[..., int]] = {
    "center": _padded,
    "ljust": _padded,
    "rjust": _padded,
    "zfill": _padded,
    "expandtabs": lambda text, tabsize=8: len(text) + text.count("\t") * _int(tabsize),
    "replace": _replace_size,
}
FILTER_SIZES: dict[str, Callable[..., int]] = {
    "center": _padded,
    "indent": lambda s, width=4, first=False, blank=False: (
        len(_text(s))
        + (_text(s).count("\n") + 2) * (len(width) if isinstance(width, str) else _int(width))
    ),
    # a wrapped line and the chunk after it exceed `width`: at most 2 * len / width lines
    "wordwrap": lambda s, width=79, long=True, wrapstring=None, hyphens=True: (
        len(_text(s))
        + (2 * len(_text(s)) // max(_int(width), 1) + _text(s).count("\n") + 2)
        * len(wrapstring if isinstance(wrapstring, str) else "\n")
    ),
    "replace": lambda s, old, new, count=None: _replace_size(
        str(s), str(old), str(new), -1 if count is None else count
    ),
    "format": lambda value, *args, **kwargs: percent_size(str(value), kwargs or args),
    "batch": lambda value, linecount, fill_with=None: _int(linecount),  # pads the last batch
    "slice": lambda value, slices, fill_with=None: 3 * _int(slices),  # that many lists
}


@jinja2.pass_eval_context
def join_filter(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> str:
    items = list(value)  # consumed once here, so the joined size is known first
    need(weigh(items) + len(str(d)) * len(items))
    return sync_do_join(eval_ctx, items, d, attribute)


@jinja2.pass_environment
def sum_filter(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
    if attribute is not None:
        iterable = map(make_attrgetter(environment, attribute), iterable)
    total = sum((), start)  # the builtin's own refusals (strings)
    for item in iterable:  # one sized, timed + per item: a sum of lists grows quadratically
        total = environment.call_binop(None, "+", total, item)
    return total


def sized_dumps(value: Any, **kwargs: Any) -> str:
    # tojson(indent=n) repeats the indent once per nesting level on every line
    chunks, size = [], 0
    for chunk in json.JSONEncoder(**kwargs).iterencode(value):
        size += len(chunk)
        need(size)
        chunks.append(chunk)
    return "".join(chunks)


def guard_filter(func: Callable[..., Any], size: Callable[..., int] | None) -> Callable[..., Any]:
    skip = 1 if hasattr(func, "jinja_pass_arg") else 0  # context or environment comes first

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        tick()
        for value in (*args[skip:], *kwargs.values()):
            need(weigh(value))  # most filters print their arguments
        need(size(*args[skip:], **kwargs) if size else 0)
        return checked(func(*args, **kwargs))

    return guarded


def sized_join(join: Callable[[Iterable[Any]], str]) -> Callable[[Iterable[Any]], str]:
    def sized(parts: Iterable[Any]) -> str:
        tick()
        parts = tuple(parts)
        need(sum(map(weigh, parts)))
        return join(parts)

    return sized


class SizedFormatter(SandboxedFormatter):
    size = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        tick()
        width = max((int(digits) for digits in _DIGITS.findall(format_spec)), default=0)
        self.size += max(width, weigh(value))
        need(self.size)
        return super().format_field(value, format_spec)


class SizedEscapeFormatter(SizedFormatter, SandboxedEscapeFormatter):
    pass
