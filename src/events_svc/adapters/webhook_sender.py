"""The webhook sender: one signed POST per attempt, through one shared client.

The client keeps a connection pool per receiver (scheme, host, port and path): httpcore
looks over every connection of a pool on each request, so one pool for every receiver
made each request pay for all their connections (2.1 to 2.2 ms of CPU a request at 12 in
flight to 3 receivers, against 0.93 to 1.11 ms with a pool each: `docs/performance.md`,
part 12). A receiver's pool unused for `POOL_IDLE_S` is closed. HTTP/1.1 with keep-alive, at
most 10 s for the whole attempt (connect, send, answer), no redirect followed (a 3xx is
a failed attempt), no proxy from the environment. The answer's body is read up to 64 KiB
(so the connection can be used again) and never kept. Every new connection asks the
egress guard for the host's addresses and connects to one of those very addresses
(`GuardedBackend`): the address checked is the address used, and TLS still verifies the
URL's host name.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import typing

import httpcore
import httpx

from events_svc import errors
from events_svc.adapters.signing import signed_headers
from events_svc.egress import EgressGuard
from events_svc.verbs.webhooks import pass_

TIMEOUT_S = 10.0
POOL_IDLE_S = 300.0  # far longer than an attempt (TIMEOUT_S): an idle pool has none in flight
# a pool may hold every attempt of the process (the loop keeps 4 per endpoint, and its
# total under MAX_IN_FLIGHT), so no attempt ever waits for a connection of ours
LIMITS = httpx.Limits(
    max_connections=pass_.MAX_IN_FLIGHT, max_keepalive_connections=pass_.PER_ENDPOINT
)
MAX_BODY_READ = 64 * 1024
USER_AGENT = "events-svc-webhooks/1"


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
        raise httpcore.ConnectError("unix sockets are not a webhook destination")

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

    def __init__(self, guard: EgressGuard, clock: typing.Callable[[], float]) -> None:
        self.guard, self.clock = guard, clock
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
            pool = self.pools[key] = _GuardedTransport(self.guard, LIMITS)
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


class WebhookSender:
    """Sends one attempt (see the module docstring)."""

    def __init__(
        self,
        guard: EgressGuard,
        *,
        timeout_s: float = TIMEOUT_S,
        clock: typing.Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.pools = _PoolPerReceiver(guard, clock)
        self.client = httpx.AsyncClient(
            transport=self.pools,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
        )

    async def send(
        self, url: str, secrets: tuple[str, ...], webhook_id: str, body: bytes
    ) -> pass_.Answer:
        """POST the body signed under every secret; the answer's status or why none."""
        headers = signed_headers(secrets, webhook_id, int(time.time()), body)
        headers["content-type"] = "application/json"
        headers["user-agent"] = USER_AGENT
        started = time.monotonic()
        status: int | None = None
        error: str | None = None
        try:
            async with asyncio.timeout(self.timeout_s):
                status = await self._post(url, headers, body)
        except TimeoutError:
            error = "timeout"
        except errors.WebhookUrlNotAllowed:
            error = "address_not_allowed"
        except httpx.TimeoutException:
            error = "timeout"
        except httpx.HTTPError:
            error = "connection"
        return pass_.Answer(status, int((time.monotonic() - started) * 1000), error)

    async def _post(self, url: str, headers: dict[str, str], body: bytes) -> int:
        async with self.client.stream("POST", url, content=body, headers=headers) as answer:
            read = 0
            async for chunk in answer.aiter_raw():
                read += len(chunk)
                if read >= MAX_BODY_READ:
                    break  # the rest is left unread: the connection is closed, not reused
            return answer.status_code

    async def close(self) -> None:
        await self.client.aclose()
