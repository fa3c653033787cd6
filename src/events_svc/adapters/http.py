"""The one outbound HTTP client: every HTTP request that leaves the building (webhooks, the
SMS gateway, the lead sink) is sent by an `OutboundClient`, built here and nowhere else
(`make lint` checks it).

Each partner (`Partner`) has its own client: its time bound (the whole attempt: connect,
send and answer together), its connection limit, its signer (chosen by the caller per
request: `adapters.signing`), and where it may connect:

- **Company-set URLs** (webhook endpoints) always pass the egress guard: every new
  connection asks the guard for the host's addresses and connects to one of those very
  addresses (`GuardedBackend`), so the address checked is the address used (TLS still
  verifies the URL's host name); never through a proxy. The client keeps a connection
  pool per receiver (scheme, host, port and path): httpcore looks over every connection
  of a pool on each request, so one pool for every receiver made each request pay for
  all their connections (`docs/performance.md`, part 12); a receiver's pool unused for
  `POOL_IDLE_S` is closed.
- **Operator-set URLs** (`EVENTS_SMS_GATEWAY_URL`, `EVENT_LEAD_WEBHOOK_URL`) may reach
  private addresses (they are the operator's own), through `EVENTS_OUTBOUND_PROXY` when
  it is set.

For every partner: HTTP/1.1 with keep-alive, no redirect followed (a 3xx is an answer
like any other), no proxy or certificate setting from the environment (`HTTP_PROXY`,
`HTTPS_PROXY`, `NO_PROXY` are never read), the answer's body read up to a bound (so the
connection can be used again) and kept only when the caller asks. An attempt answers its
status, its duration and, without a status, why (`timeout`, `connection`,
`address_not_allowed`): never an exception for the partner's failure.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import typing
from dataclasses import dataclass

import httpcore
import httpx

from events_svc import errors
from events_svc.adapters.signing import Signer
from events_svc.egress import EgressGuard
from events_svc.ports import HttpAnswer

POOL_IDLE_S = 300.0  # far longer than an attempt: an idle pool has none in flight
READ_LIMIT = 64 * 1024  # the answer's body read at most (the rest is left unread)


@dataclass(frozen=True)
class Partner:
    """Who a client talks to and how: `timeout_s` for a whole attempt, `connections` at
    once (per receiver for a guarded client), `keepalive` idle connections kept, the
    egress `guard` (company-set URLs: then a pool per receiver and never a proxy), or a
    `proxy` (operator-set URLs only)."""

    name: str
    timeout_s: float
    connections: int
    keepalive: int
    guard: EgressGuard | None = None
    proxy: str | None = None
    user_agent: str = "events-svc/1"

    def __post_init__(self) -> None:
        if self.guard is not None and self.proxy is not None:
            raise ValueError("a guarded partner never goes through a proxy")


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to addresses the guard approved for the host asked."""

    def __init__(self, guard: EgressGuard) -> None:
        self.guard = guard
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - the interface httpcore calls
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await self.guard.addresses(host, port)  # refused: WebhookUrlNotAllowed
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self.inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the interface httpcore calls
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not a destination")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, guard: EgressGuard, limits: httpx.Limits) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl.create_default_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(guard),
        )


class _PoolPerReceiver(httpx.AsyncBaseTransport):
    """Routes each request to its receiver's guarded pool, made on first use."""

    def __init__(
        self, guard: EgressGuard, limits: httpx.Limits, clock: typing.Callable[[], float]
    ) -> None:
        self.guard, self.limits, self.clock = guard, limits, clock
        self.pools: dict[tuple[str, str, int | None, str], _GuardedTransport] = {}
        self.used: dict[tuple[str, str, int | None, str], float] = {}
        self.checked = clock()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        now = self.clock()
        if now - self.checked >= POOL_IDLE_S / 5:
            await self._close_idle(now)
        url = request.url
        key = (url.scheme, url.host, url.port, url.path)
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = _GuardedTransport(self.guard, self.limits)
        self.used[key] = now
        return await pool.handle_async_request(request)

    async def _close_idle(self, now: float) -> None:
        self.checked = now
        for key in [k for k, at in self.used.items() if now - at >= POOL_IDLE_S]:
            del self.used[key]
            await self.pools.pop(key).aclose()

    async def aclose(self) -> None:
        pools = list(self.pools.values())
        self.pools.clear()
        self.used.clear()
        for pool in pools:
            await pool.aclose()


class OutboundClient:
    """Sends a partner's requests (see the module docstring)."""

    def __init__(
        self, partner: Partner, *, clock: typing.Callable[[], float] = time.monotonic
    ) -> None:
        self.partner = partner
        limits = httpx.Limits(
            max_connections=partner.connections, max_keepalive_connections=partner.keepalive
        )
        transport: httpx.AsyncBaseTransport
        # a guarded partner's pools, one per receiver (for observation)
        self.pools: _PoolPerReceiver | None = None
        if partner.guard is not None:
            transport = self.pools = _PoolPerReceiver(partner.guard, limits, clock)
        else:
            transport = httpx.AsyncHTTPTransport(
                trust_env=False, limits=limits, proxy=partner.proxy
            )
        self.client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(partner.timeout_s),
            follow_redirects=False,
            trust_env=False,
        )

    async def post(
        self,
        url: str,
        body: bytes,
        signer: Signer,
        message_id: str,
        *,
        keep_body: bool = False,
    ) -> HttpAnswer:
        """POST `body` signed by `signer` for `message_id`; the answer (its body too with
        `keep_body`), or why none came within the partner's time bound."""
        sent = {"content-type": "application/json", "user-agent": self.partner.user_agent}
        sent.update(signer.headers(message_id, body))
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        read = b""
        try:
            async with asyncio.timeout(self.partner.timeout_s):
                status, read = await self._post(url, sent, body, keep_body)
        except TimeoutError:
            error = "timeout"
        except errors.WebhookUrlNotAllowed:
            error = "address_not_allowed"
        except httpx.TimeoutException:
            error = "timeout"
        except httpx.HTTPError:
            error = "connection"
        duration = int((time.monotonic() - started) * 1000)
        return HttpAnswer(status, duration, error, read if status is not None else b"")

    async def _post(
        self, url: str, headers: dict[str, str], body: bytes, keep: bool
    ) -> tuple[int, bytes]:
        async with self.client.stream("POST", url, content=body, headers=headers) as answer:
            chunks: list[bytes] = []
            read = 0
            # a body that is kept is decoded (bounded all the same); one that is not is
            # drained as it came, so the connection can be used again
            chunks_of = answer.aiter_bytes() if keep else answer.aiter_raw()
            async for chunk in chunks_of:
                read += len(chunk)
                if keep:
                    chunks.append(chunk)
                if read >= READ_LIMIT:
                    break  # the rest is left unread: the connection is closed, not reused
            return answer.status_code, b"".join(chunks)[:READ_LIMIT]

    async def close(self) -> None:
        await self.client.aclose()
