"""Sending one batch of one scheduler line: addresses, contexts, one render, the queue.

An attendee without a usable address (`addresses.is_email` / `is_phone` on the
line's channel) is set aside: the engine gives them a failed receipt, and the
others are sent. Every addressed recipient of the batch is rendered in ONE call of
the template renderer; any failure of that call is the line's failure
(`render_failed` unless the renderer typed it), and nothing of the batch is sent.
The line's channel picks the queue: a mail line queues (email, subject, body) on the
`MailQueue`, an sms line queues (phone, body text) on the `SmsQueue` (whose refusing
default parks the line as `sms_enqueue_refused`). The queue then takes the messages
one by one; a refusal stops the batch there, and what it took before is kept. Runs
inside the batch's transaction: the renderer and the queue receive its connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc.addresses import is_email, is_phone
from events_svc.db import Connection
from events_svc.ports import (
    MailErrorKind,
    MailQueue,
    MailRefused,
    OutgoingMessage,
    OutgoingSms,
    Ports,
    RenderRequest,
    SmsQueue,
    attachments_of,
)
from events_svc.verbs.common import in_zone
from events_svc.verbs.mail.failures import LINE_FAILURES, LineFailure

# (event, slot, registration, now) -> {"ics": url, "my_tickets": url}, "" when unavailable
LinkBuilder = Callable[[UUID, UUID | None, UUID, datetime], dict[str, str]]

_REGISTRATION_FIELDS = ("name", "email", "phone", "company_name", "barcode", "state")
NO_OFFER: dict[str, Any] = {"offer_url": "", "decline_url": "", "expires_at": "", "seats": ""}
_DETAIL_MAX = 300


def _no_links(
    event_id: UUID, slot_id: UUID | None, registration: UUID, now: datetime
) -> dict[str, str]:
    return {"ics": "", "my_tickets": ""}


@dataclass(frozen=True)
class PassOptions:
    """How a pass works: batch size, per-pass cap, the fallback sender, the links."""

    batch: int
    cap: int
    default_sender: str
    links: LinkBuilder = field(default=_no_links)


@dataclass
class Sent:
    """What sending one batch did."""

    queued: list[UUID] = field(default_factory=list)
    unaddressed: list[UUID] = field(default_factory=list)
    failure: LineFailure | None = None


def refusal(exc: BaseException, default: MailErrorKind) -> LineFailure:
    """A port's refusal as a line failure; anything but MailRefused keeps only its type."""
    if isinstance(exc, MailRefused):
        kind = MailErrorKind(exc.kind) if exc.kind in LINE_FAILURES else default
        return LineFailure(kind, str(exc)[:_DETAIL_MAX])
    return LineFailure(default, type(exc).__name__)


def _address(channel: str, r: dict[str, Any]) -> str | None:
    """The attendee's address on the line's channel, or None when it is not usable."""
    if channel == "mail":
        return str(r["email"]) if is_email(r["email"] or "") else None
    return str(r["phone"]) if is_phone(r["phone"] or "") else None


def recipient_context(
    m: dict[str, Any],
    r: dict[str, Any],
    links: LinkBuilder,
    now: datetime,
    waitlist: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The documented template context of one recipient (`templating.CONTEXT_FIELDS`);
    `waitlist` only in a waiting-list offer's mail (empty text in every other)."""
    tz = ZoneInfo(m["date_tz"])
    slot = None
    if r["slot_begin"] is not None:
        slot = {"date_begin": in_zone(r["slot_begin"], tz), "date_end": in_zone(r["slot_end"], tz)}
    return {
        "registration": {k: r[k] for k in _REGISTRATION_FIELDS},
        "event": {
            "name": m["event_name"],
            "date_begin": in_zone(m["date_begin"], tz),
            "date_end": in_zone(m["date_end"], tz),
            "date_tz": m["date_tz"],
            "location": m["location"],
            "event_url": m["event_url"],
        },
        "ticket": {"name": r["ticket_name"]} if r["ticket_name"] is not None else None,
        "slot": slot,
        "links": links(m["event_id"], r["event_slot_id"], r["id"], now),
        "waitlist": dict(waitlist or NO_OFFER),
    }


async def send_batch(
    conn: Connection,
    ports: Ports,
    m: dict[str, Any],
    sender: str,
    options: PassOptions,
    recipients: list[dict[str, Any]],
    now: datetime,
) -> Sent:
    """Render and queue the batch's addressed recipients, in the batch's transaction."""
    out = Sent()
    queue = _queue_of(ports, m["channel"])
    try:
        await _queue(conn, ports, m, sender, options, recipients, now, out)
        if out.queued:  # before the receipts, in the same transaction
            await queue.flush(conn)
    except MailRefused as refused:  # a queue refusing the batch as a whole
        out.failure = refusal(refused, _refused_kind(m["channel"]))
        out.queued = []
    except BaseException:
        # drop what the queue holds for this transaction: it is rolling back
        with contextlib.suppress(Exception):
            await queue.flush(conn)
        raise
    return out


def _queue_of(ports: Ports, channel: str) -> MailQueue | SmsQueue:
    return ports.sms_queue if channel == "sms" else ports.mail_queue


def _refused_kind(channel: str) -> MailErrorKind:
    """What a refusal of the line's queue is recorded as, when the queue did not type it."""
    return MailErrorKind.SMS_ENQUEUE_REFUSED if channel == "sms" else MailErrorKind.ENQUEUE_REFUSED


async def _queue(
    conn: Connection,
    ports: Ports,
    m: dict[str, Any],
    sender: str,
    options: PassOptions,
    recipients: list[dict[str, Any]],
    now: datetime,
    out: Sent,
) -> None:
    addressed = []
    for r in recipients:
        to = _address(m["channel"], r)
        if to is None:
            out.unaddressed.append(r["id"])
        else:
            addressed.append((r, to))
    if not addressed:
        return
    contexts = [recipient_context(m, r, options.links, now) for r, _ in addressed]
    request = RenderRequest(m["template_ref"], m["template_kind"], contexts)
    try:  # whatever a template does, it fails its own line (this batch), never the pass
        rendered = await ports.template_renderer.render(conn, request)
        if len(rendered) != len(addressed):
            raise MailRefused(MailErrorKind.RENDER_FAILED, "the renderer answered a partial batch")
    except Exception as exc:
        out.failure = refusal(exc, MailErrorKind.RENDER_FAILED)
        return
    for (r, to), text in zip(addressed, rendered, strict=True):
        ids = {"event_id": m["event_id"], "registration_id": r["id"], "scheduler_id": m["id"]}
        try:
            if m["channel"] == "sms":
                sms = OutgoingSms(phone=to, body_text=text.body, sender=sender, **ids)
                await ports.sms_queue.enqueue(conn, sms)
            else:
                mail = OutgoingMessage(
                    channel="mail",
                    recipient=to,
                    sender=sender,
                    subject=text.subject,
                    body=text.body,
                    attachments=attachments_of(text, r["id"]),
                    **ids,
                )
                await ports.mail_queue.enqueue(conn, mail)
        except Exception as exc:
            out.failure = refusal(exc, _refused_kind(m["channel"]))
            return
        out.queued.append(r["id"])
