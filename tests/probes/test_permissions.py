"""The permissions table in docs/permissions.md is the routes' own: every admin route needs
exactly one scope, and the table lists them all (EVENTS_WRITE_PERMISSIONS_DOC=1 rewrites
it from the app)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from events_svc.actors import SCOPES
from events_svc.routes.deps import ScopeCheck
from tests.probes.helpers import API

DOC = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"
SECTION = "## Scope → routes\n"
PII = "registration:pii"  # asked by `pii=full` on the reads, never a route's own scope


def _scopes(dependant: Dependant) -> list[str]:
    found = [d.call.scope for d in dependant.dependencies if isinstance(d.call, ScopeCheck)]
    for sub in dependant.dependencies:
        found += _scopes(sub)
    return found


def _table(app: Any) -> dict[str, list[str]]:
    by_scope: dict[str, list[str]] = {}
    for found in iter_route_contexts(app.routes):
        route = found.route
        if not isinstance(route, APIRoute) or "/admin/" not in found.path:
            continue
        scopes = _scopes(route.dependant)
        assert len(scopes) == 1, (found.path, scopes)
        path = found.path.removeprefix(API)
        for method in sorted(set(found.methods or ()) - {"HEAD"}):
            by_scope.setdefault(scopes[0], []).append(f"`{method}` `{path}`")
    return by_scope


def _section(by_scope: dict[str, list[str]]) -> str:
    lines = [SECTION]
    for scope in sorted(by_scope):
        lines.append(f"\n### `{scope}`\n\n")
        routes = sorted(set(by_scope[scope]), key=lambda r: (r.split()[1], r.split()[0]))
        lines += [f"- {route}\n" for route in routes]
    return "".join(lines)


async def test_every_admin_route_needs_one_scope_and_the_document_lists_it(app: Any):
    by_scope = _table(app)
    assert set(by_scope) <= SCOPES - {PII, "*"}
    expected = _section(by_scope)
    text = DOC.read_text()
    head = text[: text.index(SECTION)]
    if os.environ.get("EVENTS_WRITE_PERMISSIONS_DOC") == "1":
        DOC.write_text(head + expected)
    assert text[len(head) :] == expected, "run with EVENTS_WRITE_PERMISSIONS_DOC=1 to update"
