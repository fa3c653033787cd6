"""Console pages: one registration — its facts (masked), the audited reveal, the
correction form, cancel and reactivate with a reason, and the revision history.

Every action calls the verb the admin route calls (`corrections.correct_registration`,
`corrections.change_lifecycle`, `registrations.records.get_registration`,
`revisions.list_revisions`) with the version the page was rendered from as If-Match, so
a stale form answers 412 `stale_revision` exactly like the API. A refusal re-renders the
detail with the current data and the refusal's code in the error summary. The list page
(`registrations.py`) includes this module's router and shares its labels.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import ValidationError

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.web import (
    FieldError,
    Form,
    Posted,
    StudioCtx,
    base_path,
    needs,
    page,
    refusal_errors,
    see_other,
    validation_errors,
)
from events_svc.documents import when as in_zone_words
from events_svc.models import REGISTRATION_WRITABLE, ReasonBody, RegistrationPatch
from events_svc.routes.deps import Cursor, ServiceContext, parse_if_match, pii_full
from events_svc.text import visible
from events_svc.verbs import public
from events_svc.verbs.events import get_event, tickets
from events_svc.verbs.registrations import corrections, revisions
from events_svc.verbs.registrations import records as verbs

router = APIRouter()

# the actor is resolved (and the scope checked) before the form's CSRF check
Reader = Annotated[Actor, needs("registration:read")]
Corrector = Annotated[Actor, needs("registration:correct")]
Lifecycle = Annotated[Actor, needs("registration:lifecycle")]

ATTENDEE_FIELDS = tuple(f for f in REGISTRATION_WRITABLE if f != "date_closed")
CLEARABLE = REGISTRATION_WRITABLE  # each has a "remove" tick: null, as a PATCH empties it
BOTH = "Type a value or tick its removal, not both."
STATE_WORDS = {"draft": "Draft", "open": "Open", "done": "Done", "cancel": "Cancelled"}
STATE_KIND = {"draft": "info", "open": "good", "done": "good", "cancel": "bad"}
STALE = "This registration changed since you opened it"
# refusals shown on the re-rendered detail; others (403, 404, 503) get the error page
_FORM_STATUSES = (409, 412, 422, 428)


def when(value: datetime | None) -> str:
    """An instant of the registration's history as the console shows it (in UTC, named;
    the one presenter of instants, `documents.when`), or nothing."""
    return in_zone_words(value, "UTC") if value is not None else ""


async def event_name(ctx: ServiceContext, actor: Actor, event_id: UUID) -> str | None:
    """The event's name when the operator may read events (event:read), else None."""
    if not actor.has("event:read"):
        return None
    try:
        view = await get_event(ctx.db(), actor, event_id, ctx.clock())
    except errors.NotFound:
        return None
    return str(view["name"])


async def catalog_labels(
    ctx: ServiceContext, actor: Actor, event_id: UUID
) -> tuple[dict[UUID, str], dict[UUID, str]]:
    """Ticket names and slot times of an event (by id) for an operator with event:read;
    without it the pages show short ids (the same verbs as GET /admin/tickets, /slots)."""
    if not actor.has("event:read"):
        return {}, {}
    found = await tickets.list_tickets(ctx.db(), actor, event_id=event_id, limit=200)
    slots = await tickets.list_slots(ctx.db(), actor, event_id=event_id, limit=200)
    ticket_names = {t["id"]: str(t["name"]) for t in found["items"]}
    slot_times = {
        s["id"]: f"{s['date_begin'].astimezone(UTC):%Y-%m-%d %H:%M}-"
        f"{s['date_end'].astimezone(UTC):%H:%M} UTC"
        for s in slots["items"]
    }
    return ticket_names, slot_times


def label(names: dict[UUID, str], ident: UUID | None) -> str:
    if ident is None:
        return "—"
    return names.get(ident) or f"#{str(ident)[:8]}"


def row_view(reg: dict[str, Any], tickets_: dict[UUID, str], slots: dict[UUID, str]) -> Any:
    """What a page shows of one registration (masked or not, as the verb answered)."""
    return {
        **reg,
        "state_word": STATE_WORDS.get(reg["state"], reg["state"]),
        "state_kind": STATE_KIND.get(reg["state"], "info"),
        "ticket": label(tickets_, reg["event_ticket_id"]),
        "slot": label(slots, reg["event_slot_id"]),
        "created": when(reg["created_at"]),
        "closed": when(reg["date_closed"]),
        "opened": when(reg["date_open"]),
    }


def _change_text(value: Any) -> str:
    if value is None or value == "":
        return "(empty)"
    return str(value)


def revision_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as the page lists it: values already masked by the verb."""
    return [
        {
            "version": item["version"],
            "verb": item["verb"],
            "actor": item["actor"],
            "reason": item["reason"],
            "at": when(item["at"]),
            "changes": [
                (name, _change_text(change.get("before")), _change_text(change.get("after")))
                for name, change in item["changes"].items()
            ],
        }
        for item in items
    ]


async def render_detail(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    registration_id: UUID,
    *,
    full: bool = False,
    status_code: int = 200,
    problems: list[FieldError] | None = None,
    typed: dict[str, str] | None = None,
    older: str | None = None,
) -> HTMLResponse:
    """The detail page from the current row (a full read is audited by the verb)."""
    reg = await verbs.get_registration(ctx.db(), actor, registration_id, pii_full=full)
    history = await revisions.list_revisions(
        ctx.db(), actor, registration_id, limit=20, cursor=older
    )
    names, slots = await catalog_labels(ctx, actor, reg["event_id"])
    return page(
        request,
        "registration_detail.html",
        status_code=status_code,
        problems=problems,
        title="Registration",
        reg=row_view(reg, names, slots),
        event_name=await event_name(ctx, actor, reg["event_id"]),
        full=full,
        typed=typed or {},
        revisions=revision_rows(history["items"]),
        older=history["next_cursor"],
        can_correct=actor.has("registration:correct"),
        can_lifecycle=actor.has("registration:lifecycle"),
        can_reveal=actor.has("registration:pii"),
        can_open_tickets=actor.has("capability:mint")
        and actor.has("registration:pii")
        and ctx.codec.configured,
        hide_url=f"{base_path(request)}/registrations/{registration_id}",
    )


@router.get("/registrations/{registration_id}", name="registration_detail")
async def detail(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Reader,
    older: Cursor = None,
) -> Any:
    return await render_detail(request, ctx, actor, registration_id, older=older)


@router.post("/registrations/{registration_id}/reveal")
async def reveal(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Reader,
    form: Posted,
) -> Any:
    """The full attendee data, answered directly (no bookmarkable URL); the gate is the
    API's `pii=full` rule (403 naming registration:pii) and the verb audits the read."""
    del form  # the CSRF check is the point: a link elsewhere cannot reveal
    full = pii_full(actor, "full")
    return await render_detail(request, ctx, actor, registration_id, full=full)


def _instant(text: str) -> Any:
    """The closing date typed on the form: RFC 3339, or a bare date-time read as UTC;
    anything else is handed to the model as typed, which refuses it (422)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return text
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def patch_fields(form: Form) -> dict[str, Any]:
    """The correction body: the reason, and only the fields the operator filled (an
    empty field keeps its value); a ticked `clear_<field>` sends null, as a PATCH does
    to empty a field. A typed value and a tick on the same field are refused (422)."""
    fields: dict[str, Any] = {"reason": form.text("reason")}
    both = []
    for name in CLEARABLE:
        value = form.text(name)
        if form.lists.get(f"clear_{name}"):
            if value:
                both.append({"field": name, "message": BOTH, "type": "validation_failed"})
            fields[name] = None
        elif value:
            fields[name] = _instant(value) if name == "date_closed" else value
    if both:
        raise errors.ValidationFailed(BOTH, field=both[0]["field"], errors=both)
    return fields


def _typed(form: Form, names: tuple[str, ...]) -> dict[str, str]:
    """What the operator typed and ticked, to show again when the form is refused."""
    typed = {name: visible(form.text(name)) for name in names}  # shown, never acted on
    for name in CLEARABLE:
        if form.lists.get(f"clear_{name}") and name in names:
            typed[f"clear_{name}"] = "1"
    return typed


def _refused(exc: errors.DomainError, reason_field: str) -> list[FieldError]:
    if exc.status == 412:
        return [FieldError(f"{STALE}: the page now shows its current version.", exc.code)]
    return [
        FieldError(p.message, p.code, reason_field if p.field == "reason" else p.field)
        for p in refusal_errors(exc)
    ]


@router.post("/registrations/{registration_id}/correct")
async def correct(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Corrector,
    form: Posted,
) -> Any:
    """PATCH /admin/registrations/{id} as a form: the hidden version is the If-Match."""
    if_match = await parse_if_match(form.optional("version"))
    typed = _typed(form, (*ATTENDEE_FIELDS, "date_closed", "reason"))
    try:
        cmd = RegistrationPatch.model_validate(patch_fields(form))
    except (ValidationError, errors.ValidationFailed) as exc:
        problems = (
            validation_errors(exc) if isinstance(exc, ValidationError) else refusal_errors(exc)
        )
        return await render_detail(
            request,
            ctx,
            actor,
            registration_id,
            status_code=422,
            problems=problems,
            typed=typed,
        )
    try:
        await corrections.correct_registration(
            ctx.db(), actor, registration_id, cmd, ctx.clock(), if_match=if_match
        )
    except errors.DomainError as exc:
        if exc.status not in _FORM_STATUSES:
            raise
        kept = {} if exc.status == 412 else typed  # stale: start from the current data
        return await render_detail(
            request,
            ctx,
            actor,
            registration_id,
            status_code=exc.status,
            problems=_refused(exc, "reason"),
            typed=kept,
        )
    return see_other(request, f"/registrations/{registration_id}", done="corrected")


async def _lifecycle(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    registration_id: UUID,
    form: Form,
    reactivate: bool,
) -> Any:
    """POST /admin/registrations/{id}/cancel|reactivate as a form, with If-Match."""
    if_match = await parse_if_match(form.optional("version"))
    typed = _typed(form, ("lifecycle_reason",))
    try:
        body = ReasonBody.model_validate({"reason": form.text("lifecycle_reason")})
        await corrections.change_lifecycle(
            ctx.db(),
            actor,
            registration_id,
            reactivate=reactivate,
            reason=body.reason,
            now=ctx.clock(),
            if_match=if_match,
        )
    except ValidationError as exc:
        problems = [
            FieldError(p.message, p.code, "lifecycle_reason") for p in validation_errors(exc)
        ]
        return await render_detail(
            request, ctx, actor, registration_id, status_code=422, problems=problems, typed=typed
        )
    except errors.DomainError as exc:
        if exc.status not in _FORM_STATUSES:
            raise
        return await render_detail(
            request,
            ctx,
            actor,
            registration_id,
            status_code=exc.status,
            problems=_refused(exc, "lifecycle_reason"),
            typed={} if exc.status == 412 else typed,
        )
    done = "reactivated" if reactivate else "cancelled"
    return see_other(request, f"/registrations/{registration_id}", done=done)


@router.post("/registrations/{registration_id}/cancel")
async def cancel(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Lifecycle,
    form: Posted,
) -> Any:
    return await _lifecycle(request, ctx, actor, registration_id, form, reactivate=False)


@router.post("/registrations/{registration_id}/reactivate")
async def reactivate(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Lifecycle,
    form: Posted,
) -> Any:
    return await _lifecycle(request, ctx, actor, registration_id, form, reactivate=True)


Minter = Annotated[Actor, needs("capability:mint")]


@router.post("/registrations/{registration_id}/tickets-page")
async def tickets_page(
    request: Request,
    ctx: StudioCtx,
    registration_id: UUID,
    actor: Minter,
    form: Posted,
) -> Any:
    """The attendee's tickets page: a my-tickets link minted for this registration (the
    API's mint: `capability:mint` and `registration:pii`, audited), then a 303 to it."""
    del form  # CSRF-checked; the command has no fields
    if not actor.has("registration:read"):  # the page it comes back to reads the row
        raise errors.MissingScope(
            "This needs the registration:read scope.", scope="registration:read"
        )
    if not ctx.codec.configured:  # the page offers no button then; say why on the page
        unset = errors.CapabilitySecretNotConfigured()
        problem = FieldError(unset.detail, unset.code)
        return await render_detail(
            request, ctx, actor, registration_id, problems=[problem], status_code=409
        )
    reg = await verbs.get_registration(ctx.db(), actor, registration_id, pii_full=False)
    token = await public.mint_my_tickets(
        ctx.db(), actor, ctx.codec, reg["event_id"], [registration_id]
    )
    return RedirectResponse(str(request.url_for("public_my_tickets", capability=token)), 303)
