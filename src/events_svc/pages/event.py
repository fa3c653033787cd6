"""The public event page: the event's facts, its tickets and slots with their availability,
an "add to calendar" link, its schema.org `Event` (JSON-LD), and the registration form, or
the waiting-list form when what the attendee wants is sold out, or the reason there is no
form (cancelled, finished, sold out, not on sale, no online registration).

`EventForm` is what the attendee typed (kept across a refusal) and where each message goes:
`errors` by field name, `alerts` at the top. The form's field names are the contract of
`routes/event_page/forms.py`, which reads them back: `event_ticket_id`, `event_slot_id`,
`attendees` (how many), per attendee n (from 1) `attendee-n-name`, `-email`, `-phone`,
`-company_name` and `attendee-n-q-<question id>`, once per order `q-<question id>`; the
waiting list's `name`, `email`, `phone`, `seats`; and on every form `form_token`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from events_svc.documents import moment, span
from events_svc.models import MAX_PER_ORDER
from events_svc.pages.frame import render_off_loop

IDENTITY = ("name", "email", "phone", "company_name")
FORM_HOLE = "~form-token~"  # where each answer's fresh tokens go (never in a token)
ICS_HOLE = "~ics-token~"
_BLANK: dict[str, str] = {}  # the rendered pages of a blank form, least recently used first
_BLANK_MAX = 256
SCHEMA = "https://schema.org/"
_AVAILABILITY = {
    "available": "InStock",
    "few left": "LimitedAvailability",
    "sold out": "SoldOut",
}
_STATUS = {"cancelled": "EventCancelled", "rescheduled": "EventRescheduled"}
_NO_FORM = {
    "cancelled": "This event is cancelled: registration is closed.",
    "finished": "This event has ended: registration is closed.",
    "offline": "Registration for this event is not open online.",
    "sold_out": "This event is sold out.",
    "tickets_sold_out": "Every ticket on sale is sold out.",
    "not_on_sale": "No ticket is on sale at the moment.",
}


@dataclass
class Alert:
    """A message at the top of the form (with the refusal's stable code)."""

    code: str
    message: str


@dataclass
class EventForm:
    """The values of the page's forms as typed, and the messages of a refusal."""

    ticket: str = ""
    slot: str = ""
    count: int = 1
    attendees: list[dict[str, Any]] = field(default_factory=list)
    general: dict[str, str] = field(default_factory=dict)
    waitlist: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    alerts: list[Alert] = field(default_factory=list)
    offer_waitlist: bool = False  # the chosen scope is sold out: the waiting-list form first

    def attendee(self, n: int) -> dict[str, Any]:
        """Attendee n's values (from 1; empty when not typed)."""
        if n <= len(self.attendees):
            return self.attendees[n - 1]
        return {**dict.fromkeys(IDENTITY, ""), "answers": {}}


def _iso(value: datetime) -> str:
    return value.isoformat(timespec="seconds")


def json_ld(page: dict[str, Any], url: str) -> str:
    """The event as schema.org `Event` JSON-LD, safe inside a `<script>` element."""
    event = page["event"]
    status = "EventScheduled"
    if event["is_cancelled"]:
        status = _STATUS["cancelled"]
    elif event["previous_date_begin"] is not None:
        status = _STATUS["rescheduled"]
    item: dict[str, Any] = {
        "@context": "https://schema.org",
        "@type": "Event",
        "name": event["name"],
        "startDate": _iso(event["date_begin"]),
        "endDate": _iso(event["date_end"]),
        "eventStatus": SCHEMA + status,
        "url": url,
    }
    if event["description"]:
        item["description"] = event["description"]
    if status == "EventRescheduled":
        item["previousStartDate"] = _iso(event["previous_date_begin"])
    if event["location"]:
        item["eventAttendanceMode"] = SCHEMA + "OfflineEventAttendanceMode"
        item["location"] = {"@type": "Place", "name": event["location"]}
    scopes = page["tickets"] or [{"name": event["name"], "availability": page["availability"]}]
    offers = []
    for scope in scopes:
        offer: dict[str, Any] = {
            "@type": "Offer",
            "name": scope["name"],
            "url": url,
            "availability": SCHEMA + _AVAILABILITY[scope["availability"]],
        }
        if scope.get("start_sale_datetime"):
            offer["validFrom"] = _iso(scope["start_sale_datetime"])
        if scope.get("end_sale_datetime"):
            offer["validThrough"] = _iso(scope["end_sale_datetime"])
        offers.append(offer)
    item["offers"] = offers
    text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
    # never a way out of the script element, whatever a name holds
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sale_words(ticket: dict[str, Any], zone: str) -> str:
    start, end = ticket["start_sale_datetime"], ticket["end_sale_datetime"]
    if ticket["sale"] == "not_yet":
        return f"On sale from {moment(start, zone)}"
    if ticket["sale"] == "ended":
        return "Sales have ended"
    if end is not None:
        return f"On sale until {moment(end, zone)}"
    return "On sale now"


def form_cap(page: dict[str, Any], ticket: str) -> int:
    """How many attendees the form offers: the chosen ticket's per-order cap, else the
    largest among the tickets on sale, else the default cap."""
    chosen = [t for t in page["tickets"] if str(t["id"]) == ticket]
    selling = [t for t in page["tickets"] if t["sale"] == "on_sale"] or page["tickets"]
    caps = [int(t["per_order"]) for t in chosen or selling]
    return max(caps) if caps else int(page["per_order"])


def no_form(page: dict[str, Any], intake: bool) -> str | None:
    """Why the page offers no form at all (None: it offers one)."""
    if page["status"] != "open":
        return _NO_FORM[page["status"]]
    if not intake:
        return _NO_FORM["offline"]
    if page["sold_out"] and not page["waitlist_enabled"]:
        return _NO_FORM["sold_out"]
    selling = [t for t in page["tickets"] if t["sale"] == "on_sale"]
    if page["tickets"] and not selling:
        return _NO_FORM["not_on_sale"]
    full = all(t["availability"] == "sold out" for t in selling)
    if page["tickets"] and full and not page["waitlist_enabled"]:
        return _NO_FORM["tickets_sold_out"]
    return None


def _context(
    page: dict[str, Any], form: EventForm, urls: dict[str, str | None], intake: bool
) -> dict[str, Any]:
    """What the template reads."""
    event = page["event"]
    zone = event["date_tz"]
    tickets = [
        {
            **t,
            "sale_words": _sale_words(t, zone),
            "selectable": t["sale"] == "on_sale" and t["availability"] != "sold out",
        }
        for t in page["tickets"]
    ]
    selectable = [t for t in tickets if t["selectable"]]
    ticket = form.ticket or (str(selectable[0]["id"]) if len(selectable) == 1 else "")
    slots = [{**s, "words": span(s["date_begin"], s["date_end"], zone)} for s in page["slots"]]
    reason = no_form(page, intake)
    registering = (
        reason is None
        and (bool(selectable) or not tickets)
        and not (not tickets and page["sold_out"])
    )
    waitlist = (
        reason is None
        and page["waitlist_enabled"]
        and (
            form.offer_waitlist
            or page["sold_out"]
            or any(t["availability"] == "sold out" for t in tickets)
            or any(s["availability"] == "sold out" for s in slots)
        )
    )
    cap = form_cap(page, ticket)
    count = max(1, min(form.count, MAX_PER_ORDER))
    return dict(
        event=event,
        when=span(event["date_begin"], event["date_end"], zone),
        moved_from=moment(event["previous_date_begin"], zone)
        if event["previous_date_begin"]
        else "",
        page=page,
        tickets=tickets,
        slots=slots,
        ticket=ticket,
        questions=page["questions"],
        general=[q for q in page["questions"] if q["once_per_order"] and q["kind"] not in IDENTITY],
        personal=[
            q for q in page["questions"] if not q["once_per_order"] and q["kind"] not in IDENTITY
        ],
        mandatory_identity={q["kind"] for q in page["questions"] if q["mandatory"]} & set(IDENTITY),
        reason=reason,
        registering=registering,
        waitlist=waitlist,
        waitlist_first=waitlist and (form.offer_waitlist or not registering),
        form=form,
        count=count,
        counts=list(range(1, max(cap, count) + 1)),
        cap=cap,
        urls=urls,
        token=FORM_HOLE,
        indexable=not page["by_capability"],
        json_ld=json_ld(page, urls["page"] or ""),
    )


async def render_event(
    page: dict[str, Any],
    form: EventForm,
    *,
    urls: dict[str, str | None],
    tokens: dict[str, str],
    intake: bool,
) -> str:
    """The page (`urls`: `page`, `register`, `waitlist`, `ics`; the calendar link holds
    `ICS_HOLE` where its token goes). The tokens (`form`, `ics`: fresh for every answer) go
    in last, so the page of a blank form is rendered once per state of the page (what the
    verb read, the addresses, the intake) and kept (`_BLANK`, the last 256)."""
    blank = form == EventForm()
    key = repr((page, urls, intake)) if blank else ""
    html = _BLANK.get(key) if blank else None
    if html is None:
        html = await render_off_loop("event.html", **_context(page, form, urls, intake))
        if blank:
            _BLANK[key] = html
            while len(_BLANK) > _BLANK_MAX:
                _BLANK.pop(next(iter(_BLANK)))
    else:
        _BLANK[key] = _BLANK.pop(key)  # the most recently used last
    # the tokens are URL-safe (letters, digits, `-`, `_`, `.`): nothing to escape
    return html.replace(FORM_HOLE, tokens["form"]).replace(ICS_HOLE, tokens.get("ics", ""))
