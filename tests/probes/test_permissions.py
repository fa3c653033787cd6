"""The permissions table in docs/permissions.md is the routes' own: every admin route needs
exactly one scope of its own, a route that discloses attendee data also
`registration:pii` (or, for a route whose whole answer is names, such as the badges,
`registration:pii` alone), and the table lists them all (EVENTS_WRITE_PERMISSIONS_DOC=1
rewrites it from the app)."""

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
# asked by `pii=full` on the reads, as a SECOND scope by a route that discloses attendee
# data (minting a my-tickets link), and as the only scope of the routes that print names
PII = "registration:pii"
PII_ROUTES = {"`GET` `/admin/events/{event_id}/badges.pdf`"}


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
        assert scopes and len(set(scopes)) == len(scopes), (found.path, scopes)
        own, *also = scopes
        assert set(also) <= {PII}, (found.path, scopes)
        path = found.path.removeprefix(API)
        needs = "".join(f" (and `{scope}`)" for scope in also)
        for method in sorted(set(found.methods or ()) - {"HEAD"}):
            by_scope.setdefault(own, []).append(f"`{method}` `{path}`{needs}")
    return by_scope


def _section(by_scope: dict[str, list[str]]) -> str:
    lines = [SECTION]
    for scope in sorted(by_scope):
        lines.append(f"\n### `{scope}`\n\n")
        routes = sorted(set(by_scope[scope]), key=lambda r: (r.split()[1], r.split()[0]))
        lines += [f"- {route}\n" for route in routes]
    return "".join(lines)


async def test_every_admin_route_needs_its_scopes_and_the_document_lists_them(app: Any):
    by_scope = _table(app)
    assert set(by_scope) <= SCOPES - {"*"}
    assert set(by_scope.get(PII, [])) == PII_ROUTES
    tickets = "`POST` `/admin/events/{event_id}/capabilities/my-tickets` (and `registration:pii`)"
    assert tickets in by_scope["capability:mint"]  # its link shows full names
    expected = _section(by_scope)
    text = DOC.read_text()
    head = text[: text.index(SECTION)]
    if os.environ.get("EVENTS_WRITE_PERMISSIONS_DOC") == "1":
        DOC.write_text(head + expected)
    assert text[len(head) :] == expected, "run with EVENTS_WRITE_PERMISSIONS_DOC=1 to update"
