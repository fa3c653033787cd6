"""The public event page and its forms: a person registers (or joins the waiting list) in a
browser, without JavaScript.

`GET /public/events/{event_id_or_capability}` answers the page (`pages.render_event`) of a
published event by id, or of any event a private intake capability names (that page is
`noindex`, and links only to what the capability opens). Its forms post, form-encoded, to
`.../register` and `.../waitlist`, mounted with the intake (`EVENT_INTAKE_PUBLIC`): the
same register verb and allowlist as `POST /intake` (`register_through_intake`), the same
join (`join_through_intake`), the same windows (the client's, or a private link's, then the
emails' and the event's ceiling). A success is a 303 to the attendee's tickets page (or the
waiting-list entry's page, which shows the position); a refusal answers the page again
with what was typed and the message beside its field (422) or at the top (409 seats or
sale window, 429 too many attempts), never a JSON error body. Sold out with the waiting
list on, the page offers the waiting-list form first.

Every form carries `form_token`, signed for this event with its own purpose and expiring
(`EVENT_FORM_TTL_S`): a forged or expired one, or one of another event, answers the page
again (422 `form_expired`) and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from events_svc import capabilities, errors
from events_svc.models import PUBLIC_ERRORS, WaitlistJoin, json_error_responses
from events_svc.pages import FORM_POLICY, ICS_HOLE, EventForm, render_event
from events_svc.pages.event import Alert
from events_svc.pages.frame import render_off_loop
from events_svc.routes.deps import Ctx, ServiceContext, route_url
from events_svc.routes.event_page.forms import (
    FIELD_WORDS,
    WORDS,
    Posted,
    attendees_of,
    count_valid,
    number_of,
    read_form,
    refusal,
    typed,
    uuid_of,
)
from events_svc.routes.public import (
    count_intake_request,
    event_key,
    register_through_intake,
    secret_set,
)
from events_svc.routes.waitlist import join_through_intake
from events_svc.verbs import event_page as verbs

PATH = "/public/events/{event_id_or_capability}"
router = APIRouter(tags=["public"])
form_router = APIRouter(tags=["public"])

_HTML = {"text/html": {"schema": {"type": "string"}}}
# the uniform 404, 413, 429 (the page's own GET) and 503 are the JSON error of every route
_PAGE_RESPONSES: dict[int | str, dict[str, Any]] = json_error_responses(*PUBLIC_ERRORS)
# a form's refusal is the page again (HTML); the uniform 404, 413 and 503 stay the JSON error
_FORM_RESPONSES: dict[int | str, dict[str, Any]] = _PAGE_RESPONSES | {
    200: {"description": "The form redrawn (another number of attendees)", "content": _HTML},
    303: {"description": "Registered (or joined): to the tickets (or waiting-list) page"},
    409: {"description": "Refused at the top: the page again", "content": _HTML},
    422: {"description": "Refused beside a field: the page again", "content": _HTML},
    429: {"description": "Too many attempts: the page again", "content": _HTML},
}


def link(request: Request, name: str, value: str) -> str:
    """The address of the route `name` with its one parameter `value`."""
    param = "capability" if name in _BY_CAPABILITY else "event_id_or_capability"
    return route_url(request, name, **{param: value})


_BY_CAPABILITY = frozenset({"public_ics", "public_my_tickets", "public_waitlist"})


async def _answer(
    ctx: ServiceContext,
    request: Request,
    key: str,
    page: dict[str, Any],
    form: EventForm,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """The page, with a fresh form token (and calendar link, while the event is public:
    its calendar opens then)."""
    now = ctx.clock()
    event_id = page["event"]["id"]
    tokens = {
        "form": verbs.form_token(
            ctx.codec, event_id, now + timedelta(seconds=ctx.settings.form_ttl_s)
        )
    }
    intake = ctx.intake
    urls = {
        "page": link(request, "public_event_page", key),
        "register": link(request, "public_event_register", key) if intake else None,
        "waitlist": link(request, "public_event_waitlist", key) if intake else None,
        "ics": None,
    }
    if page["event"]["is_public"]:
        expires = now + timedelta(seconds=ctx.settings.ics_ttl_s)
        tokens["ics"] = capabilities.mint_ics(ctx.codec, event_id, None, expires)
        urls["ics"] = link(request, "public_ics", ICS_HOLE)
    html = await render_event(page, form, urls=urls, tokens=tokens, intake=intake)
    answer = HTMLResponse(html, status_code=status_code, headers=headers)
    answer.headers["Content-Security-Policy"] = FORM_POLICY
    if not page["by_capability"] and request.method == "GET":
        request.state.indexable = True  # a published event's page: search engines welcome
    return answer


async def _guard_page(ctx: ServiceContext, request: Request, key: str) -> None:
    """The page's window: its client's, and through a private link, the link's for this
    client (an invitation is shared: one client cannot use it up for the others)."""
    if ctx.throttle is not None:
        if event_key(key) is not None:
            await ctx.throttle.check_client(request, "page")
        else:
            await ctx.throttle.check_public_link(request, "page", key)
    secret_set(ctx)


async def _too_many(request: Request, key: str, refused: errors.RateLimited) -> Response:
    """A form over its window: a short page (nothing read, nothing parsed) back to the
    event's page, with `Retry-After`."""
    html = await render_off_loop(
        "busy.html",
        message=WORDS["rate_limited"],
        page_url=link(request, "public_event_page", key),
    )
    answer = HTMLResponse(html, status_code=429, headers=refused.response_headers())
    answer.headers["Content-Security-Policy"] = FORM_POLICY
    return answer


@router.get(PATH, name="public_event_page", response_class=HTMLResponse, responses=_PAGE_RESPONSES)
async def event_page(ctx: Ctx, request: Request, event_id_or_capability: str) -> Response:
    """The event's page, with its registration (or waiting-list) form."""
    await _guard_page(ctx, request, event_id_or_capability)
    page = await verbs.event_page(ctx.db(), ctx.codec, event_id_or_capability, ctx.clock())
    return await _answer(ctx, request, event_id_or_capability, page, EventForm())


@dataclass
class Submission:
    """A posted form as the page sees it: the page, the fields, the form as typed, and
    whether it was refused before anything was decided (422: unreadable, or a bad form
    token)."""

    page: dict[str, Any]
    posted: Posted
    form: EventForm
    refused: bool = False


async def _submission(ctx: ServiceContext, request: Request, key: str) -> Submission | Response:
    """Count the client's (or link's) window (over it: the short page, nothing read), read
    the form and the page, check the form token before any other field is interpreted
    (refused: the entries are only shown again, never acted on)."""
    try:
        await count_intake_request(ctx, request, key)
    except errors.RateLimited as refused:
        return await _too_many(request, key, refused)
    posted = await read_form(request)
    page = await verbs.event_page(ctx.db(), ctx.codec, key, ctx.clock())
    refusal: Alert | None = None
    if posted.unreadable:
        refusal = Alert("form_unreadable", WORDS["form_unreadable"])
    elif not verbs.form_token_valid(
        ctx.codec, posted.text("form_token"), page["event"]["id"], ctx.clock()
    ):
        refusal = Alert("form_expired", WORDS["form_expired"])
    sent = Submission(page, posted, typed(posted, page), refused=refusal is not None)
    if refusal is not None:
        sent.form.alerts.append(refusal)
    return sent


@form_router.post(
    f"{PATH}/register",
    name="public_event_register",
    response_class=HTMLResponse,
    status_code=303,
    responses=_FORM_RESPONSES,
)
async def register(ctx: Ctx, request: Request, event_id_or_capability: str) -> Response:
    """Register from the page's form (`action=update` only redraws it for another number
    of attendees)."""
    key = event_id_or_capability
    sent = await _submission(ctx, request, key)
    if isinstance(sent, Response):
        return sent
    page, posted, form = sent.page, sent.posted, sent.form
    if sent.refused:
        return await _answer(ctx, request, key, page, form, 422)
    if not count_valid(posted.raw("attendees")):
        form.errors["attendees"] = FIELD_WORDS["attendees"]
    if posted.text("action") == "update":
        return await _answer(ctx, request, key, page, form, 422 if form.errors else 200)
    ticket_id, slot_id = uuid_of(form.ticket), uuid_of(form.slot)
    if page["tickets"] and ticket_id is None:
        form.errors["event_ticket_id"] = "Choose a ticket."
    if form.slot and slot_id is None:
        form.errors["event_slot_id"] = WORDS["slot_not_in_event"]
    attendees = attendees_of(posted, page, form)
    if form.errors:
        return await _answer(ctx, request, key, page, form, 422)
    try:
        _, token = await register_through_intake(ctx, key, attendees, ticket_id, slot_id)
    except errors.DomainError as exc:
        status_code = refusal(exc, page, form, "")
        headers = exc.response_headers() if exc.status == 429 else None
        if exc.code == "event_seats_exhausted":
            # what is left now, and the waiting list first when the event has one
            page = await verbs.event_page(ctx.db(), ctx.codec, key, ctx.clock())
            form.offer_waitlist = page["waitlist_enabled"]
            first = form.attendee(1)
            form.waitlist = {k: first[k] for k in ("name", "email", "phone")} | {
                "seats": str(form.count),
                "event_ticket_id": form.ticket,
                "event_slot_id": form.slot,
            }
        return await _answer(ctx, request, key, page, form, status_code, headers)
    return RedirectResponse(link(request, "public_my_tickets", token), 303)


@form_router.post(
    f"{PATH}/waitlist",
    name="public_event_waitlist",
    response_class=HTMLResponse,
    status_code=303,
    responses=_FORM_RESPONSES,
)
async def join_waitlist(ctx: Ctx, request: Request, event_id_or_capability: str) -> Response:
    """Join the waiting list from the page's form; a success goes to the entry's page (its
    position in the queue)."""
    key = event_id_or_capability
    sent = await _submission(ctx, request, key)
    if isinstance(sent, Response):
        return sent
    page, posted, form = sent.page, sent.posted, sent.form
    fields = ("name", "email", "phone", "seats", "event_ticket_id", "event_slot_id")
    typed = {name: posted.text(name)[:400] for name in fields}  # what is acted on
    typed["seats"] = posted.raw("seats")[:400]  # a whole number: no space is trimmed
    form.waitlist = {name: posted.shown(name).strip()[:400] for name in fields}  # shown
    form.offer_waitlist = True
    if sent.refused:
        return await _answer(ctx, request, key, page, form, 422)
    if not page["waitlist_enabled"]:  # as the page read it: no field of the form matters
        form.alerts.append(Alert("waitlist_disabled", WORDS["waitlist_disabled"]))
        form.offer_waitlist = False
        return await _answer(ctx, request, key, page, form, 409)
    body: dict[str, Any] = {"name": typed["name"], "email": typed["email"], "phone": typed["phone"]}
    for name in ("event_ticket_id", "event_slot_id"):
        if typed[name]:
            body[name] = uuid_of(typed[name])
            if body[name] is None:
                form.errors[f"waitlist-{name}"] = WORDS[
                    "slot_not_in_event" if name == "event_slot_id" else "ticket_not_in_event"
                ]
    seats = number_of(typed["seats"] or "1")
    if seats is None:
        form.errors["waitlist-seats"] = FIELD_WORDS["seats"]
    body["seats"] = seats
    try:
        join = WaitlistJoin.model_validate(body)
    except ValidationError as exc:
        for err in exc.errors():
            loc = err.get("loc", ())
            if loc and loc[0] in FIELD_WORDS:
                control = err.get("type") == "invalid_characters"
                words = WORDS["invalid_characters"] if control else FIELD_WORDS[str(loc[0])]
                form.errors.setdefault(f"waitlist-{loc[0]}", words)
        if not form.errors:
            form.alerts.append(Alert("validation_failed", "Please check the form."))
    if form.errors or form.alerts:
        return await _answer(ctx, request, key, page, form, 422)
    try:
        _, token = await join_through_intake(ctx, key, join)
    except errors.DomainError as exc:
        status_code = refusal(exc, page, form, "waitlist-")
        headers = exc.response_headers() if exc.status == 429 else None
        form.offer_waitlist = exc.code != "waitlist_not_needed"
        return await _answer(ctx, request, key, page, form, status_code, headers)
    return RedirectResponse(link(request, "public_waitlist", token), 303)
