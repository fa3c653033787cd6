"""A real SMTP server for the delivery probes (aiosmtpd on loopback, in its own thread).

It keeps every message it accepted (parsed), the `Message-ID` of every DATA it saw
(accepted or not), and answers DATA by a script: `"250"` (accept), a reply such as
`"451 4.3.0 try later"` or `"550 5.1.1 no such user"`, `"drop"` (close the connection
before answering) or `"stall"` (never answer in time). It can offer STARTTLS with a
certificate of a throwaway CA (trustme), and AUTH with one user.
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import ssl
import threading
import time
import warnings
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from tests.probes.helpers import free_port


class Sink:
    """The handler: what arrived, and the script of answers."""

    def __init__(self, delay: float = 0.0) -> None:
        self.accepted: list[EmailMessage] = []
        self.seen_ids: list[str] = []
        self.script: list[str] = []
        self.delay = delay
        self.lock = threading.Lock()
        self.in_flight: dict[str, int] = {}
        self.most_in_flight: dict[str, int] = {}
        self.arrivals: list[float] = []
        self.sessions = 0
        self.logins: list[bool] = []  # each AUTH seen: True when it came over TLS

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        with self.lock:
            self.sessions += 1
        session.host_name = hostname
        return responses

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        domain = envelope.rcpt_tos[0].rpartition("@")[2]
        with self.lock:
            self.seen_ids.append(str(message["Message-ID"]))
            self.arrivals.append(time.monotonic())
            action = self.script.pop(0) if self.script else "250"
            self.in_flight[domain] = self.in_flight.get(domain, 0) + 1
            self.most_in_flight[domain] = max(
                self.most_in_flight.get(domain, 0), self.in_flight[domain]
            )
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if action == "drop":
                server.transport.close()
                return "421 closing"
            if action == "stall":
                await asyncio.sleep(30)
            if action != "250":
                return action
            with self.lock:
                self.accepted.append(message)  # type: ignore[arg-type]
            return "250 2.0.0 accepted"
        finally:
            with self.lock:
                self.in_flight[domain] -= 1


class _Users:
    def __init__(self, sink: Sink, user: str, password: str) -> None:
        self.sink = sink
        self.user, self.password = user.encode(), password.encode()

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, data: Any
    ) -> AuthResult:
        with self.sink.lock:
            self.sink.logins.append(session.ssl is not None)  # was it encrypted?
        ok = isinstance(data, LoginPassword) and (data.login, data.password) == (
            self.user,
            self.password,
        )
        return AuthResult(success=ok, handled=False)


class _Server(SMTP):
    """aiosmtpd's session, keeping the sockets it was given: a client that walks away
    from a TLS handshake leaves aiosmtpd's plain socket open, so the sink closes what
    is left when it stops."""

    def __init__(self, sockets: set[asyncio.BaseTransport], *args: Any, **kwargs: Any) -> None:
        with warnings.catch_warnings():  # AUTH over plain text is the point of `plain_auth`
            warnings.filterwarnings("ignore", "Requiring AUTH while not requiring TLS")
            super().__init__(*args, **kwargs)
        self._sockets = sockets

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._sockets.add(transport)
        super().connection_made(transport)


class _Controller(Controller):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sockets: set[asyncio.BaseTransport] = set()

    def factory(self) -> SMTP:
        return _Server(self.sockets, self.handler, **self.SMTP_kwargs)

    def stop(self, no_assert: bool = False) -> None:
        def close_all() -> None:
            for transport in self.sockets:
                transport.close()

        if self.loop.is_running():
            self.loop.call_soon_threadsafe(close_all)
        super().stop(no_assert)


@contextlib.contextmanager
def smtp_sink(
    *,
    tls: trustme.CA | None = None,
    implicit: bool = False,
    auth: tuple[str, str] | None = None,
    plain_auth: bool = False,
    utf8: bool = True,
    delay: float = 0.0,
) -> Iterator[tuple[Sink, int]]:
    """A running sink on 127.0.0.1 (its handler and port): with `tls`, a certificate of
    that CA for `localhost`, offered by STARTTLS (or from the first byte when `implicit`);
    AUTH for the user `auth`, over TLS only unless `plain_auth`; SMTPUTF8 unless `utf8`
    is false."""
    handler = Sink(delay)
    port = free_port()
    kwargs: dict[str, Any] = {"enable_SMTPUTF8": utf8, "timeout": 30}
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.issue_cert("localhost", "127.0.0.1").configure_cert(context)
        kwargs["ssl_context" if implicit else "tls_context"] = context
    if auth is not None:
        kwargs["authenticator"] = _Users(handler, *auth)
        kwargs["auth_required"] = True
        kwargs["auth_require_tls"] = not plain_auth
    controller = _Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield handler, port
    finally:
        controller.stop()


def ca_file(ca: trustme.CA, folder: Path) -> Path:
    """The CA's certificate as a PEM file (what EVENTS_SMTP_CA_FILE names)."""
    path = folder / "relay-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path
