"""Throttles of the public routes: fixed windows from `limits`.

The rule: no window that every client shares can be filled by one client. So each
window is either a client's own or counts only what the service ACCEPTED:

- per client IP, every public request (refused ones too: they are that client's);
- per link, for a link that is one person's (a private intake link, a my-tickets
  link): every request on it, whoever sends it;
- per (link, client IP) for a calendar link: it opens a published event's calendar,
  a public document whose link is shared (an "add to calendar" button, many
  subscribed calendar clients), so one client hammering it fills only its own window;
- per normalised intake email and, for the intake by event id, a safety ceiling per
  event (`EVENT_RATE_LIMIT_EVENT_INTAKE`): these count ACCEPTED registrations only.
  `admit_intake` tests the windows' remaining count before the register verb (429 when the
  registration would go over it: refused before anything is written) and
  `count_accepted` hits it after the verb committed. Between the test and the hit
  several requests in flight may each pass the same test: the window then overshoots
  by at most the registrations in flight (bounded by the database pool of each
  instance); it is a ceiling against floods, the exact quota is the seat count, which
  the verb checks under row locks.

The client IP is the socket peer (`client_address`), whatever the request's headers
say, unless `EVENT_TRUSTED_PROXY` is true AND the peer is one of
`EVENT_TRUSTED_PROXY_IPS`: then `X-Forwarded-For` is walked from the right, skipping
listed proxies, and the first hop that is not listed is the client (the hops left of it
are the client's to forge and are never read); when every hop is listed, the left-most.
`X-Real-IP` and `Forwarded` are never read. Storage is in-process (`memory://`) unless
`EVENT_RATE_LIMIT_STORAGE` names a Redis that every instance shares. When that Redis
is unreachable the throttle degrades to per-process windows (logged, retried every
30 s): requests are still answered, never with a 500. Keys hold digests, never a
token or an email.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar
from uuid import UUID

from limits import RateLimitItem, parse
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from starlette.requests import Request

from events_svc import errors
from events_svc.backoff import SHARED_WINDOWS
from events_svc.settings import Network, Settings, SettingsError

log = logging.getLogger("events_svc.throttle")
T = TypeVar("T")


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:32]


def _email_key(email: str) -> str:
    return _digest(email.strip().lower())  # never store emails


MAX_HOPS = 32  # X-Forwarded-For hops looked at, from the right


def _listed(address: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]"))
    except ValueError:
        return False  # not an address: never a trusted proxy
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 on a dual-stack socket is 127.0.0.1
    return any(ip in network for network in proxies)


def client_address(
    peer: str, forwarded_for: str, trusted: bool, proxies: tuple[Network, ...]
) -> str:
    """The client's address: the socket `peer`, unless forwarding is `trusted` and the
    peer is one of `proxies`; then the right-most `X-Forwarded-For` hop that is not a
    listed proxy (the left-most hop when all are). A hop is read as given (bounded):
    only a listed proxy could have written it."""
    if not trusted or not _listed(peer, proxies):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",")[-MAX_HOPS:] if h.strip()]
    for hop in reversed(hops):
        if not _listed(hop, proxies):
            return hop[:64]
    return hops[0][:64] if hops else peer


class Throttle:
    """The named limits of the public surface."""

    def __init__(self, settings: Settings) -> None:
        self.trusted_proxy = settings.trusted_proxy
        self.trusted_proxy_ips = settings.trusted_proxy_ips
        try:
            uri = "async+" + settings.rate_limit_storage
            # redis-py's asyncio client (the `redis` extra); memory:// takes no options
            options = {"implementation": "redispy"} if "redis" in uri else {}
            storage = storage_from_string(uri, **options)
        except ConfigurationError:
            raise SettingsError(
                "EVENT_RATE_LIMIT_STORAGE names Redis: install the redis extra "
                "(pip install 'events-svc[redis]')"
            ) from None
        self.shared = FixedWindowRateLimiter(storage)
        # when the shared store is unreachable: this process's own windows, retried later
        self.local = FixedWindowRateLimiter(storage_from_string("async+memory://"))
        self.degraded_until = 0.0
        self.per_ip = parse(settings.rate_limit_ip)
        self.per_capability = parse(settings.rate_limit_capability)
        self.per_email = parse(settings.rate_limit_email)
        self.per_desk_actor = parse(settings.rate_limit_desk)
        self.per_event_intake = parse(settings.rate_limit_event_intake)

    def client_ip(self, request: Request) -> str:
        peer = request.client.host if request.client else "unknown"
        # every X-Forwarded-For header, as one list (a proxy may append its own header)
        forwarded = ",".join(request.headers.getlist("x-forwarded-for"))
        return client_address(peer, forwarded, self.trusted_proxy, self.trusted_proxy_ips)

    async def _run(
        self, op: Callable[[FixedWindowRateLimiter], Awaitable[T]]
    ) -> tuple[FixedWindowRateLimiter, T]:
        """(the limiter that answered, its answer): the shared store, or this process's
        own windows while the shared one is unreachable."""
        if time.monotonic() >= self.degraded_until:
            try:
                return self.shared, await op(self.shared)
            except Exception:  # an unreachable store must never turn into a 500
                self.degraded_until = time.monotonic() + SHARED_WINDOWS.seconds(1)
                log.warning(
                    "throttle store unreachable: using per-process windows for %ds",
                    SHARED_WINDOWS.seconds(1),
                )
        return self.local, await op(self.local)

    async def _refused(
        self, limiter: FixedWindowRateLimiter, item: RateLimitItem, *key: str
    ) -> errors.RateLimited:
        try:
            stats = await limiter.get_window_stats(item, *key)
            retry = max(1, int(stats.reset_time - time.time() + 0.999))
        except Exception:  # the store went away between the two calls
            retry = item.get_expiry()
        return errors.RateLimited(headers={"Retry-After": str(retry)}, retry_after=retry)

    async def _hit(self, item: RateLimitItem, *key: str) -> None:
        """Count this request (429 when the window is over)."""
        limiter, allowed = await self._run(lambda lim: lim.hit(item, *key))
        if not allowed:
            raise await self._refused(limiter, item, *key)

    async def _admit(self, item: RateLimitItem, cost: int, *key: str) -> None:
        """429 when `cost` more would go over the window; counts nothing."""
        limiter, allowed = await self._run(lambda lim: lim.test(item, *key, cost=cost))
        if not allowed:
            raise await self._refused(limiter, item, *key)

    async def _count(self, item: RateLimitItem, cost: int, *key: str) -> None:
        """Count what was accepted; never refuses (the registration is already written)."""
        await self._run(lambda lim: lim.hit(item, *key, cost=cost))

    async def check_client(self, request: Request, scope: str) -> None:
        """Count this request against its client IP (429 when over)."""
        await self._hit(self.per_ip, scope, "ip", self.client_ip(request))

    async def check_link(self, request: Request, scope: str, capability: str) -> None:
        """Count this request against its client IP and its link, a link that is one
        person's: every request on it counts, whoever sends it."""
        await self.check_client(request, scope)
        await self._hit(self.per_capability, scope, "cap", _digest(capability))

    async def check_public_link(self, request: Request, scope: str, capability: str) -> None:
        """Count this request against its client IP and against its link FOR THIS CLIENT:
        the link opens a public document and is shared, so one client cannot exhaust it
        for the others."""
        ip = self.client_ip(request)
        await self.check_client(request, scope)
        await self._hit(self.per_capability, scope, "cap-ip", _digest(capability), ip)

    async def admit_intake(
        self, emails: Iterable[str], event_id: UUID | None, registrations: int
    ) -> None:
        """429 when these registrations would take an email over its window or, for an
        intake by event id, the event's public intake over its safety ceiling (both count
        accepted registrations: `count_accepted`)."""
        for key, n in sorted(Counter(_email_key(e) for e in emails).items()):
            await self._admit(self.per_email, n, "intake", "email", key)
        if event_id is not None:
            await self._admit(
                self.per_event_intake, registrations, "intake", "event", str(event_id)
            )

    async def count_accepted(
        self, emails: Iterable[str], event_id: UUID | None, registrations: int
    ) -> None:
        """After the verb committed: count the accepted registrations against their
        emails and, for an intake by event id, against the event's ceiling."""
        for key, n in sorted(Counter(_email_key(e) for e in emails).items()):
            await self._count(self.per_email, n, "intake", "email", key)
        if event_id is not None:
            await self._count(
                self.per_event_intake, registrations, "intake", "event", str(event_id)
            )

    async def check_actor(self, scope: str, actor_id: str) -> None:
        """Count an authenticated actor's request (the desk's scans: 429 when over)."""
        await self._hit(self.per_desk_actor, scope, "actor", _digest(actor_id))
