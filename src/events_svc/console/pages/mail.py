"""Console pages of communication: an event's scheduler lines, and the outbox of what the
standalone mail and sms adapters queued.

They call the verbs of `routes/mail.py`: `list_mails` (GET /admin/mails?event_id=),
`list_outbox` (GET /admin/outbox) in its masked mode only, `outbox_summary` (GET
/admin/outbox/summary) and `retry_message` (POST /admin/outbox/{id}/retry). The console
never asks for `pii_full`: recipients show masked and subjects, bodies and attachment
contents stay withheld, because a full read is an audited API call, not a page anyone
glances at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.choices import event_choices
from events_svc.console.pages.events import FORM_REFUSALS, LOOKUP_LIMIT
from events_svc.console.web import (
    FieldError,
    Posted,
    StudioCtx,
    needs,
    page,
    query_text,
    refusal_errors,
    see_other,
)
from events_svc.documents import when
from events_svc.verbs.events import records as event_verbs
from events_svc.verbs.mail import lines, outbox, templates

router = APIRouter()

Read = Annotated[Actor, needs("event:read")]
RegistrationRead = Annotated[Actor, needs("registration:read")]
Run = Annotated[Actor, needs("scheduler:run")]

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


DELIVERY = {
    "queued": ("Queued", "info"),
    "sending": ("Sending", "info"),
    "sent": ("Sent", "good"),
    "retrying": ("Retrying", "warn"),
    "failed": ("Failed", "bad"),
}
ERROR_KINDS = {
    "connection": "The relay could not be reached",
    "timeout": "The relay did not answer in time",
    "temporary": "The relay asked to try later",
    "permanent": "The relay refused the message",
    "expired": "Gave up after 48 hours of retries",
    "render": "The message could not be built",
}
RETRYABLE = frozenset({"failed", "retrying"})


def message_row(message: dict[str, Any]) -> dict[str, Any]:
    """A queued message as the masked API answers it (no subject, body or contents), with
    its delivery state in words."""
    error = message.get("last_error")
    return {
        "id": message["id"],
        "when": when(message["created_at"]),
        "channel": CHANNELS.get(message["channel"], message["channel"]),
        "recipient": message["recipient"],
        "state": DELIVERY.get(message["delivery_state"], (message["delivery_state"], "info")),
        "retryable": message["delivery_state"] in RETRYABLE,
        "attempts": message["attempts"],
        "next_attempt": (when(message["next_attempt_at"]) if message["next_attempt_at"] else None),
        "sent_at": when(message["sent_at"]) if message["sent_at"] else None,
        "error": (
            {
                "kind": error["kind"],
                "words": ERROR_KINDS.get(error["kind"], error["kind"]),
                "code": error["code"],
                "detail": error["detail"],
            }
            if error
            else None
        ),
        "attachments": [
            "tickets.pdf (rendered when sent)"
            if a.get("kind") == "tickets_pdf"
            else f"{a.get('filename', 'attachment')} ({a.get('content_type', 'unknown type')})"
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


@dataclass(frozen=True)
class OutboxFilters:
    """The outbox page's filters, read from its query string (`problems` when one is
    not a choice the page offers)."""

    event_id: UUID | None
    raw_event: str
    delivery_state: str | None
    channel: str | None
    cursor: str | None
    problems: list[FieldError]

    def query(self) -> dict[str, str | None]:
        return {
            "event_id": str(self.event_id) if self.event_id else None,
            "delivery_state": self.delivery_state,
            "channel": self.channel,
        }


def outbox_filters(values: Mapping[str, str]) -> OutboxFilters:
    raw = query_text(values, "event_id", 40)
    problems: list[FieldError] = []
    event_id: UUID | None = None
    if raw is not None:
        try:
            event_id = UUID(raw)
        except ValueError:
            problems.append(FieldError("Choose an event.", "validation_failed", "event_id"))
    state = query_text(values, "delivery_state", 20)
    if state is not None and state not in DELIVERY:
        problems.append(FieldError("Choose a state.", "validation_failed", "delivery_state"))
        state = None
    channel = query_text(values, "channel", 10)
    if channel is not None and channel not in CHANNELS:
        problems.append(FieldError("Choose a channel.", "validation_failed", "channel"))
        channel = None
    cursor = query_text(values, "cursor", 512)
    return OutboxFilters(event_id, raw or "", state, channel, cursor, problems)


async def outbox_view(
    request: Request,
    ctx: StudioCtx,
    actor: Actor,
    filters: OutboxFilters,
    *,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Any:
    """The outbox page: the counts per delivery state and the messages the filters keep
    (an event's, or every event's the operator sees), masked like GET /admin/outbox."""
    problems = [*filters.problems, *(problems or [])]
    rows: list[dict[str, Any]] = []
    event: dict[str, Any] | None = None
    next_query: dict[str, str] | None = None
    counts: dict[str, int] = {}
    if filters.event_id is not None or not filters.problems:
        if filters.event_id is not None and actor.has("event:read"):
            event = await event_verbs.get_event(ctx.db(), actor, filters.event_id, ctx.clock())
        counts = await outbox.outbox_summary(ctx.db(), actor, filters.event_id)
        listing = await outbox.list_outbox(
            ctx.db(),
            actor,
            filters.event_id,
            delivery_state=filters.delivery_state,
            channel=filters.channel,
            pii_full=False,
            limit=PAGE_SIZE,
            cursor=filters.cursor,
        )
        rows = [message_row(m) for m in listing["items"]]
        if listing["next_cursor"]:
            kept = {k: v for k, v in filters.query().items() if v is not None}
            next_query = {**kept, "cursor": listing["next_cursor"]}
    choices = await event_choices(ctx, actor, filters.event_id)
    if choices is not None:
        choices[0] = ("", "All events")
    kept = {k: v for k, v in filters.query().items() if v is not None and k != "delivery_state"}
    if filters.delivery_state is not None:
        kept_all = {**kept, "delivery_state": filters.delivery_state}
    else:
        kept_all = kept
    return page(
        request,
        "outbox.html",
        status_code=status_code if not filters.problems else 422,
        problems=problems,
        title="Outbox",
        event_id=str(filters.event_id) if filters.event_id else filters.raw_event,
        event=event,
        choices=choices,
        states=[("", "Every state"), *((k, v[0]) for k, v in DELIVERY.items())],
        channels=[("", "Every channel"), *CHANNELS.items()],
        filters=filters,
        counts=[(DELIVERY[k], counts.get(k, 0), {**kept, "delivery_state": k}) for k in DELIVERY]
        if counts
        else [],
        kept=kept_all,
        rows=rows,
        can_retry=actor.has("scheduler:run"),
        next_query=next_query,
        paged=filters.cursor is not None,
    )


@router.get("/outbox")
async def outbox_page(request: Request, ctx: StudioCtx, actor: RegistrationRead) -> Any:
    """GET /admin/outbox and its summary, as a page with the same filters."""
    return await outbox_view(request, ctx, actor, outbox_filters(request.query_params))


@router.post("/outbox/{message_id}/retry")
async def retry(
    request: Request, ctx: StudioCtx, actor: Run, message_id: UUID, form: Posted
) -> Any:
    """POST /admin/outbox/{id}/retry: the message is due now; back to the same filters."""
    filters = outbox_filters(form.values)
    try:
        await outbox.retry_message(ctx.db(), actor, message_id, ctx.clock())
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS or not actor.has("registration:read"):
            raise  # the error page names the code (the list is for registration:read)
        return await outbox_view(
            request, ctx, actor, filters, problems=refusal_errors(exc), status_code=exc.status
        )
    return see_other(request, "/outbox", done="outbox_retried", **filters.query())
