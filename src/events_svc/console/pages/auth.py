"""Sign-in (paste an API token once) and sign-out."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from events_svc.console.frame import SessionHolder
from events_svc.console.session import Session
from events_svc.console.web import FieldError, Posted, StudioCtx, page, see_other, session_of
from events_svc.verbs.tokens import resolve_token

router = APIRouter()

MAX_TOKEN = 200


def _next(value: str | None) -> str:
    """Where to go after sign-in: a console path only (never another site)."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value:
        return value[:500]
    return "/events"


@router.get("/sign-in", name="sign_in")
async def sign_in_page(request: Request, next: str | None = None) -> Any:
    return page(request, "sign_in.html", title="Sign in", next=_next(next))


@router.post("/sign-in")
async def sign_in(request: Request, ctx: StudioCtx, form: Posted) -> Any:
    """Resolve the pasted token exactly as the API does; keep only its id in the session."""
    token = form.text("token")
    target = _next(form.optional("next"))
    actor = None
    if token and len(token) <= MAX_TOKEN:
        actor = await resolve_token(ctx.db(), token, ctx.clock())
    if actor is None:
        problem = FieldError("The token is unknown or revoked.", "unauthenticated", "token")
        return page(
            request,
            "sign_in.html",
            status_code=401,
            problems=[problem],
            title="Sign in",
            next=target,
        )
    holder: SessionHolder = session_of(request)
    holder.session = Session.fresh(actor.id.removeprefix("token:"))
    return see_other(request, target, done="signed_in")


@router.post("/sign-out")
async def sign_out(request: Request, form: Posted) -> Any:
    del form  # the CSRF check is the point: a link elsewhere cannot sign an operator out
    session_of(request).session = Session.fresh()
    return see_other(request, "/sign-in", done="signed_out")
