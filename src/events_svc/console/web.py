"""The console's building blocks, shared by every page module: the actor (resolved exactly
like the API's, or by the host's dependency), scope checks, posted forms with their CSRF
check, the page renderer and its error summary, the 303 answer of a form, and a moment
as the operator reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from events_svc import errors
from events_svc.actors import Actor
from events_svc.console.frame import SessionHolder
from events_svc.console.notices import NOTICES
from events_svc.console.session import SessionCodec
from events_svc.routes.deps import ServiceContext, service_context
from events_svc.verbs.tokens import resolve_console_session

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
MAX_FORM_FIELDS = 100
MAX_FIELD_BYTES = 64 * 1024

env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


class SignInRequired(Exception):
    """No signed-in operator: the console answers a 303 to its sign-in page."""


def session_of(request: Request) -> SessionHolder:
    holder: SessionHolder = request.scope["state"]["studio_session"]
    return holder


def signed_note(request: Request, actor: Actor, payload: dict[str, Any]) -> str:
    """`payload` signed for this session and operator, to ride a 303 to its page."""
    codec: SessionCodec = request.scope["state"]["studio_codec"]
    return codec.dump_note(session_of(request).session, actor.id, payload)


def opened_note(request: Request, actor: Actor, raw: str | None) -> dict[str, Any] | None:
    """The payload of a note this session and operator signed in the last minutes."""
    codec: SessionCodec | None = request.scope["state"].get("studio_codec")
    if codec is None:
        return None
    return codec.load_note(session_of(request).session, actor.id, raw)


async def plain_query(request: Request) -> None:
    """Every console page's query string: no NUL character (422, as the API's `no_nul`)."""
    for key, value in request.query_params.multi_items():
        if "\x00" in key or "\x00" in value:
            raise errors.ValidationFailed("NUL characters are not allowed in text", field=key)


def base_path(request: Request) -> str:
    """Where the console is mounted (`/studio`, or under a host's own prefix)."""
    return str(request.scope.get("root_path", ""))


async def studio_actor(request: Request) -> Actor:
    """The operator: the host's actor dependency when the app was composed with one, else
    the token of the live server-side session the cookie names (signed out, its token
    revoked or idle for 12 h: the sign-in page, and the cookie forgets the key)."""
    ctx = service_context(request)
    if ctx.actor_resolver is not None:
        actor = await ctx.actor_resolver(request)
    else:
        holder = session_of(request)
        key = holder.session.key
        if key is None:
            raise SignInRequired()
        found = await resolve_console_session(ctx.db(), key, ctx.clock())
        if found is None:
            holder.session = holder.session.without_key()
            raise SignInRequired()
        actor = found
    request.state.studio_actor = actor
    return actor


Operator = Annotated[Actor, Depends(studio_actor)]


class Needs:
    """The dependency of a page that needs `scope` (the 403 page names it otherwise)."""

    def __init__(self, scope: str) -> None:
        self.scope = scope

    async def __call__(self, actor: Operator) -> Actor:
        require_scope(actor, self.scope)
        return actor


def require_scope(actor: Actor, scope: str) -> None:
    if not actor.has(scope):
        raise errors.MissingScope(f"This page needs the {scope} scope.", scope=scope)


def needs(scope: str) -> Any:
    return Depends(Needs(scope))


async def studio_ctx(request: Request) -> ServiceContext:
    return service_context(request)


StudioCtx = Annotated[ServiceContext, Depends(studio_ctx)]


@dataclass
class Form:
    """A posted form whose CSRF token matched: its text fields and its one file, if any."""

    values: dict[str, str]
    lists: dict[str, list[str]] = field(default_factory=dict)
    file: UploadFile | None = None

    def text(self, name: str) -> str:
        return self.values.get(name, "").strip()

    def optional(self, name: str) -> str | None:
        return self.text(name) or None


async def posted_form(request: Request) -> Form:
    """The form of a POST, refused (403 `csrf_failed`) unless it carries this session's
    CSRF token. Fields and the file are bounded; NUL characters are refused."""
    try:
        data = await request.form(
            max_files=1, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FIELD_BYTES
        )
    except StarletteHTTPException as exc:  # the multipart parser's own refusals
        if "maximum" in str(exc.detail).lower() or "too many" in str(exc.detail).lower():
            raise errors.PayloadTooLarge("A field or the form is larger than accepted.") from None
        raise errors.ValidationFailed("The form could not be read.") from None
    except (ValueError, KeyError, AssertionError):
        raise errors.ValidationFailed("The form could not be read.") from None
    values: dict[str, str] = {}
    lists: dict[str, list[str]] = {}
    upload: UploadFile | None = None
    for key, value in data.multi_items():
        if isinstance(value, UploadFile):
            upload = value
            continue
        if "\x00" in value:
            raise errors.ValidationFailed("NUL characters are not allowed in text", field=key)
        values.setdefault(key, value)
        lists.setdefault(key, []).append(value)
    if not session_of(request).session.csrf_matches(values.get("csrf_token")):
        raise errors.CsrfRefused()
    return Form(values=values, lists=lists, file=upload)


Posted = Annotated[Form, Depends(posted_form)]


@dataclass(frozen=True)
class FieldError:
    """One line of a page's error summary, linked to its field when it has one."""

    message: str
    code: str = "validation_failed"
    field: str | None = None

    @property
    def anchor(self) -> str | None:
        return f"field-{self.field}" if self.field else None


def refusal_errors(exc: errors.DomainError) -> list[FieldError]:
    field_name = exc.fields.get("field")
    problems = exc.fields.get("errors")
    if isinstance(problems, list) and problems:
        return [
            FieldError(str(p.get("message", exc.detail)), exc.code, _field(p.get("field")))
            for p in problems
            if isinstance(p, dict)
        ]
    return [FieldError(exc.detail, exc.code, _field(field_name))]


def validation_errors(exc: ValidationError) -> list[FieldError]:
    """A model's validation failure as summary lines (never echoing the input), each with
    the code the API answers: the typed refusal of our own field types, else
    `validation_failed`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        typed = errors.TYPED_VALIDATION.get(str(err.get("type")))
        code = typed.code if typed is not None else errors.ValidationFailed.code
        lines.append(FieldError(str(err.get("msg", "invalid")), code, loc or None))
    return lines


def _field(value: Any) -> str | None:
    return str(value) if value else None


def page(
    request: Request,
    template: str,
    *,
    status_code: int = 200,
    problems: list[FieldError] | None = None,
    **context: Any,
) -> HTMLResponse:
    """Render a console page: the layout gets the operator, the CSRF token, the notice of a
    303 (`?done=`) and the error summary."""
    actor = getattr(request.state, "studio_actor", None)
    notice = NOTICES.get(request.query_params.get("done", ""))
    html = env.get_template(template).render(
        base=base_path(request),
        path=request.url.path,
        csrf_token=session_of(request).session.csrf,
        actor=actor,
        notice=notice,
        problems=problems or [],
        **context,
    )
    return HTMLResponse(html, status_code=status_code)


def zone(name: str) -> ZoneInfo:
    """The zone a form's local time is read in: the event's (UTC for a name this machine
    does not know)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def see_other(request: Request, path: str, *, done: str | None = None, **query: Any) -> Any:
    """The 303 after a form: to `path` under the console, with a notice key and a query."""
    params: dict[str, Any] = {k: v for k, v in query.items() if v is not None}
    if done is not None:
        params["done"] = done
    suffix = f"?{urlencode(params)}" if params else ""
    return RedirectResponse(f"{base_path(request)}{path}{suffix}", status_code=303)


def query_text(values: Mapping[str, str], name: str, limit: int = 200) -> str | None:
    """A bounded, stripped text filter from a query string (None when blank)."""
    value = values.get(name, "").strip()[:limit]
    return value or None
