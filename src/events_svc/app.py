"""The ASGI app: `create_app(settings, ports=..., actor_dependency=...)`.

The lifespan opens (and closes) the asyncpg pool; one set of handlers renders
every refusal as `{"error": {"code", "detail", ...}}`. A host can mount the
returned app, or mount `admin_router()` / `public_router()` itself (see
README.md, "Mounting in a host").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events_svc import db, errors, migrate
from events_svc.adapters.standalone import standalone_ports
from events_svc.capabilities import CapabilityCodec
from events_svc.observability import JsonFormatter, PoolCollector, RequestObserver
from events_svc.ports import Ports
from events_svc.routes import catalog, events, mails, public, registrations, service
from events_svc.routes.deps import (
    ActorResolver,
    ServiceContext,
    utc_now,
)
from events_svc.scheduler import SchedulerLoop
from events_svc.settings import Settings
from events_svc.throttle import Throttle

log = logging.getLogger("events_svc")

BASE_PATH = "/api/v1/event"


class ErrorDetail(BaseModel):
    code: str
    detail: str


class ErrorBody(BaseModel):
    """Every refusal: a stable code, a safe detail, sometimes more fields."""

    error: ErrorDetail


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in {
        401: "unauthenticated",
        403: "missing_scope",
        404: "not_found",
        409: "a conflict with the current state (typed code)",
        412: "stale_revision",
        422: "unknown_field, validation_failed, or a typed field refusal",
        503: "busy or database_unavailable (Retry-After)",
    }.items()
}


def admin_router() -> APIRouter:
    """Every admin route (bearer/host actor, scopes), without the base path."""
    router = APIRouter(responses=_ERROR_RESPONSES)
    router.include_router(registrations.router)  # the hottest routes match first
    router.include_router(events.router)
    router.include_router(catalog.router)
    router.include_router(mails.router)
    router.include_router(public.mint_router)
    return router


def public_router(*, intake: bool = False) -> APIRouter:
    """The capability-carried public tree (no actor), without the base path; with
    `intake` the public registration route too."""
    router = APIRouter(responses=_ERROR_RESPONSES)
    router.include_router(public.router)
    if intake:
        router.include_router(public.intake_router)
    return router


class _ProtectHeaders:
    """Responses are private: never cached, never indexed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"cache-control", b"no-store"))
                headers.append((b"x-robots-tag", b"noindex"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error_response(exc: errors.DomainError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.response_headers())


def _validation_error(exc: RequestValidationError) -> errors.DomainError:
    problems = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ())]
        field = ".".join(loc[1:]) if len(loc) > 1 else ".".join(loc)
        if err.get("type") == "extra_forbidden":
            return errors.UnknownField(f"Unknown field: {field}.", field=field)
        # never echo the input: it may hold an email or a phone number
        problems.append({"field": field, "message": err.get("msg", ""), "type": err.get("type")})
    return errors.ValidationFailed(errors=problems)


def install_error_handlers(app: FastAPI) -> None:
    """One renderer for every refusal, validation error and unknown route."""

    async def domain(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, errors.DomainError)
        return _error_response(exc)

    async def validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _error_response(_validation_error(exc))

    async def http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        body = {"error": {"code": code, "detail": str(exc.detail)}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    async def crash(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        body = {"error": {"code": "internal_error", "detail": "An internal error occurred."}}
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(errors.DomainError, domain)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, crash)


@asynccontextmanager
async def service_lifespan(ctx: ServiceContext) -> AsyncIterator[None]:
    """Open the pool (unless the host handed one in) and close it on the way out."""
    owned = ctx.pool is None
    if owned:
        if not ctx.settings.database_url:
            raise RuntimeError("EVENTS_DATABASE_URL is not set and no pool was given")
        ctx.pool = await db.create_pool(ctx.settings.database_url, ctx.settings)
    if not ctx.settings.capability_secrets:
        log.warning(
            "EVENT_CAPABILITY_SECRET is not set: capability links cannot be minted or opened"
        )
    loop = None
    if ctx.settings.scheduler_enabled:
        loop = SchedulerLoop(ctx.db, ctx.ports, ctx.settings, ctx.clock, metrics=ctx.metrics)
        ctx.extras["scheduler"] = loop
        loop.start()
    try:
        yield
    finally:
        if loop is not None:
            await loop.stop()  # the batch in hand commits first
        if owned and ctx.pool is not None:
            await ctx.pool.close()
            ctx.pool = None


def create_app(
    settings: Settings,
    ports: Ports | None = None,
    actor_dependency: ActorResolver | None = None,
    *,
    pool: db.Pool | None = None,
    clock: Callable[[], datetime] = utc_now,
    intake_public: bool | None = None,
) -> FastAPI:
    """The service as an ASGI app.

    `actor_dependency` is `async (request) -> Actor`; it replaces the bearer-token actor.
    """
    ctx = ServiceContext(
        settings=settings,
        ports=Ports(),
        migrations_dir=settings.migrations_dir or migrate.default_dir(),
        clock=clock,
        pool=pool,
        actor_resolver=actor_dependency,
        codec=CapabilityCodec(settings.capability_secrets),
        throttle=Throttle(settings),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with service_lifespan(ctx):
            yield

    app = FastAPI(
        title="events-svc",
        version="0.1.0",
        description="Event registration: events, seats, registrations. Every refusal "
        "answers {error: {code, detail}} with a stable code.",
        lifespan=lifespan,
    )
    # No ports given: the standalone composition (template store, outbox queue). A host
    # passes its own Ports; `Ports()` alone is the refusing defaults, loud on every send.
    ctx.ports = ports if ports is not None else standalone_ports()
    app.state.events = ctx
    install_error_handlers(app)
    app.add_middleware(_ProtectHeaders)
    app.add_middleware(RequestObserver, metrics=ctx.metrics)
    ctx.metrics.registry.register(PoolCollector(ctx.db))
    app.include_router(service.router)
    app.include_router(service.router, prefix=BASE_PATH)
    app.include_router(admin_router(), prefix=BASE_PATH)
    intake = settings.intake_public if intake_public is None else intake_public
    app.include_router(public_router(intake=intake), prefix=BASE_PATH)
    return app


def app_from_env() -> FastAPI:
    """The app built from the environment: the factory `serve --workers N` hands to uvicorn
    (each worker process builds its own app, pool and scheduler loop)."""
    settings = Settings.from_env()
    if not logging.getLogger().handlers:  # a fresh worker process: the same JSON lines
        handler = logging.StreamHandler()
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=settings.log_level, handlers=[handler])
    return create_app(settings)
