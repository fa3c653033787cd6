"""What every console answer goes through: the session cookie (read, then re-issued on
every answer, `Secure` as `settings.console_cookie_secure` says, whatever scheme the
request came in with) and the page headers (a strict Content-Security-Policy, no
framing, no referrer). `no-store` and `noindex` come from the service app around it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events_svc import errors
from events_svc.console.session import COOKIE, Session, SessionCodec
from events_svc.routes.deps import ServiceContext
from events_svc.verbs.tokens import session_secret

CSP = (
    "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; "
    "object-src 'none'"
)
_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
)


@dataclass
class SessionHolder:
    """This request's session; sign-in and sign-out replace it, the answer carries it."""

    session: Session


class StudioKeys:
    """The session codec: EVENTS_CONSOLE_SECRET, else the database's own console secret
    (read once, on the first console request)."""

    def __init__(self, ctx: ServiceContext) -> None:
        self._ctx = ctx
        self._codec: SessionCodec | None = None
        self._lock = asyncio.Lock()

    async def codec(self) -> SessionCodec:
        if self._codec is not None:
            return self._codec
        async with self._lock:
            if self._codec is None:
                keys = self._ctx.settings.console_secrets
                if not keys:
                    secret = await session_secret(self._ctx.db())
                    keys = (secret,) if secret else ()
                self._codec = SessionCodec(keys)
        return self._codec


class StudioFrame:
    """ASGI middleware of the console sub-app."""

    def __init__(self, app: ASGIApp, keys: StudioKeys, secure: bool) -> None:
        self.app = app
        self.keys = keys
        # the setting, not the request's scheme: behind a TLS proxy speaking plain http to
        # the service, the scheme says http while the browser is on https
        self.secure = secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            codec: SessionCodec | None = await self.keys.codec()
        except errors.DomainError:  # the database is away: pages answer 503, no cookie
            codec = None
        raw = None
        for name, value in scope.get("headers", []):
            if name == b"cookie":
                raw = cookie_parser(value.decode("latin-1")).get(COOKIE, raw)
        loaded = codec.load(raw) if codec is not None else None
        holder = SessionHolder(loaded or Session.fresh())
        state = scope.setdefault("state", {})
        state["studio_session"] = holder
        state["studio_codec"] = codec
        path = scope.get("root_path", "") or "/"

        async def send_framed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(_HEADERS)
                if codec is not None:
                    cookie = codec.set_cookie_header(holder.session, secure=self.secure, path=path)
                    headers.append((b"set-cookie", cookie))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_framed)
