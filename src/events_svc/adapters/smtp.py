"""The mail transport: outbox rows sent to the relay of `EVENTS_SMTP_URL` with aiosmtplib.

Sessions are reused: at most `EVENTS_SMTP_CONCURRENCY` are open at once, each kept after
a send for the next one (one idle longer than `IDLE_S` is closed and opened again, so a
relay's idle timeout never fails a message; a kept session the relay dropped anyway is
replaced and the message tried once more on the new one). A session is opened with
implicit TLS for `smtps://`, STARTTLS when the relay offers it (required with
`?starttls=require`, and whenever the URL holds credentials: a relay that does not offer
it is refused, and neither a password nor a message is sent in plain text) and AUTH when
the URL holds credentials; certificates are always verified (`EVENTS_SMTP_CA_FILE` adds
a CA bundle for a private relay).

An answer becomes a `DeliveryFailure` (or None when accepted): a 4xx reply `temporary`,
a 5xx reply `permanent`; a refused, dropped or unencrypted connection, or a refused
greeting, TLS or AUTH `connection` and a silent relay `timeout`, both marked
`relay_down` (the rest of the batch waits instead of hammering a broken relay); a
message that cannot be built `render`; a non-ASCII address the relay cannot carry (no
SMTPUTF8) `permanent`, for that message alone. A session that saw a relay's error is
closed. Details are scrubbed of addresses and bounded: a relay's reply often quotes the
recipient.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from email.message import EmailMessage
from email.utils import parseaddr
from pathlib import Path

import aiosmtplib

from events_svc.adapters.mime import build_message
from events_svc.observability import host_port
from events_svc.ports import (
    AttachmentUnavailable,
    DeliveryErrorKind,
    DeliveryFailure,
    QueuedMessage,
    TicketsPdf,
)
from events_svc.settings import SmtpRelay

IDLE_S = 20.0  # a session idle longer than this is opened again before use
_STALE = DeliveryFailure(DeliveryErrorKind.CONNECTION, None, "a kept session had gone stale")
_ADDRESS = re.compile(r"<?[^\s<>@]+@[^\s<>@]+>?")
_DETAIL_MAX = 200


def safe_detail(text: str) -> str:
    """A reply or error text without addresses, on one line, bounded."""
    return " ".join(_ADDRESS.sub("<address>", text).split())[:_DETAIL_MAX]


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """The system's trust store, plus the extra bundle when one is configured; hostnames
    and certificates are always checked."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return context


def reply_failure(code: int, text: str) -> DeliveryFailure:
    """A relay's reply to one message: 4xx temporary, 5xx permanent; 421 (the relay is
    closing the session) also says the relay is down for now."""
    detail = safe_detail(f"{code} {text}")
    if 500 <= code < 600:
        return DeliveryFailure(DeliveryErrorKind.PERMANENT, code, detail)
    return DeliveryFailure(DeliveryErrorKind.TEMPORARY, code, detail, relay_down=code == 421)


def session_failure(exc: BaseException) -> DeliveryFailure:
    """A failure of the session itself (opening it, TLS, AUTH, or a connection lost)."""
    if isinstance(exc, aiosmtplib.SMTPTimeoutError | asyncio.TimeoutError | TimeoutError):
        return DeliveryFailure(
            DeliveryErrorKind.TIMEOUT, None, "the relay did not answer in time", relay_down=True
        )
    if type(exc) is aiosmtplib.SMTPException and "STARTTLS" in str(exc):
        detail = "the relay does not offer STARTTLS, which the URL (or its credentials) requires"
        return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        detail = safe_detail(f"{type(exc).__name__}: {exc.code} {exc.message}")
        return DeliveryFailure(DeliveryErrorKind.CONNECTION, exc.code, detail, relay_down=True)
    if isinstance(exc, ssl.SSLError):
        detail = safe_detail(f"TLS: {exc.reason or type(exc).__name__}")
        return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)
    if isinstance(exc, aiosmtplib.SMTPServerDisconnected):
        detail = "the relay closed the connection before answering"
        return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)
    if isinstance(exc, aiosmtplib.SMTPException):  # the library's own words (AUTH offered?)
        detail = safe_detail(f"the relay refused the session: {exc}")
        return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)
    cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
    if isinstance(cause, ssl.SSLError):
        return session_failure(cause)
    name = type(cause).__name__
    reason = getattr(cause, "strerror", None) or ""
    detail = safe_detail(f"{name}: {reason}" if reason else name)
    return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)


NO_SMTPUTF8 = "the relay does not accept non-ASCII addresses (it offers no SMTPUTF8)"


class _Session:
    def __init__(self, client: aiosmtplib.SMTP) -> None:
        self.client = client
        self.used = time.monotonic()
        self.sent = 0  # messages this session carried: a reused one may have gone stale


class SmtpTransport:
    """Sends mail rows over a few reused SMTP sessions (see the module docstring)."""

    channel = "mail"

    def __init__(
        self,
        relay: SmtpRelay,
        mail_from: str,
        tickets: TicketsPdf,
        *,
        ca_file: Path | None = None,
        timeout_s: float = 30.0,
        sessions: int = 4,
    ) -> None:
        self.relay, self.mail_from, self.tickets = relay, mail_from, tickets
        self.host = host_port(relay.host, relay.port)  # what the log names (no credential)
        self.envelope_from = parseaddr(mail_from)[1]
        self.timeout_s = timeout_s
        self.tls = tls_context(ca_file)
        self.sessions = sessions
        self._idle: list[_Session] = []
        self._slots: asyncio.Semaphore | None = None

    def _must_encrypt(self) -> bool:
        return self.relay.require_starttls or bool(self.relay.username or self.relay.password)

    def _open_client(self) -> aiosmtplib.SMTP:
        relay = self.relay
        return aiosmtplib.SMTP(
            hostname=relay.host,
            port=relay.port,
            username=relay.username or None,
            password=relay.password or None,
            use_tls=relay.implicit_tls,
            # None: STARTTLS when the relay offers it; True: refuse a relay that does not
            # (asked by the URL, and always when it holds credentials: a password never
            # travels in plain text, whatever a relay or a man in the middle offers)
            start_tls=False if relay.implicit_tls else (True if self._must_encrypt() else None),
            tls_context=self.tls,
            timeout=self.timeout_s,
        )

    async def _session(self, *, fresh: bool = False) -> _Session:
        """An open session: the most recently used idle one, or a new one (`fresh`)."""
        while self._idle and not fresh:
            session = self._idle.pop()
            if session.client.is_connected and time.monotonic() - session.used < IDLE_S:
                return session
            await self._discard(session)
        client = self._open_client()
        try:
            await client.connect()  # greeting, EHLO, STARTTLS, AUTH
        except BaseException:
            client.close()  # a half-open session (refused TLS or AUTH) holds its socket
            raise
        return _Session(client)

    async def _discard(self, session: _Session) -> None:
        client = session.client
        if client.is_connected:
            try:
                await asyncio.wait_for(client.quit(), timeout=2.0)
            except (aiosmtplib.SMTPException, OSError, TimeoutError):
                client.close()

    async def send(self, message: QueuedMessage) -> DeliveryFailure | None:
        try:
            mime = await build_message(message, self.mail_from, self.tickets)
        except AttachmentUnavailable as exc:
            return DeliveryFailure(DeliveryErrorKind.RENDER, None, safe_detail(str(exc)))
        except Exception as exc:  # a row the standard library cannot make a message of
            detail = f"the message could not be built ({type(exc).__name__})"
            return DeliveryFailure(DeliveryErrorKind.RENDER, None, detail)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.sessions)
        async with self._slots:
            failure = await self._send_once(message, mime)
            if failure is _STALE:  # a kept session the relay had dropped: once more, afresh
                failure = await self._send_once(message, mime, fresh=True)
            return None if failure is _STALE else failure

    async def _send_once(
        self, message: QueuedMessage, mime: EmailMessage, *, fresh: bool = False
    ) -> DeliveryFailure | None:
        try:
            session = await self._session(fresh=fresh)
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            return session_failure(exc)
        try:
            await session.client.send_message(
                mime, sender=self.envelope_from, recipients=[message.recipient]
            )
        except aiosmtplib.SMTPNotSupported:  # raised before MAIL: the session is intact
            self._keep(session)
            return DeliveryFailure(DeliveryErrorKind.PERMANENT, None, NO_SMTPUTF8)
        except aiosmtplib.SMTPRecipientsRefused as exc:
            await self._discard(session)
            refused = exc.recipients[0] if exc.recipients else None
            if refused is None:
                return DeliveryFailure(DeliveryErrorKind.PERMANENT, None, "recipient refused")
            return reply_failure(refused.code, refused.message)
        except (aiosmtplib.SMTPSenderRefused, aiosmtplib.SMTPDataError) as exc:
            await self._discard(session)
            return reply_failure(exc.code, exc.message)
        except aiosmtplib.SMTPRecipientRefused as exc:
            await self._discard(session)
            return reply_failure(exc.code, exc.message)
        except aiosmtplib.SMTPServerDisconnected as exc:
            session.client.close()
            if session.sent and not fresh:
                return _STALE
            return session_failure(exc)
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            session.client.close()
            return session_failure(exc)
        except BaseException:
            session.client.close()  # never a socket left behind
            raise
        session.sent += 1
        self._keep(session)
        return None

    def _keep(self, session: _Session) -> None:
        session.used = time.monotonic()
        self._idle.append(session)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for session in idle:
            await self._discard(session)
