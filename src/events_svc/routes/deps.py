"""What every route depends on: the service context, the actor, scopes, If-Match, the
bounded list parameters, and `answer` (a view built once and serialised once)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, Header, Query, Request, Response
from pydantic import BaseModel
from starlette.datastructures import URLPath

from events_svc import errors
from events_svc.actors import Actor
from events_svc.capabilities import CapabilityCodec
from events_svc.db import Pool
from events_svc.documents import DocumentBound
from events_svc.egress import EgressGuard
from events_svc.links import AttendeeLinks
from events_svc.loops import Composition, Loop, Services, compose_passes
from events_svc.models import View
from events_svc.models.base import WholeNumber
from events_svc.observability import Metrics
from events_svc.ports import Ports
from events_svc.settings import Settings
from events_svc.text import whole_number
from events_svc.throttle import Throttle
from events_svc.verbs.tokens import resolve_token


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class ServiceContext:
    """Everything a route needs; lives on `app.state.events` for the app's lifetime."""

    settings: Settings
    ports: Ports
    migrations_dir: Path
    clock: Callable[[], datetime] = utc_now
    actor_resolver: ActorResolver | None = None  # None: bearer tokens
    codec: CapabilityCodec = field(default_factory=lambda: CapabilityCodec(()))
    throttle: Throttle | None = None
    metrics: Metrics = field(default_factory=Metrics)
    pool: Pool | None = None
    loop: Loop | None = None  # the lifespan's loop, when this process runs one
    egress: EgressGuard = field(default_factory=EgressGuard)  # where webhooks may go
    intake: bool = False  # the public intake's routes (and the event page's forms) mounted
    # the documents this process renders at once (EVENTS_DOCUMENT_CONCURRENCY): badge
    # sheets, tickets PDFs, mails' attached tickets (`documents.bound`)
    documents: DocumentBound = field(default_factory=DocumentBound)
    _export_slots: asyncio.Semaphore | None = None
    _passes: Composition | None = None

    def composition(self) -> Composition:
        """The process's one composition of the passes: the loop's lanes run them, and the
        run route runs them once (made at the first ask; closed by the lifespan)."""
        if self._passes is None:
            services = Services(
                self.db,
                self.ports,
                self.settings,
                self.clock,
                self.metrics,
                self.metrics.load,
                self.egress,
            )
            self._passes = compose_passes(services)
        return self._passes

    async def close_composition(self) -> None:
        if self._passes is not None:
            passes, self._passes = self._passes, None
            await passes.close()

    @property
    def links(self) -> AttendeeLinks:
        """The attendee links mail templates carry here (`links_unavailable` of templates)."""
        s = self.settings
        return AttendeeLinks(self.codec, s.public_base_url, s.ics_ttl_s)

    def export_slots(self) -> asyncio.Semaphore:
        """The export downloads this process may stream at once (EVENTS_EXPORT_CONCURRENCY):
        each holds a pooled connection for as long as its client reads."""
        if self._export_slots is None:
            self._export_slots = asyncio.Semaphore(max(1, self.settings.export_concurrency))
        return self._export_slots

    def db(self) -> Pool:
        if self.pool is None:
            raise errors.DatabaseUnavailable("The service is starting or stopping.")
        return self.pool


def service_context(request: Request) -> ServiceContext:
    ctx: ServiceContext = request.app.state.events
    return ctx


async def get_ctx(request: Request) -> ServiceContext:
    # async on purpose: FastAPI runs a sync dependency in a worker thread
    return service_context(request)


Ctx = Annotated[ServiceContext, Depends(get_ctx)]


async def current_actor(request: Request) -> Actor:
    """The actor of this request, from the composed resolver (bearer tokens by default).

    The resolver lives on the service context rather than in FastAPI's
    dependency_overrides, which would rebuild the dependency tree on every request.
    """
    resolver = service_context(request).actor_resolver or bearer_actor
    return await resolver(request)


async def bearer_actor(request: Request) -> Actor:
    """The standalone actor: a bearer API token from event.api_tokens."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise errors.Unauthenticated()
    ctx = service_context(request)
    actor = await resolve_token(ctx.db(), token.strip(), ctx.clock())
    if actor is None:
        raise errors.Unauthenticated("The token is unknown or revoked.")
    return actor


ActorResolver = Callable[[Request], Awaitable[Actor]]


class ScopeCheck:
    """The dependency of a route that needs `scope`: answers the actor when it holds it
    (403 missing_scope otherwise). Its scope is readable, so the permissions table in
    docs/permissions.md is built from the routes themselves."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    async def __call__(self, actor: Annotated[Actor, Depends(current_actor)]) -> Actor:
        if not actor.has(self.scope):
            raise errors.MissingScope(f"This route needs the {self.scope} scope.", scope=self.scope)
        return actor


def require(scope: str) -> Any:
    """A dependency answering the actor when it holds `scope` (403 missing_scope otherwise)."""
    return Depends(ScopeCheck(scope))


async def parse_if_match(if_match: Annotated[str | None, Header()] = None) -> int | None:
    """The revision named by If-Match (`"3"`, `W/"3"`, `3`); `*` or absent means any."""
    if if_match is None or if_match.strip() == "*":
        return None
    revision = whole_number(if_match.strip().removeprefix("W/").strip('"'))
    if revision is None:
        raise errors.StaleRevision("If-Match does not name a revision of this object.")
    return revision


IfMatch = Annotated[int | None, Depends(parse_if_match)]

MAX_IDEMPOTENCY_KEY = 200
_KeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=MAX_IDEMPOTENCY_KEY,
        description="1 to 200 visible ASCII characters; the same key answers the first result",
    ),
]


def checked_key(value: str | None, *, required: bool) -> str | None:
    """The one Idempotency-Key rule: 1 to 200 visible ASCII characters. A blank header is
    refused (422 naming it); where the key is required, a missing or blank one is 422
    `idempotency_key_required`."""
    key = (value or "").strip()
    if not key:
        if required:
            raise errors.IdempotencyKeyRequired()
        if value is None:
            return None
    if not key or len(key) > MAX_IDEMPOTENCY_KEY or not all("!" <= c <= "~" for c in key):
        raise errors.ValidationFailed(
            "Idempotency-Key holds 1 to 200 visible ASCII characters.", field="Idempotency-Key"
        )
    return key


async def optional_key(idempotency_key: _KeyHeader = None) -> str | None:
    return checked_key(idempotency_key, required=False)


async def required_key(idempotency_key: _KeyHeader = None) -> str:
    return checked_key(idempotency_key, required=True) or ""


# a client's key for a command it may send again: the replay answers the first result
IdempotencyKey = Annotated[str | None, Depends(optional_key)]
RequiredIdempotencyKey = Annotated[str, Depends(required_key)]


# Lists: `limit` 1..200 (default 50) and an opaque cursor; free-text filters are bounded.
Limit = Annotated[int | None, WholeNumber, Query(ge=1, le=200, description="1 to 200; default 50")]
Cursor = Annotated[str | None, Query(max_length=512, description="next_cursor of a page")]
SearchText = Annotated[str | None, Query(max_length=200)]
BarcodeText = Annotated[str | None, Query(max_length=64)]


def route_url(request: Request, name: str, **params: str) -> str:
    """`request.url_for(name, **params)`, with the route's path found once per app and kept
    (`app.state.route_paths`): finding a route by name walks every route of the API,
    raising and catching an exception for each miss (half the CPU of a public page). The
    path keeps a hole per parameter; the values go in as `url_for` puts them."""
    paths: dict[tuple[str, ...], str] = getattr(request.app.state, "route_paths", None) or {}
    key = (name, *sorted(params))
    if key not in paths:
        router = request.scope.get("router") or request.app.router
        paths[key] = str(router.url_path_for(name, **{p: f"~{p}~" for p in params}))
        request.app.state.route_paths = paths
    path = paths[key]
    for param, value in params.items():
        path = path.replace(f"~{param}~", value)
    return str(URLPath(path).make_absolute_url(request.base_url))


def answer(
    view: type[View],
    data: Any,
    *,
    status_code: int = 200,
    etag: int | None = None,
    exclude_none: bool = False,
) -> Response:
    """The answer body: the verb's dict validated once into its view and serialised once.

    Routes declare the same view as `response_model` for the OpenAPI document; returning
    a Response keeps FastAPI from dumping and validating the body a second time.
    """
    built: BaseModel = view.model_validate(data if isinstance(data, dict) else dict(data))
    headers = {"ETag": f'"{etag}"'} if etag is not None else None
    return Response(
        built.model_dump_json(exclude_none=exclude_none),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


def no_nul(value: str | None, name: str) -> str | None:
    if value is not None and "\x00" in value:
        raise errors.ValidationFailed("NUL characters are not allowed in text", field=name)
    return value


PiiMode = Literal["masked", "full"]


def pii_full(actor: Actor, pii: PiiMode) -> bool:
    """Whether to answer full attendee data: `pii=full` needs `registration:pii` (403
    missing_scope otherwise); the verb then audits the full read."""
    if pii != "full":
        return False
    if not actor.has("registration:pii"):
        raise errors.MissingScope(
            "pii=full needs the registration:pii scope.", scope="registration:pii"
        )
    return True
