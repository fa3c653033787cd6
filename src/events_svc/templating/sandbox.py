"""The bounded sandbox: a Jinja2 sandboxed environment whose every hook spends the
render's budget, and the compile and render functions that run templates in it.

Jinja's optimizer is off: it folds constants, and folding is what the sandbox forbids
(every intercepted operator, filter and attribute refuses outside a render), so it
folded nothing while re-walking each operand's whole subtree once per enclosing node: a
long `1+1+...+1` chain compiled in quadratic time (9.9 KB took 15 s). Without it,
compiling is linear in the tree, and `tree.over_limit` bounds the tree.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from types import BuiltinMethodType, MethodType
from typing import Any, cast

import jinja2
from jinja2 import nodes
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.lexer import TokenStream
from jinja2.runtime import BlockReference, Context, LoopContext, Macro, markup_join, str_join
from jinja2.sandbox import SandboxedEnvironment
from jinja2.visitor import NodeTransformer
from markupsafe import Markup

from events_svc.templating.budget import (
    BUDGET,
    DEADLINE_SECONDS,
    FILTER_SIZES,
    MAX_DEPTH,
    MAX_GROWTH,
    MAX_INT_BITS,
    MAX_LOOP_ITEMS,
    MAX_OUTPUT,
    METHOD_SIZES,
    Budget,
    RenderFailed,
    SizedEscapeFormatter,
    SizedFormatter,
    checked,
    fail,
    guard_filter,
    join_filter,
    need,
    percent_size,
    sized_dumps,
    sized_join,
    spend,
    sum_filter,
    tick,
    weigh,
)
from events_svc.templating.tree import LIMITS, TreeTooLarge, counted, over_limit

# --- the sandbox -----------------------------------------------------------------------


class _Guards(NodeTransformer):
    """Wraps what the sandbox has no hook for: for-loop iterables and container literals."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = self.guard("loop_guard", node.iter)
        return node

    def _literal(self, node: nodes.Expr) -> nodes.Node:
        self.generic_visit(node)  # a literal can hold one big value many times
        constant = (nodes.Const, nodes.Pair, nodes.List, nodes.Tuple, nodes.Dict)
        if getattr(node, "ctx", "load") != "load" or all(
            isinstance(child, constant) for child in node.find_all(nodes.Node)
        ):
            return node
        return self.guard("value_guard", node)

    visit_List = visit_Tuple = visit_Dict = _literal

    @staticmethod
    def guard(name: str, node: nodes.Node) -> nodes.Call:
        call = nodes.Call(nodes.EnvironmentAttribute(name), [node], [], None, None)
        return cast(nodes.Call, call.set_lineno(node.lineno))


class _BoundedTemplate(jinja2.Template):
    @classmethod
    def _from_namespace(
        cls, environment: jinja2.Environment, namespace: Any, globals: Any
    ) -> jinja2.Template:
        # `~` compiles to calls of these module-level joins: size their parts first
        namespace["str_join"] = sized_join(str_join)
        namespace["markup_join"] = sized_join(markup_join)
        return super()._from_namespace(environment, namespace, globals)


class _BoundedEnvironment(SandboxedEnvironment):
    template_class = _BoundedTemplate
    intercepted_binops = frozenset({"+", "*", "**", "%"})
    value_guard = staticmethod(checked)

    def __init__(self) -> None:
        super().__init__(
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            finalize=checked,
            optimized=False,  # see the module's docstring: it made compiling quadratic
        )
        # output of macros, caller(), {% set %} and {% filter %} blocks is joined here
        self.concat = sized_join("".join)  # type: ignore[method-assign]
        self.globals["range"] = self.bounded_range
        del self.globals["lipsum"]  # lipsum(n) writes n paragraphs, and mails need none
        del self.filters["pprint"]  # indents once per nesting level, with no hook inside
        self.policies["json.dumps_function"] = sized_dumps
        replaced = {"join": join_filter, "sum": sum_filter}
        self.filters = {
            name: guard_filter(replaced.get(name, func), FILTER_SIZES.get(name))
            for name, func in self.filters.items()
        }

    def _tokenize(
        self,
        source: str,
        name: str | None,
        filename: str | None = None,
        state: str | None = None,
    ) -> TokenStream:
        # every parse counts its tokens: a huge text stops parsing at tree.MAX_TOKENS
        stream = super()._tokenize(source, name, filename, state)
        return TokenStream(counted(stream), name, filename)

    def _generate(
        self,
        source: nodes.Template,
        name: str | None,
        filename: str | None,
        defer_init: bool = False,
    ) -> str:
        _Guards().visit(source)
        source.set_environment(self)
        return super()._generate(source, name, filename, defer_init)

    @staticmethod
    def bounded_range(*args: int) -> range:
        budget, numbers = tick(), range(*args)
        need(len(numbers[: MAX_LOOP_ITEMS + 1]), MAX_LOOP_ITEMS, "range over {} items")
        spend(budget, len(numbers))  # filters iterate ranges with no hook: count them now
        return numbers

    @staticmethod
    def loop_guard(iterable: Any) -> Generator[Any, None, None]:
        budget = tick()
        for count, item in enumerate(iterable, 1):
            need(count, MAX_LOOP_ITEMS, "loop over {} items")
            spend(budget, 1)
            if time.monotonic() > budget.deadline:
                tick()
            yield item

    def getattr(self, obj: Any, attribute: str) -> Any:
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        tick()
        return super().getitem(obj, argument)

    def call_binop(self, context: Context | None, operator: str, left: Any, right: Any) -> Any:
        tick()
        ints = isinstance(left, int) and isinstance(right, int)
        if operator == "*" and ints:
            need(left.bit_length() + right.bit_length(), MAX_INT_BITS, "integer over {} bits")
        elif operator == "*":
            seq, times = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(times, int) and isinstance(seq, str | list | tuple):
                need(weigh(seq) * max(times, 0))
        elif operator == "**" and ints and right > 0 and abs(left) > 1:
            need(left.bit_length() * right, MAX_INT_BITS, "integer over {} bits")
        elif operator == "%" and isinstance(left, str):
            need(percent_size(left, right))
        elif operator == "+" and isinstance(left, str | list | tuple):
            need(weigh(left) + weigh(right))
        result = self.binop_table[operator](left, right)
        if isinstance(result, int):  # `+` grows an int a bit at a time
            need(result.bit_length(), MAX_INT_BITS, "integer over {} bits")
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if not (
            isinstance(value, MethodType | BuiltinMethodType)
            and value.__name__ in ("format", "format_map")
            and isinstance(value.__self__, str)
        ):
            return None
        template: str = value.__self__
        is_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs, args = args[0], ()
            formatter = (
                SizedEscapeFormatter(self, escape=template.escape)
                if isinstance(template, Markup)
                else SizedFormatter(self)
            )
            formatter.size = len(template)
            return type(template)(formatter.vformat(template, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        budget = tick()
        if not self.is_safe_callable(obj):
            raise SecurityError("the object is not safely callable")
        if isinstance(obj, BuiltinMethodType):
            obj, args = self._sized_builtin(budget, obj, args, kwargs)
        if isinstance(obj, LoopContext) and args:  # `loop(children)` in a recursive loop
            args = (self.loop_guard(args[0]), *args[1:])
        nested = isinstance(obj, Macro | LoopContext | BlockReference)
        try:
            budget.depth += nested
            need(budget.depth, MAX_DEPTH, "calls nested over {} deep")
            result = context.call(obj, *args, **kwargs)
        finally:
            budget.depth -= nested
        return checked(result)

    def _sized_builtin(
        self, budget: Budget, method: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, tuple[Any, ...]]:
        name, receiver = method.__name__, method.__self__
        if name in ("encode", "to_bytes", "translate"):  # bytes or mappings: no size to check
            raise SecurityError(f"{name}() is not available in templates")
        plumbing = ("_loop_vars", "_block_vars")  # the compiler's, not the template's
        named = {key: value for key, value in kwargs.items() if key not in plumbing}
        weights = [weigh(value) for value in (*args, *named.values())]
        for weight in weights:
            need(weight)  # builtins copy, print or compare their arguments
        if isinstance(receiver, str) and name in ("format", "format_map"):
            return self.wrap_str_format(method), args  # reached around getattr
        if isinstance(receiver, str) and name == "join" and args:
            items = list(args[0])  # consumed once here, so the joined size is known first
            need(weigh(items) + len(receiver) * len(items))
            return method, (items, *args[1:])
        if isinstance(receiver, str) and name in METHOD_SIZES:
            need(METHOD_SIZES[name](receiver, *args, **named))
        if isinstance(receiver, list | dict | set):
            budget.growth -= sum(weights)  # append, extend, update, setdefault, add ...
            if budget.growth < 0:
                fail(f"containers grown by over {MAX_GROWTH} characters")
        return method, args


ENV = _BoundedEnvironment()


# --- compiling and rendering -----------------------------------------------------------


def compile_template(source: str) -> jinja2.Template:
    """Compile in the bounded environment; a template that does not compile, or whose tree
    passes a limit of `tree` (one stored before the limits were), is RenderFailed. Pure
    Python, at most a fraction of a second: callers run it in a worker thread
    (`worker.off_loop`)."""
    try:
        ast = ENV.parse(source)
        limit = over_limit(ast)
        if limit is not None:
            bound = LIMITS[limit]
            reason = f"nested over {bound} deep" if limit == "depth" else f"over {bound} nodes"
            raise RenderFailed("TemplateTooComplex", reason=reason)
        return ENV.from_string(ast)
    except TreeTooLarge:
        raise RenderFailed("TemplateTooComplex", reason=f"over {LIMITS['nodes']} nodes") from None
    except (RecursionError, SyntaxError):  # Python's own nesting limits, past the parser's
        raise RenderFailed("TemplateTooComplex", reason="nested too deeply") from None
    except Exception as exc:
        raise _failure(exc) from None


def render(
    template: jinja2.Template, context: Mapping[str, Any], *, deadline: float | None = None
) -> str:
    """Render one compiled template within the limits; any failure is RenderFailed.

    `deadline` (a `time.monotonic()` instant) lets several renders share one time budget;
    by default the render has DEADLINE_SECONDS of its own. The output is counted in
    UTF-8 bytes, what a mail actually carries."""
    until = time.monotonic() + DEADLINE_SECONDS if deadline is None else deadline
    token = BUDGET.set(Budget(deadline=until))
    chunks = cast(Generator[str, None, None], template.generate(context))
    try:
        out, size = [], 0
        for chunk in chunks:
            size += len(chunk) if chunk.isascii() else len(chunk.encode())
            need(size, MAX_OUTPUT, "output over {} bytes")
            out.append(chunk)
        return "".join(out)
    except Exception as exc:
        raise _failure(exc) from None
    finally:
        chunks.close()
        BUDGET.reset(token)


async def render_pairs(
    subject: jinja2.Template, body: jinja2.Template, contexts: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """Render subject and body for each context (one recipient each), in ONE worker-thread
    hop: the event loop keeps serving, and a batch of recipients pays for one hop. The
    whole batch shares one DEADLINE_SECONDS: it runs while the caller holds its scheduler
    row, so its time must stay far below the service's lock and idle timeouts."""

    def batch() -> list[tuple[str, str]]:
        deadline = time.monotonic() + DEADLINE_SECONDS
        return [
            (render(subject, context, deadline=deadline), render(body, context, deadline=deadline))
            for context in contexts
        ]

    return await asyncio.to_thread(batch)


def _failure(exc: BaseException) -> RenderFailed:
    if isinstance(exc, TemplateSyntaxError):
        line: int | None = exc.lineno
    else:  # Jinja rewrites template frames to carry the template's own line
        line, tb = None, exc.__traceback__
        while tb is not None:
            line = tb.tb_lineno if tb.tb_frame.f_code.co_filename == "<template>" else line
            tb = tb.tb_next
    if isinstance(exc, RenderFailed):
        return RenderFailed(exc.kind, reason=exc.reason, line=line)
    return RenderFailed(type(exc).__name__, line=line)  # never str(exc): it may quote data
