"""The operator console: server-rendered pages at `/studio` over the same verbs as the
admin API, usable without JavaScript (every form is POST → 303 → GET).

`console_app(ctx)` builds the sub-app `create_app` mounts; it shares the service context
(pool, settings, clock, ports, the host's actor dependency) with the API.
"""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute

from events_svc import errors
from events_svc.console.frame import StudioFrame, StudioKeys
from events_svc.console.pages import (
    attendance,
    auth,
    desk,
    events,
    exports,
    mail,
    operations,
    registrations,
    templates,
    waitlist,
    webhooks,
)
from events_svc.console.web import STATIC, SignInRequired, base_path, page, plain_query
from events_svc.routes.deps import ServiceContext

PREFIX = "/studio"

# the page titles of the error states; any other refusal shows its own code and detail
_TITLES = {
    401: "Sign in again",
    403: "Not allowed",
    404: "Not found",
    409: "Refused",
    412: "Changed since you opened it",
    422: "Not accepted",
    429: "Too many requests",
    503: "Unavailable",
}


def error_page(request: Request, exc: errors.DomainError) -> Response:
    """A refusal as a page: its status, its stable code, its detail; the 403 names the
    scope the operator lacks; a 412 says the object changed since the page was opened."""
    response = _status_page(request, exc.status, exc.code, exc.detail, exc.fields.get("scope"))
    for name, value in exc.response_headers().items():
        if name.lower() == "retry-after":
            response.headers[name] = value
    return response


def _status_page(
    request: Request, status: int, code: str, detail: str, scope: str | None = None
) -> Response:
    return page(
        request,
        "error.html",
        status_code=status,
        title=_TITLES.get(status, "Refused"),
        code=code,
        detail=detail,
        scope=scope,
        status=status,
    )


def _install_handlers(app: FastAPI) -> None:
    async def sign_in(request: Request, _: Exception) -> Response:
        target = request.url.path if request.method == "GET" else "/events"
        relative = target.removeprefix(base_path(request)) or "/events"
        return RedirectResponse(f"{base_path(request)}/sign-in?next={relative}", status_code=303)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, errors.DomainError)
        return error_page(request, exc)

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        in_path = any(tuple(e.get("loc", ()))[:1] == ("path",) for e in exc.errors())
        if in_path:  # /registrations/not-a-uuid names nothing that exists
            return error_page(request, errors.NotFound("No such page or object."))
        return error_page(request, errors.ValidationFailed("The address holds a bad value."))

    async def http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 405:
            return error_page(request, errors.MethodNotAllowed())
        if exc.status_code == 404:
            return error_page(request, errors.NotFound("No such page or object."))
        # a host's actor dependency may answer with its own HTTPException: a redirect (to
        # its sign-in) goes out as it is; a refusal is a page of its status, under the
        # code the API gives it, with its headers (WWW-Authenticate, Retry-After)
        if exc.status_code < 400:
            return Response(status_code=exc.status_code, headers=exc.headers)
        response = _status_page(request, exc.status_code, "http_error", str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    app.add_exception_handler(SignInRequired, sign_in)
    app.add_exception_handler(errors.DomainError, refused)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http)


def console_app(ctx: ServiceContext) -> FastAPI:
    """The console as an ASGI sub-app over `ctx` (mounted at `/studio` by `create_app`)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    app.state.events = ctx
    _install_handlers(app)
    secure = ctx.settings.console_cookie_secure
    app.add_middleware(StudioFrame, keys=StudioKeys(ctx), secure=secure)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.router.routes.extend(console_routes())
    return app


@functools.cache
def console_routes() -> tuple[BaseRoute, ...]:
    """The console's pages, built once per process and shared by every console app (as
    `app.api_routes`: FastAPI builds a route's validation state the first time a request
    walks past it and keeps it on the included router; a page takes its context from the
    request's app)."""
    holder = APIRouter(dependencies=[Depends(plain_query)])
    for module in (
        auth,
        events,
        registrations,
        desk,
        attendance,
        exports,
        operations,
        mail,
        templates,
        waitlist,
        webhooks,
    ):
        holder.include_router(module.router)

    @holder.get("/", include_in_schema=False)
    async def home(request: Request) -> Any:
        return RedirectResponse(f"{base_path(request)}/events", status_code=303)

    return tuple(holder.routes)
