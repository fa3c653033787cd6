"""Console pages: the check-in desk, a keyboard-first scan page.

A scan is `POST /desk/scan` → the same verb and per-actor throttle as `POST
/admin/desk/scan` → 303 to `GET /desk?event_id=&scan=<note>`. The note is the scan's
answer (the outcome, the attendee's masked name, state, ticket and slot) signed for this
session: the page reads nothing back, and shows the outcome in a large banner with words
and the stable code, the barcode field empty and focused for the next scan.

Event names come from the events list verb only for an operator holding `event:read` (the
API's scope for that list); a desk-only token types or follows the event id instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.choices import event_choices
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    needs,
    opened_note,
    page,
    see_other,
    signed_note,
    validation_errors,
)
from events_svc.documents import when
from events_svc.models.desk import DeskScan
from events_svc.routes.deps import ServiceContext
from events_svc.verbs import desk
from events_svc.verbs.pii import mask_name

router = APIRouter()

SCOPE = "desk:scan"
Scanner = Annotated[Actor, needs(SCOPE)]

TICKET_SHOWN = 80  # characters of a ticket's name a scan's note carries
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


def _utc(value: Any) -> str:
    instant = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return when(instant, "UTC")


def _receipt(result: dict[str, Any]) -> dict[str, Any]:
    """What the page shows of a scan's answer after the 303: the outcome, and of the
    attendee the masked name, the state, the ticket's name and the slot's start. It rides
    the redirect as a note signed for this session, so the page reads nothing back and no
    registration id in an address can show an attendee to anyone."""
    seen = result["registration"]
    note: dict[str, Any] = {"outcome": result["outcome"]}
    if seen:
        slot = seen["slot"]
        note["attendee"] = {
            "name": mask_name(seen["name"] or ""),
            "state": seen["state"],
            "ticket": seen["ticket"]["name"][:TICKET_SHOWN] if seen["ticket"] else None,
            "slot": _utc(slot["date_begin"]) if slot else None,
        }
    return note


async def _desk_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    event_id: UUID | None,
    *,
    outcome: str | None = None,
    attendee: dict[str, Any] | None = None,
    scanned_at: str | None = None,
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
        choices=await event_choices(ctx, actor, event_id, upcoming=True),
        event_id=str(event_id) if event_id else "",
        outcome=outcome if kind else None,
        banner_kind=kind,
        banner_words=words,
        attendee=attendee or {},
        scanned_at=scanned_at,
    )


@router.get("/desk", name="desk")
async def desk_page(
    request: Request,
    ctx: StudioCtx,
    actor: Scanner,
    event_id: str | None = None,
    scan: str | None = None,
) -> Any:
    """The scan form; after a scan, its outcome banner and the attendee it named."""
    note = opened_note(request, actor, scan) or {}
    desk_event = _uuid(event_id)
    if note.get("event_id") != str(desk_event):  # a scan at this desk's event only
        note = {}
    outcome = note.get("outcome")
    shown = outcome if outcome in BANNERS else None
    attendee = note.get("attendee") if shown else None
    return await _desk_page(
        request,
        ctx,
        actor,
        desk_event,
        outcome=shown,
        attendee=attendee or {},
        scanned_at=note.get("at"),
    )


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
    receipt = {**_receipt(result), "event_id": str(body.event_id), "at": _utc(ctx.clock())}
    note = signed_note(request, actor, receipt)
    return see_other(request, "/desk", event_id=str(body.event_id), scan=note)
