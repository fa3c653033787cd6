"""Templates checked when they are written: they compile, and they name only the
documented context (`CONTEXT_FIELDS`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from jinja2 import meta, nodes
from jinja2.exceptions import TemplateSyntaxError

from events_svc import errors
from events_svc.templating.sandbox import ENV

CONTEXT_FIELDS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "registration": frozenset({"name", "email", "phone", "company_name", "barcode", "state"}),
        "event": frozenset({"name", "date_begin", "date_end", "date_tz", "location", "event_url"}),
        "ticket": frozenset({"name"}),  # the whole ticket may be None
        "slot": frozenset({"date_begin", "date_end"}),  # the whole slot may be None
        "links": frozenset({"ics", "my_tickets"}),  # "" when links cannot be minted
    }
)
_GLOBALS = frozenset({"range", "dict", "cycler", "joiner", "namespace", "loop"})


def check_template(source: str, *, field: str) -> None:
    """Refuse a template that does not compile or names anything outside CONTEXT_FIELDS."""
    try:
        ast = ENV.parse(source)
        ENV.compile(source)  # compile-time refusals too: unknown filters, writes to `loop`
    except TemplateSyntaxError as exc:
        detail = f"{field} line {exc.lineno}: {exc.message}"
        raise errors.TemplateInvalid(detail, field=field, line=exc.lineno) from None
    except (SyntaxError, RecursionError, MemoryError):
        detail = f"{field}: the template nests too deeply"
        raise errors.TemplateInvalid(detail, field=field, line=1) from None
    for load in ast.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
        detail = f"{field} line {load.lineno}: templates cannot load other templates"
        raise errors.TemplateInvalid(detail, field=field, line=load.lineno)
    unknown = meta.find_undeclared_variables(ast) - CONTEXT_FIELDS.keys() - _GLOBALS
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


def _undocumented_field(node: nodes.Expr, bound: set[str]) -> str | None:
    root, key = getattr(node, "node", None), getattr(node, "attr", None)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key = node.arg.value  # event['organizer'] as well as event.organizer
    if not isinstance(root, nodes.Name) or root.name not in CONTEXT_FIELDS or root.name in bound:
        return None
    known = CONTEXT_FIELDS[root.name]
    return f"{root.name}.{key}" if isinstance(key, str) and key not in known else None
