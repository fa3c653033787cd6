"""The ASGI app: `create_app(settings, ports=..., actor_dependency=...)`.

The lifespan opens (and closes) the asyncpg pool; one set of handlers renders
every refusal as `{"error": {"code", "detail", ...}}`. A host can mount the
returned app, or mount `admin_router()` / `public_router()` itself (see
README.md, "Mounting in a host").
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events_svc import db, errors, migrate
from events_svc.adapters.standalone import standalone_ports
from events_svc.bodylimit import BodyLimit
from events_svc.capabilities import CapabilityCodec
from events_svc.console import PREFIX as CONSOLE_PREFIX
from events_svc.console import console_app
from events_svc.documents import DocumentBound
from events_svc.egress import EgressGuard
from events_svc.links import BASE_PATH
from events_svc.loops import Loop
from events_svc.models import ADMIN_ERRORS, PUBLIC_ERRORS, error_responses
from events_svc.observability import (
    CrashGuard,
    PoolCollector,
    RequestObserver,
    configure_logging,
    quiet_libraries,
)
from events_svc.ports import Ports, close_ports
from events_svc.routes import (
    attendance,
    badges,
    booths,
    desk,
    dispatch,
    event_page,
    events,
    exports,
    leads,
    mail,
    operations,
    public,
    registrations,
    sale,
    service,
    waitlist,
    webhooks,
)
from events_svc.routes.deps import (
    ActorResolver,
    ServiceContext,
    utc_now,
)
from events_svc.settings import Settings
from events_svc.throttle import Throttle
from events_svc.verbs.registrations import COMBINER

log = logging.getLogger("events_svc")


# Declared on every route with the one error body; declaring 422 also keeps FastAPI
# from documenting its own validation body, which this service never sends.
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = error_responses(*ADMIN_ERRORS)


def admin_router() -> APIRouter:
    """Every admin route (bearer/host actor, scopes), without the base path."""
    router = APIRouter(responses=_ERROR_RESPONSES)
    router.include_router(registrations.router)  # the hottest routes match first
    router.include_router(events.router)
    router.include_router(booths.router)
    router.include_router(sale.products_router)
    router.include_router(mail.router)
    router.include_router(sale.router)
    router.include_router(leads.router)
    router.include_router(desk.router)
    router.include_router(exports.router)
    router.include_router(badges.router)
    router.include_router(attendance.router)
    router.include_router(operations.router)
    router.include_router(dispatch.router)
    router.include_router(public.mint_router)
    router.include_router(waitlist.router)
    router.include_router(webhooks.router)
    return router


def public_router(*, intake: bool = False) -> APIRouter:
    """The capability-carried public tree (no actor), without the base path; with
    `intake` the public registration route too."""
    router = APIRouter(responses=error_responses(*PUBLIC_ERRORS))
    router.include_router(public.router)
    router.include_router(waitlist.public_router)
    router.include_router(event_page.router)
    if intake:
        router.include_router(public.intake_router)
        router.include_router(waitlist.intake_router)
        router.include_router(event_page.form_router)
    return router


class _ProtectHeaders:
    """Responses are private: never cached, never indexed (but a page a route marks
    `indexable`: a published event's public page)."""

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
                if not scope.get("state", {}).get("indexable"):
                    headers.append((b"x-robots-tag", b"noindex"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _error_response(exc: errors.DomainError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.response_headers())


def _invalid_json(exc: RequestValidationError, position: Any) -> errors.DomainError:
    """Where the JSON broke, as line and column (1-based); never the body itself."""
    doc = exc.body
    text = doc.decode("utf-8", "replace") if isinstance(doc, bytes) else doc
    text = text if isinstance(text, str) else ""
    pos = position if isinstance(position, int) else 0
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return errors.InvalidJson(
        f"The body is not valid JSON (line {line}, column {column}).", line=line, column=column
    )


def _validation_error(exc: RequestValidationError) -> errors.DomainError:
    """One refusal for a request that does not validate: unknown_field first, then a
    typed refusal, else validation_failed listing every problem (first one in `field`).
    Input values are never echoed: they may hold an email or a phone number."""
    problems: list[dict[str, Any]] = []
    typed: errors.DomainError | None = None
    for err in exc.errors():
        kind = str(err.get("type", ""))
        raw_loc = tuple(err.get("loc", ()))
        if kind == "json_invalid":
            return _invalid_json(exc, raw_loc[1] if len(raw_loc) > 1 else 0)
        loc = [str(p) for p in raw_loc]
        field = ".".join(loc[1:]) if len(loc) > 1 else ".".join(loc)
        if kind == "extra_forbidden":
            return errors.UnknownField(f"Unknown field: {field}.", field=field)
        if kind in errors.TYPED_VALIDATION and typed is None:
            refusal = errors.TYPED_VALIDATION[kind]
            typed = refusal(" ".join((refusal.__doc__ or kind).split()), field=field)
        problems.append({"field": field, "message": err.get("msg", ""), "type": kind})
    if typed is not None:
        return typed
    first = problems[0]["field"] if problems else None
    return errors.ValidationFailed(field=first, errors=problems)


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
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # the framework could not even decode the body (not UTF-8): malformed JSON too
            return _error_response(errors.InvalidJson("The body is not UTF-8 encoded JSON."))
        if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
            # an integer past the parser's digit limit, or nesting deeper than it reads
            return _error_response(
                errors.InvalidJson("The body is JSON this service does not read.")
            )
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        body = {"error": {"code": code, "detail": str(exc.detail)}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(errors.DomainError, domain)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)


@asynccontextmanager
async def service_lifespan(ctx: ServiceContext, *, owns_ports: bool = False) -> AsyncIterator[None]:
    """Open the pool (unless the host handed one in), start the one loop (every pass in
    its lane), and on the way out stop it (each lane's run in hand commits), close the
    passes and the ports this app made, then the pool."""
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
        passes = ctx.composition()
        loop = Loop(passes.lanes, ctx.db, ctx.settings, ctx.clock, ctx.metrics)
        ctx.loop = loop
        loop.start()
    try:
        yield
    finally:
        if loop is not None:
            await loop.stop()  # each lane's run in hand commits (or is recorded) first
        await ctx.close_composition()  # the attempts in flight are recorded first
        if owns_ports:
            await close_ports(ctx.ports)
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
    The routes are the process's one set (`api_routes`); the first start builds their
    matching state (`warm_routes`), so no first request waits on it.
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
        egress=EgressGuard(allow_private=settings.webhook_allow_private),
        documents=DocumentBound(settings.document_concurrency),
    )

    @asynccontextmanager
    async def lifespan(application: FastAPI) -> AsyncIterator[None]:
        async with service_lifespan(ctx, owns_ports=ports is None):
            await warm_routes(application)
            freeze_long_lived()
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
    ctx.ports = (
        ports
        if ports is not None
        else standalone_ports(settings=settings, database=ctx.db, documents=ctx.documents)
    )
    COMBINER.max_batch = settings.register_batch_max  # the register verb's batches
    app.state.events = ctx
    install_error_handlers(app)
    # innermost first: an unhandled error becomes one logged 500, which the outer layers
    # then mark private and log as a request; oversized bodies never reach a route
    app.add_middleware(CrashGuard)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(_ProtectHeaders)
    app.add_middleware(RequestObserver, metrics=ctx.metrics)
    ctx.metrics.registry.register(PoolCollector(ctx.db))
    intake = settings.intake_public if intake_public is None else intake_public
    ctx.intake = intake
    app.router.routes.extend(api_routes(intake=intake))
    app.mount(CONSOLE_PREFIX, console_app(ctx))  # the operator console (src/events_svc/console)
    return app


@functools.cache
def api_routes(*, intake: bool) -> tuple[BaseRoute, ...]:
    """The service's routes (health, admin, public), built once per process and shared by
        every app it creates. FastAPI builds a route's matching and validation state (its
        parameters' and bodies' validators) lazily, the first time a request walks past it,
        and keeps it on the included router: 0.3 s of CPU for the whole API here. An app that
        included the routers itself would build all of it again; the routes take everything
        per app from the request (`request.app.state.events`), so sharing them is safe. One set
    per value of `intake`. Their dependencies resolve against no app's
    `dependency_overrides` (a host swaps the actor with `actor_dependency`, its adapters
    with `ports`)."""
    holder = APIRouter()
    holder.include_router(service.router)
    holder.include_router(service.router, prefix=BASE_PATH)
    holder.include_router(admin_router(), prefix=BASE_PATH)
    holder.include_router(public_router(intake=intake), prefix=BASE_PATH)
    return tuple(holder.routes)


_frozen = False


def freeze_long_lived() -> None:
    """Once per process, at the first start: collect, then move every object alive now
    (modules, models, routes: what lives as long as the process) out of the cyclic
    collector's reach (`gc.freeze`). A full collection then walks only what requests made
    since, instead of the whole heap under the interpreter lock: 140 ms with the test suite
    loaded, which any request of the moment (a template check's allocations set it off
    often) would wait out; after, under a millisecond."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


async def warm_routes(app: FastAPI) -> None:
    """Build the router's matching state before the first request. FastAPI builds it
    lazily, route by route, the first time a request walks past them: about 0.3 s here,
    on the event loop, which the first requests (and every request waiting behind them)
    would pay. The routes are shared (`api_routes`), so only a process's first app pays
    it; later ones find it built. A path under the base path that no route takes walks
    past every route of the API; it goes to the router alone, so no middleware sees or
    logs it."""
    path = f"{BASE_PATH}/admin/\x00"
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "scheme": "http",
        "http_version": "1.1",
        "server": ("localhost", 80),
        "client": ("127.0.0.1", 0),
        "app": app,
        "state": {},
    }

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: Message) -> None:
        return None

    with contextlib.suppress(StarletteHTTPException):  # the 404 of a path no route takes
        await app.router(scope, receive, send)


def app_from_env() -> FastAPI:
    """The app built from the environment: the factory `serve --workers N` hands to uvicorn
    (each worker process builds its own app, pool and loop)."""
    settings = Settings.from_env()
    if not logging.getLogger().handlers:  # a fresh worker process: the same JSON lines
        configure_logging(settings.log_level)
    else:
        quiet_libraries()  # whoever configured the handlers: the same rule for the libraries
    return create_app(settings)
