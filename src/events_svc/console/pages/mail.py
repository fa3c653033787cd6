"""Console pages of communication: an event's scheduler lines, and the outbox of what the
standalone mail and sms adapters queued.

They call the verbs of `routes/mail.py`: `list_mails` (GET /admin/mails?event_id=) and
`list_outbox` (GET /admin/outbox) in its masked mode only. The console never asks for
`pii_full`: recipients show masked and subjects, bodies and attachment contents stay
withheld, because a full read is an audited API call, not a page anyone glances at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request

from events_svc.actors import Actor
from events_svc.console.choices import event_choices
from events_svc.console.pages.events import LOOKUP_LIMIT, when
from events_svc.console.web import FieldError, StudioCtx, needs, page, query_text
from events_svc.verbs.events import records as event_verbs
from events_svc.verbs.mail import lines, outbox, templates

router = APIRouter()

Read = Annotated[Actor, needs("event:read")]
RegistrationRead = Annotated[Actor, needs("registration:read")]

PAGE_SIZE = 25
MAIL_STATES = {
    "scheduled": ("Scheduled", "info"),
    "running": ("Running", "info"),
    "sent": ("Sent", "good"),
    "error": ("Error", "bad"),
    "cancelled": ("Cancelled", "warn"),
}
KINDS = {
    "after_sub": "after each registration",
    "before_event": "before the event begins",
    "after_event_start": "after the event begins",
    "after_event": "after the event ends",
    "before_event_end": "before the event ends",
}
CHANNELS = {"mail": "Email", "sms": "Text message"}


def interval(line: Mapping[str, Any]) -> str:
    """A line's timing in words: "1 day before the event begins"."""
    kind = KINDS.get(line["interval_kind"], line["interval_kind"])
    unit, nbr = line["interval_unit"], line["interval_nbr"]
    if unit == "now":
        return f"At once {kind}"
    name = unit[:-1] if nbr == 1 else unit
    return f"{nbr} {name} {kind}"


def line_row(line: dict[str, Any], names: Mapping[UUID, str], tz: str) -> dict[str, Any]:
    sent, pending = line["count_sent"], line["count_pending"]
    dropped, failed = line["count_dropped"], line.get("count_failed", 0)
    total = sent + pending + dropped + failed
    return {
        "id": line["id"],
        "interval": interval(line),
        "channel": CHANNELS.get(line["notification_channel"], line["notification_channel"]),
        "template": names.get(line["template_ref"]),
        "template_ref": line["template_ref"],
        "state": MAIL_STATES.get(line["mail_state"], (line["mail_state"], "info")),
        "scheduled": when(line["scheduled_date"], tz) if line["scheduled_date"] else "—",
        "error_kind": line["error_kind"],
        "error_at": when(line["error_datetime"], tz) if line["error_datetime"] else None,
        "error_detail": line.get("error_detail"),
        "attempts": line.get("attempts", 0),
        "next_attempt": when(line["next_attempt_at"], tz) if line.get("next_attempt_at") else None,
        "counts": {"sent": sent, "pending": pending, "dropped": dropped, "failed": failed},
        "processed": sent + dropped + failed,
        "total": total,
    }


@router.get("/events/{event_id}/schedulers")
async def schedulers(request: Request, ctx: StudioCtx, actor: Read, event_id: UUID) -> Any:
    """The scheduler lines of an event with their derived `mail_state` and errors."""
    event = await event_verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
    listing = await lines.list_mails(ctx.db(), actor, event_id)
    stored = await templates.list_templates(
        ctx.db(), actor, links_unavailable=ctx.links.unavailable, limit=LOOKUP_LIMIT
    )
    names = {t["id"]: t["name"] for t in stored["items"]}
    return page(
        request,
        "event_schedulers.html",
        title=f"Schedulers · {event['name']}",
        event=event,
        rows=[line_row(m, names, event["date_tz"]) for m in listing["items"]],
    )


def message_row(message: dict[str, Any]) -> dict[str, Any]:
    """A queued message as the masked API answers it (no subject, body or contents)."""
    return {
        "id": message["id"],
        "when": when(message["created_at"]),
        "channel": CHANNELS.get(message["channel"], message["channel"]),
        "recipient": message["recipient"],
        "attachments": [
            f"{a.get('filename', 'attachment')} ({a.get('content_type', 'unknown type')})"
            for a in message["attachments"]
        ],
        "registration_id": message["registration_id"],
        "origin": (
            "Scheduler line"
            if message["scheduler_id"]
            else "Event operation"
            if message.get("trigger_id")
            else "Other"
        ),
    }


@router.get("/outbox")
async def outbox_page(request: Request, ctx: StudioCtx, actor: RegistrationRead) -> Any:
    """What the standalone adapters queued for one event, masked like GET /admin/outbox."""
    values = request.query_params
    raw = query_text(values, "event_id", 40)
    cursor = query_text(values, "cursor", 512)
    problems: list[FieldError] = []
    event_id: UUID | None = None
    if raw is not None:
        try:
            event_id = UUID(raw)
        except ValueError:
            problems.append(FieldError("Choose an event.", "validation_failed", "event_id"))
    rows: list[dict[str, Any]] = []
    event: dict[str, Any] | None = None
    next_query: dict[str, str] | None = None
    if event_id is not None:
        if actor.has("event:read"):
            event = await event_verbs.get_event(ctx.db(), actor, event_id, ctx.clock())
        listing = await outbox.list_outbox(
            ctx.db(), actor, event_id, pii_full=False, limit=PAGE_SIZE, cursor=cursor
        )
        rows = [message_row(m) for m in listing["items"]]
        if listing["next_cursor"]:
            next_query = {"event_id": str(event_id), "cursor": listing["next_cursor"]}
    return page(
        request,
        "outbox.html",
        status_code=422 if problems else 200,
        problems=problems,
        title="Outbox",
        event_id=str(event_id) if event_id else (raw or ""),
        event=event,
        choices=await event_choices(ctx, actor, event_id),
        rows=rows,
        chosen=event_id is not None,
        next_query=next_query,
        paged=cursor is not None,
    )
