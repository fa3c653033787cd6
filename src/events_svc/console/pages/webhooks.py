"""Console pages of webhook endpoints, for `webhook:write` like every /admin/webhooks
route: the endpoints with the new-endpoint form, one endpoint with its edit form,
enable / disable, rotate the secret, send a ping, delete (after a confirmation page),
and its delivery log, newest first, with "Redeliver" on each attempt.

Every action is the admin API's verb with the same arguments (`routes/webhooks.py`):
`create_endpoint` and `patch_endpoint` with the service's egress guard, `get_endpoint`,
`list_endpoints`, `delete_endpoint`, `rotate_secret`, `ping`, `list_deliveries` and
`redeliver`, so the company fence, the PII scope, the URL guard and the audit are theirs.

A secret (create, rotate) is shown once, in the answer to the POST itself: never in an
address, a note or the cookie, so no history entry or link opens it again. Reloading that
answer asks the browser to send the form again; the form says what it saw, so a replay
makes nothing: a create form sent again finds the endpoint it made since it was opened
(same URL) and shows it without a secret; a rotate form carries the endpoint's
`updated_at`, and once the rotation changed it a second send is 412 `stale_revision`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Request

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.choices import event_choices
from events_svc.console.pages import webhook_forms as forms
from events_svc.console.web import (
    FieldError,
    Form,
    Posted,
    StudioCtx,
    needs,
    page,
    query_text,
    refusal_errors,
    see_other,
)
from events_svc.documents import when
from events_svc.routes.deps import ServiceContext
from events_svc.verbs import webhooks as verbs

router = APIRouter()

SCOPE = "webhook:write"
Hooks = Annotated[Actor, needs(SCOPE)]
PAGE_SIZE = 50
REPLAY_PAGES = 10  # endpoints a replayed create form is looked for among: 10 pages of 200
# refusals shown beside a form (a 404 there: the event the form names); the endpoint's
# own 404, a 503 and the like are the error page
FORM_REFUSALS = frozenset({403, 404, 409, 412, 422})
STALE_ROTATION = (
    "The endpoint changed since you opened this page, so its secret was not rotated "
    "again. Rotate it from the page as it is now if you still need a new secret."
)


async def _events(
    ctx: ServiceContext, actor: Actor, chosen: UUID | None = None
) -> tuple[list[tuple[str, str]] | None, dict[str, str]]:
    """The event picker's options ("All events" first), or None without `event:read`
    (the form then asks for an id), and event names by id."""
    choices = await event_choices(ctx, actor, chosen)
    if choices is None:
        return None, {}
    choices[0] = ("", "All events")
    return choices, dict(choices[1:])


async def list_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    *,
    typed: Mapping[str, Any] | None = None,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
) -> Any:
    """The endpoints (50 a page, oldest first) and the new-endpoint form."""
    cursor = query_text(request.query_params, "cursor", 512)
    listing = await verbs.list_endpoints(ctx.db(), actor, cursor=cursor, limit=PAGE_SIZE)
    choices, names = await _events(ctx, actor)
    return page(
        request,
        "webhooks.html",
        status_code=status_code,
        problems=problems,
        title="Webhooks",
        rows=[forms.endpoint_row(e, names) for e in listing["items"]],
        next_cursor=listing["next_cursor"],
        paged=cursor is not None,
        typed=typed or forms.BLANK,
        types=forms.TYPES,
        choices=choices,
        can_pii=actor.has("registration:pii"),
        opened=ctx.clock().isoformat(),
    )


async def detail_page(
    request: Request,
    ctx: ServiceContext,
    actor: Actor,
    endpoint_id: UUID,
    *,
    cursor: str | None = None,
    typed: Mapping[str, Any] | None = None,
    problems: list[FieldError] | None = None,
    status_code: int = 200,
    secret: dict[str, Any] | None = None,
) -> Any:
    """One endpoint: its facts, the edit form, its actions and a page of its log."""
    endpoint = await verbs.get_endpoint(ctx.db(), actor, endpoint_id)
    log = await verbs.list_deliveries(ctx.db(), actor, endpoint_id, cursor=cursor, limit=PAGE_SIZE)
    choices, names = await _events(ctx, actor, endpoint["event_id"])
    row = forms.endpoint_row(endpoint, names)
    return page(
        request,
        "webhook_detail.html",
        status_code=status_code,
        problems=problems,
        title=f"Webhook · {endpoint['url']}",
        hook=row,
        seen=endpoint["updated_at"].isoformat(),
        typed=typed or forms.form_values(endpoint),
        types=forms.TYPES,
        choices=choices,
        can_pii=actor.has("registration:pii"),
        attempts=[forms.attempt_row(a) for a in log["items"]],
        next_cursor=log["next_cursor"],
        cursor=cursor,
        secret=secret,
    )


@router.get("/webhooks")
async def webhook_list(request: Request, ctx: StudioCtx, actor: Hooks) -> Any:
    """GET /admin/webhooks, and the form of POST /admin/webhooks."""
    return await list_page(request, ctx, actor)


async def _made_by(ctx: ServiceContext, actor: Actor, form: Form, url: str) -> UUID | None:
    """The endpoint this very form made already (a reload of its answer): one with its
    URL created since the form was rendered."""
    since = forms.opened_at(form.text("opened"))
    if since is None:
        return None
    cursor = None
    for _ in range(REPLAY_PAGES):
        listing = await verbs.list_endpoints(ctx.db(), actor, cursor=cursor, limit=200)
        for endpoint in listing["items"]:
            if endpoint["url"] == url and endpoint["created_at"] >= since:
                return UUID(str(endpoint["id"]))
        cursor = listing["next_cursor"]
        if cursor is None:
            break
    return None


@router.post("/webhooks")
async def webhook_create(request: Request, ctx: StudioCtx, actor: Hooks, form: Posted) -> Any:
    """POST /admin/webhooks; the answer is the new endpoint's page with its secret, shown
    this once. Refusals show beside the form, the values kept."""
    typed = forms.typed_values(form)
    pii_shown = actor.has("registration:pii")
    try:
        body = forms.new_body(typed)
        made = await _made_by(ctx, actor, form, body["url"])
        if made is not None:
            return see_other(request, f"/webhooks/{made}", done="webhook_replayed")
        created = await verbs.create_endpoint(ctx.db(), ctx.egress, actor, body, ctx.clock())
    except forms.Refused as exc:
        return await list_page(
            request, ctx, actor, typed=typed, problems=exc.problems, status_code=422
        )
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS:
            raise
        problems = forms.verb_problems(exc, pii_shown=pii_shown)
        return await list_page(
            request, ctx, actor, typed=typed, problems=problems, status_code=exc.status
        )
    secret = {"value": created["secret"], "made": True, "rotation_ends_at": None}
    return await detail_page(request, ctx, actor, created["id"], secret=secret, status_code=201)


@router.get("/webhooks/{endpoint_id}")
async def webhook_detail(request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID) -> Any:
    """GET /admin/webhooks/{id} and its deliveries (`cursor` pages the log)."""
    cursor = query_text(request.query_params, "cursor", 512)
    return await detail_page(request, ctx, actor, endpoint_id, cursor=cursor)


@router.post("/webhooks/{endpoint_id}")
async def webhook_update(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """PATCH /admin/webhooks/{id} with the fields the operator changed (`active` is the
    page's Enable / Disable button); its refusals beside the form, the values kept."""
    typed = forms.typed_values(form)
    pii_shown = actor.has("registration:pii")
    current = await verbs.get_endpoint(ctx.db(), actor, endpoint_id)
    try:
        changes = forms.changes_of(typed, current, pii_shown=pii_shown)
        if changes:
            await verbs.patch_endpoint(
                ctx.db(), ctx.egress, actor, endpoint_id, changes, ctx.clock()
            )
    except forms.Refused as exc:
        return await detail_page(
            request, ctx, actor, endpoint_id, typed=typed, problems=exc.problems, status_code=422
        )
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS:
            raise
        problems = forms.verb_problems(exc, pii_shown=pii_shown)
        return await detail_page(
            request, ctx, actor, endpoint_id, typed=typed, problems=problems, status_code=exc.status
        )
    return see_other(request, f"/webhooks/{endpoint_id}", done="webhook_saved")


Verb = Callable[[], Awaitable[Any]]


async def _act(
    request: Request, ctx: ServiceContext, actor: Actor, endpoint_id: UUID, verb: Verb, done: str
) -> Any:
    """Run one of the endpoint page's buttons; a refusal shows on that page."""
    try:
        await verb()
    except errors.DomainError as exc:
        if exc.status not in FORM_REFUSALS or exc.status == 404:
            raise
        problems = [FieldError(forms.CODE_WORDS.get(exc.code, exc.detail), exc.code)]
        return await detail_page(
            request, ctx, actor, endpoint_id, problems=problems, status_code=exc.status
        )
    return see_other(request, f"/webhooks/{endpoint_id}", done=done)


@router.post("/webhooks/{endpoint_id}/enable")
async def webhook_enable(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """PATCH `active: true`: deliveries resume and why it was disabled is cleared."""
    del form  # CSRF-checked; the command has no fields

    async def enable() -> Any:
        changes = {"active": True}
        return await verbs.patch_endpoint(
            ctx.db(), ctx.egress, actor, endpoint_id, changes, ctx.clock()
        )

    return await _act(request, ctx, actor, endpoint_id, enable, "webhook_enabled")


@router.post("/webhooks/{endpoint_id}/disable")
async def webhook_disable(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """PATCH `active: false`: nothing is sent until it is enabled again."""
    del form

    async def disable() -> Any:
        changes = {"active": False}
        return await verbs.patch_endpoint(
            ctx.db(), ctx.egress, actor, endpoint_id, changes, ctx.clock()
        )

    return await _act(request, ctx, actor, endpoint_id, disable, "webhook_disabled")


@router.post("/webhooks/{endpoint_id}/ping")
async def webhook_ping(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """POST /admin/webhooks/{id}/ping: a `ping` message queued to this endpoint."""
    del form
    return await _act(
        request,
        ctx,
        actor,
        endpoint_id,
        lambda: verbs.ping(ctx.db(), actor, endpoint_id, ctx.clock()),
        "webhook_pinged",
    )


@router.post("/webhooks/{endpoint_id}/rotate-secret")
async def webhook_rotate(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """POST /admin/webhooks/{id}/rotate-secret; the answer shows the new secret once. The
    form carries the `updated_at` it was rendered with: sent again once the rotation
    changed it, it is 412 `stale_revision` and rotates nothing."""
    current = await verbs.get_endpoint(ctx.db(), actor, endpoint_id)
    if form.text("seen") != current["updated_at"].isoformat():
        stale = errors.StaleRevision(STALE_ROTATION)
        return await detail_page(
            request,
            ctx,
            actor,
            endpoint_id,
            problems=refusal_errors(stale),
            status_code=stale.status,
        )
    rotated = await verbs.rotate_secret(ctx.db(), actor, endpoint_id, ctx.clock())
    secret = {
        "value": rotated["secret"],
        "made": False,
        "rotation_ends_at": when(rotated["rotation_ends_at"]),
    }
    return await detail_page(request, ctx, actor, endpoint_id, secret=secret)


@router.get("/webhooks/{endpoint_id}/delete")
async def webhook_delete_confirm(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID
) -> Any:
    """The confirmation of a delete: what goes with the endpoint, and the button."""
    endpoint = await verbs.get_endpoint(ctx.db(), actor, endpoint_id)
    return page(
        request,
        "webhook_delete.html",
        title=f"Delete the webhook · {endpoint['url']}",
        hook=forms.endpoint_row(endpoint, {}),
    )


@router.post("/webhooks/{endpoint_id}/delete")
async def webhook_delete(
    request: Request, ctx: StudioCtx, actor: Hooks, endpoint_id: UUID, form: Posted
) -> Any:
    """DELETE /admin/webhooks/{id}: the endpoint, its messages and its log."""
    del form
    await verbs.delete_endpoint(ctx.db(), actor, endpoint_id)
    return see_other(request, "/webhooks", done="webhook_deleted")


@router.post("/webhook-deliveries/{delivery_id}/redeliver")
async def webhook_redeliver(
    request: Request, ctx: StudioCtx, actor: Hooks, delivery_id: UUID, form: Posted
) -> Any:
    """POST /admin/webhook-deliveries/{id}/redeliver: the message is sent again now, with
    the same `webhook-id`; back to the same page of the log. A refusal (409
    `webhook_endpoint_disabled`) shows on the endpoint page the form was sent from."""
    cursor = query_text(form.values, "cursor", 512)
    try:
        queued = await verbs.redeliver(ctx.db(), actor, delivery_id, ctx.clock())
    except errors.DomainError as exc:
        back = _uuid(form.text("endpoint_id"))
        if exc.status not in FORM_REFUSALS or exc.status == 404 or back is None:
            raise
        problems = [FieldError(forms.CODE_WORDS.get(exc.code, exc.detail), exc.code)]
        return await detail_page(
            request, ctx, actor, back, cursor=cursor, problems=problems, status_code=exc.status
        )
    return see_other(
        request, f"/webhooks/{queued['endpoint_id']}", done="webhook_redelivered", cursor=cursor
    )


def _uuid(raw: str) -> UUID | None:
    try:
        return UUID(raw)
    except ValueError:
        return None
