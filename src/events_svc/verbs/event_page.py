"""The public event page's read: what an attendee sees of an event before registering.

`event_page` opens the page's key as the intake does (an event id, or a private intake
capability) and answers the event's facts, its tickets with their sale windows, its slots
still to come and its questions, each scope with the availability the ONE seat read model
gives (`get_seat_view`) in words (the counts stay out: the page of one state of the
words is the same page), and whether a form may be offered (`status`). One statement reads
the event and its lists, the seat read model its counts: the page costs what the JSON seat
read model costs, plus one round trip.

The uniform public 404 (`event_not_published`) for what no one may see here: an unknown or
archived event, a tampered or expired capability, an event not published (by id). A
cancelled or finished event is shown, with the reason there is no form.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from events_svc import capabilities, errors
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool, connection
from events_svc.models import MAX_PER_ORDER
from events_svc.verbs.common import in_zone
from events_svc.verbs.events import closed_to_registrations, is_visible
from events_svc.verbs.public import intake_key
from events_svc.verbs.registrations import get_seat_view

FEW_LEFT = 10  # fewer seats than this: "few left"
MAX_SLOTS = 200  # the slots a page lists (the next ones)
MAX_TICKETS = 100
MAX_QUESTIONS = 100

_PAGE = """
SELECT e.id, e.name, e.description, e.date_begin, e.date_end, e.date_tz, e.location,
    e.event_url, e.kanban_state::text AS kanban_state, e.is_published, e.date_publish,
    e.active, e.seats_limited, e.seats_max, e.is_multi_slots, e.previous_date_begin,
    coalesce(w.enabled, false) AS waitlist_enabled,
    (SELECT coalesce(jsonb_agg(t ORDER BY t.created_at, t.id), '[]') FROM (
        SELECT id, name, description, seats_max, limit_max_per_order, start_sale_datetime,
            end_sale_datetime, created_at
        FROM event.tickets WHERE event_id = e.id ORDER BY created_at, id LIMIT $2) t
    ) AS tickets,
    (SELECT coalesce(jsonb_agg(s ORDER BY s.date_begin, s.id), '[]') FROM (
        SELECT id, date_begin, date_end FROM event.slots
        WHERE event_id = e.id AND e.is_multi_slots AND date_end > $4
        ORDER BY date_begin, id LIMIT $3) s
    ) AS slots,
    (SELECT coalesce(jsonb_agg(jsonb_build_object(
            'id', q.id, 'title', q.title, 'kind', q.question_type,
            'mandatory', q.is_mandatory_answer, 'once_per_order', q.once_per_order,
            'answers', q.answers) ORDER BY q.link_sequence, q.sequence, q.id), '[]')
     FROM (SELECT v.*, rq.sequence AS link_sequence, rq.once_per_order
           FROM event.registration_questions rq JOIN event.question_view v
             ON v.id = rq.question_id
           WHERE rq.event_id = e.id ORDER BY rq.sequence, v.sequence, v.id LIMIT $5) q
    ) AS questions
FROM event.events e LEFT JOIN event.waitlist_settings w ON w.event_id = e.id
WHERE e.id = $1
"""


def availability(available: int | None, sold_out: bool) -> str:
    """The words of a scope's seats: `available`, `few left` (under 10), `sold out`."""
    if sold_out or available == 0:
        return "sold out"
    if available is not None and available < FEW_LEFT:
        return "few left"
    return "available"


def _instant(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _status(event: dict[str, Any], now: datetime) -> str:
    """`open`, or why the page offers no form: `cancelled`, `finished`."""
    return closed_to_registrations(event, now) or "open"


def _sale(ticket: dict[str, Any], now: datetime) -> str:
    """`on_sale`, `not_yet` (its sale starts later) or `ended`."""
    start, end = ticket["start_sale_datetime"], ticket["end_sale_datetime"]
    if start is not None and now < start:
        return "not_yet"
    if end is not None and now >= end:
        return "ended"
    return "on_sale"


async def event_page(pool: Pool, codec: CapabilityCodec, key: str, now: datetime) -> dict[str, Any]:
    """The page of the event `key` names (see the module)."""
    event_id, by_capability = intake_key(codec, key, now)
    async with connection(pool) as conn:
        row = await conn.fetchrow(_PAGE, event_id, MAX_TICKETS, MAX_SLOTS, now, MAX_QUESTIONS)
        if row is None or not row["active"]:
            raise errors.EventNotPublished()
        event = dict(row)
        if not by_capability and not is_visible(event, now):
            raise errors.EventNotPublished()
        listed = event["tickets"]
        # every ticket read already (fewer than the page's bound): the seat model reuses them
        known = (
            [{"id": UUID(t["id"]), "seats_max": t["seats_max"]} for t in listed]
            if len(listed) < MAX_TICKETS
            else None
        )
        seats = await get_seat_view(conn, event, known)
    zone = ZoneInfo(event["date_tz"])
    by_ticket = {v["ticket_id"]: v for v in seats["tickets"]}
    by_slot = {v["slot_id"]: v for v in seats["slots"]}
    whole = seats["event"]
    single = not event["is_multi_slots"]
    tickets = []
    for t in event.pop("tickets"):
        tid = UUID(t["id"])
        view = by_ticket.get(tid)
        sale = {
            "start_sale_datetime": _instant(t["start_sale_datetime"]),
            "end_sale_datetime": _instant(t["end_sale_datetime"]),
        }
        limits = [v["available"] for v in (view, whole if single else None) if v and v["limited"]]
        left = min(limits) if limits else None
        sold_out = bool(view and view["is_sold_out"])
        cap = t["limit_max_per_order"]
        tickets.append(
            {
                "id": tid,
                "name": t["name"],
                "description": t["description"] or "",
                **{k: in_zone(v, zone) if v else None for k, v in sale.items()},
                "sale": _sale(sale, now),
                "availability": availability(left, sold_out),
                "per_order": cap if cap > 0 else MAX_PER_ORDER,  # the register verb's own cap
            }
        )
    slots = []
    for s in event.pop("slots"):
        sid = UUID(s["id"])
        view = by_slot.get(sid)
        left = view["available"] if view else None
        slots.append(
            {
                "id": sid,
                "date_begin": in_zone(_instant(s["date_begin"]) or now, zone),
                "date_end": in_zone(_instant(s["date_end"]) or now, zone),
                "availability": availability(left, bool(view and view["is_sold_out"])),
            }
        )
    questions = [
        {
            "id": UUID(q["id"]),
            "title": q["title"],
            "kind": q["kind"],
            "mandatory": bool(q["mandatory"]),
            "once_per_order": bool(q["once_per_order"]),
            "answers": [{"id": UUID(a["id"]), "name": a["name"]} for a in q["answers"]],
        }
        for q in event.pop("questions")
    ]
    event_left = None if event["is_multi_slots"] else whole["available"]
    return {
        "event": {
            "id": event["id"],
            "name": event["name"],
            "description": event["description"] or "",
            "date_tz": event["date_tz"],
            "date_begin": in_zone(event["date_begin"], zone),
            "date_end": in_zone(event["date_end"], zone),
            "previous_date_begin": in_zone(event["previous_date_begin"], zone)
            if event["previous_date_begin"]
            else None,
            "location": event["location"] or "",
            "event_url": event["event_url"] or "",
            "is_cancelled": event["kanban_state"] == "cancel",
            "is_public": is_visible(event, now),
            "is_multi_slots": bool(event["is_multi_slots"]),
        },
        "by_capability": by_capability,
        "status": _status(event, now),
        "tickets": tickets,
        "slots": slots,
        "questions": questions,
        "availability": availability(event_left, bool(seats["is_sold_out"])),
        "sold_out": bool(seats["is_sold_out"]),
        "per_order": MAX_PER_ORDER,  # an event without tickets: the register verb's cap
        "waitlist_enabled": bool(event["waitlist_enabled"]),
    }


def form_token(codec: CapabilityCodec, event_id: UUID, expires_at: datetime) -> str:
    """The signed, expiring token of a page's forms (its own purpose: it opens nothing)."""
    return capabilities.mint_form(codec, event_id, expires_at)


def form_token_valid(codec: CapabilityCodec, token: str, event_id: UUID, now: datetime) -> bool:
    """Whether `token` is a form token of this event, unexpired (forged, expired or of
    another event: False)."""
    return capabilities.open_form(codec, token, now) == event_id
