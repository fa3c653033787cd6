"""Throttles of the public routes: fixed windows from `limits`.

Keys: the client IP, the capability (or event id) in the path, and on intake each
normalised attendee email. The client IP is the socket peer, or the RIGHTMOST
`X-Forwarded-For` hop when `EVENT_TRUSTED_PROXY` is true (the hop our own proxy
appended; the left-hand hops are the client's to forge). Storage is in-process
(`memory://`) unless `EVENT_RATE_LIMIT_STORAGE` names a Redis that every
instance shares. When that Redis is unreachable the throttle degrades to
per-process windows (logged, retried every 30 s): requests are still answered,
never with a 500.
"""

from __future__ import annotations

import hashlib
import logging
import time

from limits import RateLimitItem, parse
from limits.aio.strategies import FixedWindowRateLimiter
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from starlette.requests import Request

from events_svc import errors
from events_svc.settings import Settings, SettingsError

log = logging.getLogger("events_svc.throttle")
_RETRY_SHARED_S = 30


class Throttle:
    """The named limits of the public surface."""

    def __init__(self, settings: Settings) -> None:
        self.trusted_proxy = settings.trusted_proxy
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

    def client_ip(self, request: Request) -> str:
        if self.trusted_proxy:
            forwarded = request.headers.get("x-forwarded-for", "")
            hops = [h.strip() for h in forwarded.split(",") if h.strip()]
            if hops:
                return hops[-1]
        return request.client.host if request.client else "unknown"

    async def _limiter(self, item: RateLimitItem, *key: str) -> tuple[FixedWindowRateLimiter, bool]:
        """(the limiter that counted this hit, whether the hit is allowed)."""
        if time.monotonic() >= self.degraded_until:
            try:
                return self.shared, await self.shared.hit(item, *key)
            except Exception:  # an unreachable store must never turn into a 500
                self.degraded_until = time.monotonic() + _RETRY_SHARED_S
                log.warning(
                    "throttle store unreachable: using per-process windows for %ds", _RETRY_SHARED_S
                )
        return self.local, await self.local.hit(item, *key)

    async def _hit(self, item: RateLimitItem, *key: str) -> None:
        limiter, allowed = await self._limiter(item, *key)
        if not allowed:
            stats = await limiter.get_window_stats(item, *key)
            retry = max(1, int(stats.reset_time - time.time() + 0.999))
            raise errors.RateLimited(headers={"Retry-After": str(retry)}, retry_after=retry)

    async def check(self, request: Request, scope: str, capability: str) -> None:
        """Count this request against its IP and its capability (429 when over)."""
        await self._hit(self.per_ip, scope, "ip", self.client_ip(request))
        digest = hashlib.sha256(capability.encode()).hexdigest()[:32]  # never store tokens
        await self._hit(self.per_capability, scope, "cap", digest)

    async def check_email(self, email: str) -> None:
        normalised = email.strip().lower()
        digest = hashlib.sha256(normalised.encode()).hexdigest()[:32]  # never store emails
        await self._hit(self.per_email, "intake", "email", digest)

    async def check_actor(self, scope: str, actor_id: str) -> None:
        """Count an authenticated actor's request (the desk's scans: 429 when over)."""
        digest = hashlib.sha256(actor_id.encode()).hexdigest()[:32]
        await self._hit(self.per_desk_actor, scope, "actor", digest)
