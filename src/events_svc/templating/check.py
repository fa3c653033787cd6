"""Templates checked when they are written: their tree is within the limits of `tree`,
they compile, and they name only the documented context (`CONTEXT_FIELDS`).

`check_template` is pure Python and may take a fraction of a second on a large template:
`check_texts` runs it in a template worker thread (`worker.off_loop`), never on the
event loop. The check parses once, measures the tree before anything else walks it
(422 `template_too_complex` naming the limit), introspects it without Jinja's optimizer
(which re-walks every subtree: quadratic), then compiles that same tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from jinja2 import meta, nodes
from jinja2.exceptions import TemplateSyntaxError

from events_svc import errors
from events_svc.templating.sandbox import ENV
from events_svc.templating.tree import LIMITS, Limit, TreeTooLarge, over_limit
from events_svc.templating.worker import off_loop

CONTEXT_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "registration": frozenset({"name", "email", "phone", "company_name", "barcode", "state"}),
        "event": frozenset({"name", "date_begin", "date_end", "date_tz", "location", "event_url"}),
        "ticket": frozenset({"name"}),  # the whole ticket may be None
        "slot": frozenset({"date_begin", "date_end"}),  # the whole slot may be None
        "links": frozenset({"ics", "my_tickets"}),  # "" when links cannot be minted
        # a waiting-list offer's links, deadline and seats: "" in every other mail
        "waitlist": frozenset({"offer_url", "decline_url", "expires_at", "seats"}),
    }
)
_GLOBALS = frozenset({"range", "dict", "cycler", "joiner", "namespace", "loop"})


def check_template(source: str, *, field: str) -> None:
    """Refuse a template whose tree is too large, that does not compile, or that names
    anything outside CONTEXT_FIELDS. Blocking: call it through `check_texts`."""
    try:
        ast = ENV.parse(source)
    except TemplateSyntaxError as exc:
        raise _invalid(field, exc) from None
    except TreeTooLarge as exc:  # the lexer stopped it: far more tokens than MAX_NODES
        raise _too_complex(field, exc.limit) from None
    except (RecursionError, MemoryError):  # the parser recurses once per nesting level
        raise _too_complex(field, "depth") from None
    limit = over_limit(ast)
    if limit is not None:
        raise _too_complex(field, limit)
    for load in ast.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
        detail = f"{field} line {load.lineno}: templates cannot load other templates"
        raise errors.TemplateInvalid(detail, field=field, line=load.lineno)
    try:
        undeclared = _undeclared(ast)  # compile-time refusals too: unknown filters ...
    except TemplateSyntaxError as exc:
        raise _invalid(field, exc) from None
    except (SyntaxError, RecursionError, MemoryError):
        raise _too_complex(field, "depth") from None
    unknown = undeclared - CONTEXT_FIELDS.keys() - _GLOBALS
    # a root rebound anywhere (set, for, macro argument) holds the template's own value
    bound = {name.name for name in ast.find_all(nodes.Name) if name.ctx != "load"}
    for node in ast.find_all((nodes.Name, nodes.Getattr, nodes.Getitem)):
        if isinstance(node, nodes.Name):
            variable = node.name if node.name in unknown else None
        else:
            variable = _undocumented_field(node, bound)
        if variable is not None:
            detail = f"{field} line {node.lineno}: {variable} is not in the template context"
            raise errors.TemplateVariableUnknown(detail, field=field, variable=variable)
    try:
        ENV.compile(ast)  # last: it rewrites the tree (the sandbox's guards)
    except TemplateSyntaxError as exc:
        raise _invalid(field, exc) from None
    except (SyntaxError, RecursionError, MemoryError):  # Python's own nesting limits
        raise _too_complex(field, "depth") from None


async def check_texts(texts: Sequence[tuple[str, str]]) -> None:
    """Check each (field, source) in order, in a template worker thread: the event loop
    keeps serving while a large template is checked. Raises the first refusal."""

    def check_all() -> None:
        for field, source in texts:
            check_template(source, field=field)

    await off_loop(check_all)


def _undeclared(ast: nodes.Template) -> set[str]:
    """The names the template reads from its context (`meta.find_undeclared_variables`),
    found without the optimizer: folding nothing, it re-walked every subtree."""
    codegen = meta.TrackingCodeGenerator(ENV)
    codegen.optimizer = None
    codegen.visit(ast)
    return codegen.undeclared_identifiers


def _invalid(field: str, exc: TemplateSyntaxError) -> errors.TemplateInvalid:
    detail = f"{field} line {exc.lineno}: {exc.message}"
    return errors.TemplateInvalid(detail, field=field, line=exc.lineno)


def _too_complex(field: str, limit: Limit) -> errors.TemplateTooComplex:
    bound = LIMITS[limit]
    detail = (
        f"{field}: the template nests over {bound} levels deep"
        if limit == "depth"
        else f"{field}: the template parses into over {bound} nodes"
    )
    return errors.TemplateTooComplex(detail, field=field, limit=limit, max=bound)


def _undocumented_field(node: nodes.Expr, bound: set[str]) -> str | None:
    root, key = getattr(node, "node", None), getattr(node, "attr", None)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key = node.arg.value  # event['organizer'] as well as event.organizer
    if not isinstance(root, nodes.Name) or root.name not in CONTEXT_FIELDS or root.name in bound:
        return None
    known = CONTEXT_FIELDS[root.name]
    return f"{root.name}.{key}" if isinstance(key, str) and key not in known else None
