"""Console pages: the check-in desk, a keyboard-first scan page.

A scan is `POST /desk/scan` → the same verb and per-actor throttle as `POST
/admin/desk/scan` → 303 to `GET /desk?event_id=&outcome=&registration=`. The redirect
carries the outcome code and the registration id only, never attendee data: the page
reads the attendee back (the name masked) and shows the outcome in a large banner with
words and the stable code, the barcode field empty and focused for the next scan.

Event names come from the events list verb only for an operator holding `event:read` (the
API's scope for that list); a desk-only token types or follows the event id instead.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    needs,
    page,
    see_other,
    validation_errors,
)
from events_svc.models.desk import DeskScan
from events_svc.routes.deps import ServiceContext
from events_svc.verbs import desk, registrations, tickets
from events_svc.verbs import events as event_verbs
from events_svc.verbs.pii import mask_registration

router = APIRouter()

SCOPE = "desk:scan"
Scanner = Annotated[Actor, needs(SCOPE)]
EVENT_CHOICES = 200  # the events list verb's largest page

# outcome code -> (banner kind, the words shown above the code)
BANNERS: dict[str, tuple[str, str]] = {
    "confirmed_registration": ("good", "Checked in"),
    "already_registered": ("warn", "Already checked in"),
    "need_manual_confirmation": ("warn", "Ticket of another event: check it by hand"),
    "unconfirmed_registration": ("warn", "Registration not confirmed: not checked in"),
    "canceled_registration": ("bad", "Registration cancelled: not checked in"),
    "not_ongoing_event": ("bad", "The ticket's event is not ongoing: not checked in"),
    "invalid_ticket": ("bad", "Unknown ticket"),
}

# the summary's words for a field the scan command refuses (the code stays the API's)
MESSAGES = {
    "event_id": "Choose the event this desk checks in for.",
    "barcode": "Scan or type a barcode (1 to 64 characters).",
}


def _uuid(value: str | None) -> UUID | None:
    try:
        return UUID(value) if value else None
    except ValueError:
        return None


async def _event_choices(
    ctx: ServiceContext, actor: Actor, selected: UUID | None
) -> list[tuple[str, str]] | None:
    """The events a desk may pick (not yet ended, by start), or None when the operator may
    not list events; a preselected event that has ended is kept in the list."""
    if not actor.has("event:read"):
        return None
    now = ctx.clock()
    listed = await event_verbs.list_events(ctx.db(), actor, now, date_from=now, limit=EVENT_CHOICES)
    choices = [(str(e["id"]), e["name"]) for e in listed["items"]]
    if selected is not None and str(selected) not in {value for value, _ in choices}:
        try:
            event = await event_verbs.get_event(ctx.db(), actor, selected, now)
            choices.insert(0, (str(event["id"]), event["name"]))
        except errors.NotFound:
            pass  # an event id the operator cannot see: the scan answers for it
    return [("", "Choose an event"), *choices]


async def _attendee(ctx: ServiceContext, actor: Actor, registration_id: UUID) -> dict[str, Any]:
    """The scanned attendee as the desk page shows it after the redirect: the name masked
    (the redirect names only the id), the state, the ticket's name and the slot. The scan
    answer itself shows this much and more to a `desk:scan` token, so nothing new leaks."""
    try:
        view = mask_registration(
            await registrations.get_registration(ctx.db(), actor, registration_id)
        )
    except errors.NotFound:
        return {}
    shown: dict[str, Any] = {"name": view["name"], "state": view["state"]}
    if view["event_ticket_id"] is not None:
        ticket = await tickets.get_ticket(ctx.db(), actor, view["event_ticket_id"])
        shown["ticket"] = ticket["name"]
    if view["event_slot_id"] is not None:
        slot = await tickets.get_slot(ctx.db(), actor, view["event_slot_id"])
        shown["slot"] = slot["date_begin"]
    return shown


async def _desk_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event_id: UUID | None,
    *,
    outcome: str | None = None,
    attendee: dict[str, Any] | None = None,
    status_code: int = 200,
    problems: list[FieldError] | None = None,
) -> Any:
    kind, words = BANNERS.get(outcome or "", ("", ""))
    title = f"{words} · Desk" if outcome else "Desk"
    return page(
        request,
        "desk.html",
        status_code=status_code,
        problems=problems,
        title=title,
        choices=await _event_choices(ctx, actor, event_id),
        event_id=str(event_id) if event_id else "",
        outcome=outcome if kind else None,
        banner_kind=kind,
        banner_words=words,
        attendee=attendee or {},
    )


@router.get("/desk", name="desk")
async def desk_page(
    request: Request,
    ctx: StudioCtx,
    actor: Scanner,
    event_id: str | None = None,
    outcome: str | None = None,
    registration: str | None = None,
) -> Any:
    """The scan form; after a scan, its outcome banner and the attendee it named."""
    shown = outcome if outcome in BANNERS else None
    reg_id = _uuid(registration)
    attendee = await _attendee(ctx, actor, reg_id) if shown and reg_id else {}
    return await _desk_page(request, ctx, actor, _uuid(event_id), outcome=shown, attendee=attendee)


@router.post("/desk/scan")
async def scan(request: Request, ctx: StudioCtx, actor: Scanner, form: Posted) -> Any:
    """One scan through the desk verb (the API's per-actor throttle first); the barcode is
    checked by the API's own command model, so a refusal has the API's code."""
    try:
        body = DeskScan(event_id=form.text("event_id"), barcode=form.values.get("barcode", ""))
    except ValidationError as exc:
        problems = [
            FieldError(
                MESSAGES.get(p.field or "", p.message), errors.ValidationFailed.code, p.field
            )
            for p in validation_errors(exc)
        ]
        return await _desk_page(
            request, ctx, actor, _uuid(form.text("event_id")), status_code=422, problems=problems
        )
    if ctx.throttle is not None:
        await ctx.throttle.check_actor("desk", actor.id)
    result = await desk.scan(ctx.db(), actor, body.event_id, body.barcode, ctx.clock())
    seen = result["registration"]
    return see_other(
        request,
        "/desk",
        event_id=str(body.event_id),
        outcome=result["outcome"],
        registration=str(seen["id"]) if seen else None,
    )
