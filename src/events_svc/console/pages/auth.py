"""Sign-in (paste an API token once: a server-side session starts) and sign-out (the
session ends in the database, so a copy of the cookie opens nothing)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from events_svc.console.frame import SessionHolder
from events_svc.console.session import Session
from events_svc.console.web import FieldError, Posted, StudioCtx, page, see_other, session_of
from events_svc.verbs.tokens import end_console_session, start_console_session

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
    """Resolve the pasted token as the API does (unknown or revoked: refused) and start a
    session row made from it, ending the one this browser had; the cookie carries only
    the new session's key, with a new CSRF secret."""
    token = form.text("token")
    target = _next(form.optional("next"))
    holder: SessionHolder = session_of(request)
    key = None
    if token and len(token) <= MAX_TOKEN:
        key = await start_console_session(
            ctx.db(), token, ctx.clock(), replacing=holder.session.key
        )
    if key is None:
        problem = FieldError("The token is unknown or revoked.", "unauthenticated", "token")
        return page(
            request,
            "sign_in.html",
            status_code=401,
            problems=[problem],
            title="Sign in",
            next=target,
        )
    holder.session = Session.fresh(key)
    return see_other(request, target, done="signed_in")


@router.post("/sign-out")
async def sign_out(request: Request, ctx: StudioCtx, form: Posted) -> Any:
    """End the session row (the CSRF check is the point: a link elsewhere cannot sign an
    operator out); the browser gets an empty session with a new CSRF secret. With the
    database away the answer is the 503 page and the session is left as it was."""
    del form
    holder = session_of(request)
    if holder.session.key is not None:
        await end_console_session(ctx.db(), holder.session.key, ctx.clock())
    holder.session = Session.fresh()
    return see_other(request, "/sign-in", done="signed_out")
