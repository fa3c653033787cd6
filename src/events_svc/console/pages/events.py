"""Console pages: the events list (the landing page after sign-in), an event's detail with
its seats gauges, its publish / unpublish / mark-done forms, and its waiting list (the
settings form, the entries' "Offer now" and "Remove").

Every read and write is the admin API's own verb called with the same arguments
(`routes/events/records.py`): the list is `list_events`, the detail and the gauges are
`get_event` (its `seats` is the ONE seat read model, also behind
`GET /admin/events/{id}/seats`), the forms call `publish_event`, `unpublish_event` and
`mark_event_done`. The waiting list's section is `waitlist.section`; its forms call
`put_settings`, `offer_now` and `remove_entry` (`routes/waitlist.py`). The public page's
section shows the address of a visible event's public page (`routes/event_page/`), and
its form mints a private link with the API's own verb, `public.mint_intake`
(`POST /admin/events/{id}/capabilities/intake`). A refusal of a form (409 and friends)
re-renders the detail with its code in the error summary and the API's status; anything
else is the error page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.pages import waitlist_section as waitlist
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    needs,
    page,
    query_text,
    refusal_errors,
    see_other,
    validation_errors,
    zone,
)
from events_svc.documents import when
from events_svc.links import BASE_PATH
from events_svc.models import PublishBody
from events_svc.routes.deps import ServiceContext
from events_svc.routes.event_page import PATH as EVENT_PAGE_PATH
from events_svc.verbs import badges, public
from events_svc.verbs.events import catalog, lifecycle, publication, tickets
from events_svc.verbs.events import records as verbs

router = APIRouter()

Read = Annotated[Actor, needs("event:read")]
Write = Annotated[Actor, needs("event:write")]
Mint = Annotated[Actor, needs("capability:mint")]

PAGE_SIZE = 25
LOOKUP_LIMIT = 200  # stages, tickets, slots named on a page: one page of each is plenty
# a refusal of a detail form shows on the detail; others (403, 404, 503) are the error page
FORM_REFUSALS = frozenset({409, 412, 422})
PUBLISHED_CHOICES = [("", "Any"), ("yes", "Published"), ("no", "Not published")]
KANBAN = {
    "normal": ("In progress", "info"),
    "done": ("Ready for the next stage", "good"),
    "blocked": ("Blocked", "bad"),
    "cancel": ("Cancelled", "bad"),
}
GAUGE_WIDTH = 1000  # the SVG's own units; the CSS stretches it to the column


# --- presentation -----------------------------------------------------------------------


def seats_figure(scope: Mapping[str, Any]) -> str:
    """The compact seats text of a list row."""
    if scope["limited"]:
        return f"{scope['taken']} of {scope['cap']} taken, {scope['available']} free"
    return f"{scope['taken']} taken, no limit"


def timing(event: Mapping[str, Any]) -> tuple[str, str]:
    if event["is_finished"]:
        return "Finished", "warn"
    if event["is_ongoing"]:
        return "Ongoing", "good"
    return "Upcoming", "info"


def publication_badge(event: Mapping[str, Any], now: datetime) -> tuple[str, str]:
    """The publication state in words (a badge never relies on its colour)."""
    if not event["active"]:
        return "Archived", "bad"
    if not event["is_published"]:
        return "Not published", "warn"
    if publication.is_visible(dict(event), now):
        return "Published", "good"
    return f"Published from {when(event['date_publish'], event['date_tz'])}", "info"


def gauge(key: str, label: str, scope: Mapping[str, Any]) -> dict[str, Any]:
    """One seats gauge: the counts of the seat read model and, when the scope is limited,
    the bar's segments (used, reserved, held, free) in SVG units that add up to the bar."""
    parts = [("used", scope["used"]), ("reserved", scope["reserved"]), ("held", scope["held"])]
    segments: list[dict[str, Any]] = []
    if scope["limited"]:
        total = max(scope["cap"], scope["taken"], 1)
        x = 0
        for name, count in [*parts, ("free", scope["available"] or 0)]:
            width = round(count * GAUGE_WIDTH / total)
            width = min(width, GAUGE_WIDTH - x)
            if width > 0:
                segments.append({"kind": name, "x": x, "width": width})
            x += width
    counts = ", ".join(f"{count} {name}" for name, count in parts)
    if scope["limited"]:
        text = f"{label}: {counts}, {scope['available']} available of {scope['cap']} seats"
    else:
        text = f"{label}: {counts}; no seat limit"
    return {
        "id": f"gauge-{key}",
        "label": label,
        "scope": dict(scope),
        "segments": segments,
        "text": text,
        "width": GAUGE_WIDTH,
    }


def gauges(
    event: Mapping[str, Any], ticket_names: Mapping[UUID, str], slot_rows: list[dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    seats = event["seats"]
    slot_names = {s["id"]: when(s["date_begin"], event["date_tz"]) for s in slot_rows}
    return {
        "event": [gauge("event", "The whole event", seats["event"])],
        "tickets": [
            gauge(
                f"ticket-{t['ticket_id']}",
                ticket_names.get(t["ticket_id"], "A ticket"),
                t,
            )
            for t in seats["tickets"]
        ],
        "slots": [
            gauge(f"slot-{s['slot_id']}", slot_names.get(s["slot_id"], "A slot"), s)
            for s in seats["slots"]
        ],
    }


# --- the list ---------------------------------------------------------------------------


def _day(values: Mapping[str, str], name: str, problems: list[FieldError]) -> date | None:
    raw = query_text(values, name, 20)
    if raw is None:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        problems.append(FieldError("Enter a date like 2027-05-10.", "validation_failed", name))
        return None


def list_filters(values: Mapping[str, str]) -> tuple[dict[str, Any], list[FieldError]]:
    """The list's query string as the verb's filters (days are whole UTC days)."""
    problems: list[FieldError] = []
    published = {"yes": True, "no": False}.get(values.get("published", ""))
    stage_id = None
    stage = query_text(values, "stage_id", 40)
    if stage is not None:
        try:
            stage_id = UUID(stage)
        except ValueError:
            problems.append(
                FieldError("Choose a stage from the list.", "validation_failed", "stage_id")
            )
    first, last = _day(values, "date_from", problems), _day(values, "date_to", problems)
    filters = {
        "q": query_text(values, "q"),
        "published": published,
        "stage_id": stage_id,
        "date_from": datetime.combine(first, time(), UTC) if first else None,
        "date_to": (
            datetime.combine(last, time(), UTC) + timedelta(days=1, microseconds=-1)
            if last
            else None
        ),
        "cursor": query_text(values, "cursor", 512),
    }
    return filters, problems


async def stage_names(ctx: ServiceContext) -> dict[UUID, dict[str, Any]]:
    listing = await catalog.list_page(ctx.db(), catalog.STAGES, limit=LOOKUP_LIMIT)
    return {s["id"]: s for s in listing["items"]}


def list_row(event: dict[str, Any], stages: Mapping[UUID, Any], now: datetime) -> dict[str, Any]:
    stage = stages.get(event["stage_id"]) if event["stage_id"] else None
    return {
        "id": event["id"],
        "name": event["name"],
        "begin": when(event["date_begin"], event["date_tz"]),
        "end": when(event["date_end"], event["date_tz"]),
        "publication": publication_badge(event, now),
        "stage": stage["name"] if stage else "No stage",
        "kanban": KANBAN[event["kanban_state"]],
        "seats": seats_figure(event["seats"]["event"]),
    }


@router.get("/events")
async def events_list(request: Request, ctx: StudioCtx, actor: Read) -> Any:
    """The landing page: the events the operator may see, filtered like GET /admin/events."""
    values = request.query_params
    filters, problems = list_filters(values)
    stages = await stage_names(ctx)
    now = ctx.clock()
    rows: list[dict[str, Any]] = []
    next_query: dict[str, str] | None = None
    kept = {k: v for k, v in values.items() if k not in ("cursor", "done") and v}
    if not problems:
        listing = await verbs.list_events(ctx.db(), actor, now, limit=PAGE_SIZE, **filters)
        rows = [list_row(e, stages, now) for e in listing["items"]]
        if listing["next_cursor"]:
            next_query = {**kept, "cursor": listing["next_cursor"]}
    return page(
        request,
        "events_list.html",
        status_code=422 if problems else 200,
        problems=problems,
        title="Events",
        rows=rows,
        form={k: values.get(k, "") for k in ("q", "published", "stage_id", "date_from", "date_to")},
        published_choices=PUBLISHED_CHOICES,
        stage_choices=[("", "Any"), *((str(k), s["name"]) for k, s in stages.items())],
        next_query=next_query,
        first_query=kept,
        paged=bool(filters["cursor"]),
    )


# --- the detail and its forms -----------------------------------------------------------


async def detail_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event_id: UUID,
    *,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
    publish_value: str = "",
    waitlist_query: waitlist.ListQuery | None = None,
    waitlist_typed: dict[str, Any] | None = None,
    minted: tuple[str, datetime] | None = None,
) -> Any:
    now = ctx.clock()
    event = await verbs.get_event(ctx.db(), actor, event_id, now)
    stages = await stage_names(ctx)
    ticket_rows = await tickets.list_tickets(ctx.db(), actor, event_id=event_id, limit=LOOKUP_LIMIT)
    slot_rows: list[dict[str, Any]] = []
    if event["is_multi_slots"]:
        listing = await tickets.list_slots(ctx.db(), actor, event_id=event_id, limit=LOOKUP_LIMIT)
        slot_rows = listing["items"]
    stage = stages.get(event["stage_id"]) if event["stage_id"] else None
    tz = event["date_tz"]
    ticket_names = {t["id"]: t["name"] for t in ticket_rows["items"]}
    query = waitlist_query or waitlist.list_query({})
    if query.problems:
        problems = [*(problems or []), *query.problems]
        status_code = 422 if status_code == 200 else status_code
    section = await waitlist.section(
        ctx,
        actor,
        event,
        ticket_names,
        {s["id"]: when(s["date_begin"], tz) for s in slot_rows},
        query,
        waitlist_typed,
    )
    return page(
        request,
        "event_detail.html",
        status_code=status_code,
        problems=problems,
        title=event["name"],
        event=event,
        begin=when(event["date_begin"], tz),
        end=when(event["date_end"], tz),
        date_publish=when(event["date_publish"], tz) if event["date_publish"] else None,
        publication=publication_badge(event, now),
        timing=timing(event),
        stage=stage,
        kanban=KANBAN[event["kanban_state"]],
        gauges=gauges(event, ticket_names, slot_rows),
        can_publish=event["active"] and not event["is_published"],
        can_unpublish=event["is_published"] or event["date_publish"] is not None,
        can_mark_done=not (stage and stage["pipe_end"]),
        can_write=actor.has("event:write"),
        publish_value=publish_value,
        can_print_badges=actor.has("registration:pii"),
        badge_tickets=[("", "Any ticket")]
        + [(str(t["id"]), t["name"]) for t in ticket_rows["items"]],
        badge_slots=[("", "Any slot")]
        + [(str(s["id"]), when(s["date_begin"], tz)) for s in slot_rows],
        badge_format=BADGE_FORMATS.get(event["badge_format"], event["badge_format"]),
        waitlist=section,
        public_page=public_section(request, ctx, actor, event, now, minted),
    )


@router.get("/events/{event_id}")
async def event_detail(request: Request, ctx: StudioCtx, actor: Read, event_id: UUID) -> Any:
    """The detail; `waitlist_status` and `waitlist_cursor` filter and page its waiting
    list."""
    query = waitlist.list_query(request.query_params)
    return await detail_page(request, ctx, actor, event_id, waitlist_query=query)


Verb = Callable[[], Awaitable[Any]]


async def act(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event_id: UUID,
    verb: Verb,
    done: str,
    publish_value: str = "",
    waitlist_typed: dict[str, Any] | None = None,
) -> Any:
    """Run one of the detail's verbs; its refusal shows on the detail with the API's code."""
    try:
        await verb()
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS:
            raise
        return await detail_page(
            request,
            ctx,
            actor,
            event_id,
            problems=refusal_errors(exc),
            status_code=exc.status,
            publish_value=publish_value,
            waitlist_typed=waitlist_typed,
        )
    return see_other(request, f"/events/{event_id}", done=done)


def publish_date(raw: str | None, tz: str) -> datetime | None:
    """A `datetime-local` value read in the event's own zone (the form says so)."""
    if raw is None:
        return None
    local = datetime.fromisoformat(raw)
    return local if local.tzinfo else local.replace(tzinfo=zone(tz))


@router.post("/events/{event_id}/publish")
async def publish(
    request: Request, ctx: StudioCtx, actor: Write, event_id: UUID, form: Posted
) -> Any:
    """POST /admin/events/{id}/publish, with the optional publication date of its body."""
    raw = form.optional("date_publish")
    try:
        event = await verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
        body = PublishBody(date_publish=publish_date(raw, event["date_tz"]))
    except (ValueError, ValidationError) as exc:
        problems = (
            validation_errors(exc)
            if isinstance(exc, ValidationError)
            else [FieldError("Enter a date and time.", "validation_failed", "date_publish")]
        )
        return await detail_page(request, ctx, actor, event_id, problems=problems, status_code=422)
    return await act(
        request,
        ctx,
        actor,
        event_id,
        lambda: publication.publish_event(
            ctx.db(), actor, event_id, ctx.clock(), date_publish=body.date_publish
        ),
        "published",
        publish_value=raw or "",
    )


@router.post("/events/{event_id}/unpublish")
async def unpublish(
    request: Request, ctx: StudioCtx, actor: Write, event_id: UUID, form: Posted
) -> Any:
    del form  # CSRF-checked; the command has no fields
    return await act(
        request,
        ctx,
        actor,
        event_id,
        lambda: publication.unpublish_event(ctx.db(), actor, event_id, ctx.clock()),
        "unpublished",
    )


@router.post("/events/{event_id}/mark-done")
async def mark_done(
    request: Request, ctx: StudioCtx, actor: Write, event_id: UUID, form: Posted
) -> Any:
    del form
    return await act(
        request,
        ctx,
        actor,
        event_id,
        lambda: lifecycle.mark_event_done(ctx.db(), actor, event_id, ctx.clock()),
        "marked_done",
    )


# --- the public page and private links ----------------------------------------------------


def public_url(request: Request, ctx: ServiceContext, key: str) -> str:
    """The public event page of `key` (an event id or a capability), absolute: under the
    public base URL when one is set (as mailed links are), else under this request's."""
    base = ctx.settings.public_base_url.rstrip("/") or str(request.base_url).rstrip("/")
    return f"{base}{BASE_PATH}{EVENT_PAGE_PATH.format(event_id_or_capability=key)}"


def span_words(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    count, unit = (days, "day") if days and not rest else (max(1, round(seconds / 3600)), "hour")
    return f"{count} {unit}{'' if count == 1 else 's'}"


def public_section(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event: Mapping[str, Any],
    now: datetime,
    minted: tuple[str, datetime] | None,
) -> dict[str, Any]:
    """The public page's address while anyone may open it, whether a private link can be
    made here, and the one just made (shown in this answer only)."""
    visible = publication.is_visible(dict(event), now)
    link = None
    if minted is not None:
        link = {
            "url": public_url(request, ctx, minted[0]),
            "until": when(minted[1], event["date_tz"]),
        }
    return {
        "url": public_url(request, ctx, str(event["id"])) if visible else None,
        "configured": ctx.codec.configured,
        "can_mint": actor.has("capability:mint"),
        "lasts": span_words(ctx.settings.intake_ttl_s),
        "minted": link,
    }


@router.post("/events/{event_id}/private-link")
async def private_link(
    request: Request, ctx: StudioCtx, actor: Read, _: Mint, event_id: UUID, form: Posted
) -> Any:
    """POST /admin/events/{id}/capabilities/intake: a private link to the event's page, made
    and audited by the API's verb. The link shows in this answer only (never in an address,
    a note or the cookie); reloading it sends the form again, which makes another link."""
    del form  # CSRF-checked; the command has no fields
    if not ctx.codec.configured:  # the page offers no button then; say why on the page
        unset = errors.CapabilitySecretNotConfigured()
        problem = FieldError(unset.detail, unset.code)
        return await detail_page(request, ctx, actor, event_id, problems=[problem], status_code=409)
    try:
        minted = await public.mint_intake(
            ctx.db(), actor, ctx.codec, event_id, ctx.settings.intake_ttl_s, ctx.clock()
        )
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS:
            raise
        problems = refusal_errors(exc)
        return await detail_page(
            request, ctx, actor, event_id, problems=problems, status_code=exc.status
        )
    return await detail_page(request, ctx, actor, event_id, minted=minted)


Pii = Annotated[Actor, needs("registration:pii")]
BADGE_FORMATS = {
    "A6": "A6, one badge a page",
    "A4_french_fold": "A4 folded in two, one badge a page",
    "four_per_sheet": "A4, four badges a sheet",
}


@router.get("/events/{event_id}/badges.pdf")
async def print_badges(request: Request, ctx: StudioCtx, actor: Pii, event_id: UUID) -> Any:
    """GET /admin/events/{id}/badges.pdf from the event page's form: the same verb, the
    same checks, audit and stream; a refusal shows on the event page."""
    values = request.query_params
    states = tuple(dict.fromkeys(s for s in values.getlist("state")[:8] if s))
    states = states or badges.DEFAULT_STATES
    problems: list[FieldError] = []
    ids: dict[str, UUID | None] = {}
    for name in ("event_ticket_id", "event_slot_id"):
        raw = query_text(values, name, 40)
        try:
            ids[name] = UUID(raw) if raw else None
        except ValueError:
            problems.append(FieldError("Choose one of the list.", "validation_failed", name))
    if any(s not in {"draft", "open", "done", "cancel"} for s in states):
        problems.append(FieldError("Choose among the states.", "validation_failed", "state"))
    if not problems:
        filters = badges.BadgeFilters(
            states=states, ticket_id=ids["event_ticket_id"], slot_id=ids["event_slot_id"]
        )
        try:
            sheet = await badges.start_badges(ctx.db(), actor, event_id, filters)
        except errors.DomainError as exc:
            if exc.status != 422:
                raise
            problems = refusal_errors(exc)
        else:
            return StreamingResponse(
                sheet.chunks(),
                media_type="application/pdf",
                headers={"Content-Disposition": f'inline; filename="badges-{event_id}.pdf"'},
            )
    return await detail_page(request, ctx, actor, event_id, problems=problems, status_code=422)


# --- the waiting list -------------------------------------------------------------------
