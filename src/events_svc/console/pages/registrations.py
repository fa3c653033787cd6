"""Console pages: the registrations of an event — a masked list with search, a state and
archive filter and keyset paging, and the audited reveal of the full list.

The list calls `registrations.records.list_registrations` exactly as GET /admin/registrations
does (the API needs an event or a sale order: without one the page asks to choose an
event), so its search follows the API's rule: an exact barcode, and a whole name for a
reader without `registration:pii` (parts of names and emails only with it). The reveal
is an explicit POST gated by the API's own `pii=full` rule; its answer is the page
itself (200, no redirect), so a full view has no bookmarkable URL. The detail pages
live in `registration_detail.py`, whose router this one includes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from events_svc.actors import Actor
from events_svc.console.choices import event_choices
from events_svc.console.pages import registration_detail
from events_svc.console.pages.registration_detail import STATE_WORDS, catalog_labels, row_view
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    base_path,
    needs,
    page,
    query_text,
)
from events_svc.routes.deps import ServiceContext, no_nul, pii_full
from events_svc.verbs.registrations import records as verbs

router = APIRouter()
router.include_router(registration_detail.router)

Reader = Annotated[Actor, needs("registration:read")]

PAGE_SIZE = 50
_ACTIVE = {"": None, "active": True, "archived": False}


@dataclass
class Filters:
    """The list's filters as typed (kept for the form and the links) and as parsed."""

    raw: dict[str, str]
    event_id: UUID | None = None
    state: Any = None
    active: bool | None = None
    problems: list[FieldError] = field(default_factory=list)

    def query(self, **over: str | None) -> str:
        """The list's URL query for these filters (blank ones left out)."""
        values = {**self.raw, **over}
        return urlencode({k: v for k, v in values.items() if v})


def read_filters(values: Mapping[str, str]) -> Filters:
    """Filters from a query string or from the reveal form's hidden fields; a bad value
    is a problem on its field (the page answers 422), never a guess."""
    raw = {
        "event_id": (values.get("event_id") or "").strip(),
        "q": query_text(values, "q") or "",
        "state": (values.get("state") or "").strip(),
        "active": (values.get("active") or "").strip(),
        "cursor": query_text(values, "cursor", limit=512) or "",
    }
    found = Filters(raw=raw)
    if raw["event_id"]:
        try:
            found.event_id = UUID(raw["event_id"])
        except ValueError:
            found.problems.append(
                FieldError("Choose an event from the list.", "validation_failed", "event_id")
            )
    if raw["state"] in STATE_WORDS:
        found.state = raw["state"]
    elif raw["state"]:
        found.problems.append(FieldError("Choose a state.", "validation_failed", "state"))
    if raw["active"] in _ACTIVE:
        found.active = _ACTIVE[raw["active"]]
    else:
        problem = FieldError("Choose active or archived.", "validation_failed", "active")
        found.problems.append(problem)
    return found


async def render_list(
    request: Request, ctx: ServiceContext, actor: Actor, filters: Filters, *, full: bool
) -> HTMLResponse:
    """The list page; `full` only after the reveal's gate (the verb audits the read)."""
    events = await event_choices(ctx, actor, filters.event_id)
    rows: list[Any] = []
    next_cursor = None
    if filters.event_id is not None and not filters.problems:
        found = await verbs.list_registrations(
            ctx.db(),
            actor,
            filters.event_id,
            state=filters.state,
            active=filters.active,
            q=no_nul(filters.raw["q"] or None, "q"),
            pii_full=full,
            limit=PAGE_SIZE,
            cursor=filters.raw["cursor"] or None,
        )
        names, slots = await catalog_labels(ctx, actor, filters.event_id)
        rows = [row_view(r, names, slots) for r in found["items"]]
        next_cursor = found["next_cursor"]
    here = f"{base_path(request)}/registrations"
    event_label = dict(events or []).get(filters.raw["event_id"]) if filters.event_id else None
    return page(
        request,
        "registrations_list.html",
        status_code=422 if filters.problems else 200,
        problems=filters.problems,
        title="Registrations",
        filters=filters.raw,
        chosen=filters.event_id,
        events=events,
        event_label=event_label,
        states=[("", "Any state"), *STATE_WORDS.items()],
        activity=[("", "Active and archived"), ("active", "Active"), ("archived", "Archived")],
        rows=rows,
        full=full,
        can_reveal=actor.has("registration:pii"),
        hide_url=f"{here}?{filters.query()}",
        next_url=f"{here}?{filters.query(cursor=next_cursor)}" if next_cursor else None,
        first_url=f"{here}?{filters.query(cursor=None)}" if filters.raw["cursor"] else None,
    )


@router.get("/registrations", name="registrations")
async def list_page(request: Request, ctx: StudioCtx, actor: Reader) -> Any:
    return await render_list(request, ctx, actor, read_filters(request.query_params), full=False)


@router.post("/registrations/reveal")
async def reveal_list(request: Request, ctx: StudioCtx, actor: Reader, form: Posted) -> Any:
    """The same page with full attendee data: gated like the API's `pii=full` (403 naming
    registration:pii) and audited by the verb; answered directly, never redirected."""
    full = pii_full(actor, "full")
    return await render_list(request, ctx, actor, read_filters(form.values), full=full)
