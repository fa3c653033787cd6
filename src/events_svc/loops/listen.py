"""The loop's ears: one LISTEN connection for every pass's wake channels.

It runs on a connection of its own (outside the pool) when the database URL is known (the
direct one behind a transaction pooler); a host that hands in only a pool lends it one
pooled connection. When the connection is lost (its server gone: a crash, a failover) it
is noticed as it closes and opened again, backing off (`backoff.LISTEN_LOST`), on the new
primary when the URL names several hosts; each (re)opening calls `opened`, since what was
written while nobody listened is looked at now. Losing and regaining it is logged once
each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from events_svc.backoff import LISTEN_LOST
from events_svc.db import Pool, connect_host_by_host
from events_svc.diagnostics import error_fields
from events_svc.settings import Settings

log = logging.getLogger("events_svc.loops")

Heard = Callable[[str, str], None]  # (channel, payload)


class Listener:
    """LISTENs on `channels` until stopped, calling `heard` for each notice."""

    def __init__(
        self,
        pool: Callable[[], Pool],
        settings: Settings,
        channels: tuple[str, ...],
        heard: Heard,
        opened: Callable[[], None],
    ) -> None:
        self.pool, self.settings = pool, settings
        self.channels, self.heard, self.opened = channels, heard, opened
        self.lost = 0  # consecutive failures to hold the connection
        self.failures = 0
        self.listening = asyncio.Event()

    def _notified(self, _conn: Any, _pid: int, channel: str, payload: str) -> None:
        self.heard(channel, payload)

    async def run(self, stopping: asyncio.Event) -> None:
        """Listen until `stopping` is set; a lost connection is opened again."""
        while not stopping.is_set():
            try:
                await self._serve(stopping)
            except Exception as exc:
                self.listening.clear()
                self.failures += 1
                self.lost += 1
                wait = LISTEN_LOST.seconds(self.lost)
                level = logging.ERROR if self.lost == 1 else logging.DEBUG
                fields = {**error_fields(exc), "attempts": self.lost, "retry_in_s": wait}
                log.log(level, "loop lost its LISTEN connection", extra={"fields": fields})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), timeout=wait)

    async def _connection(self, stack: contextlib.AsyncExitStack) -> Any:
        url = self.settings.session_url
        if url:
            conn = await connect_host_by_host(url, timeout=self.settings.connect_timeout_s)
            stack.push_async_callback(conn.close)
            return conn
        return await stack.enter_async_context(self.pool().acquire())

    async def _serve(self, stopping: asyncio.Event) -> None:
        async with contextlib.AsyncExitStack() as stack:
            conn = await self._connection(stack)
            closed = asyncio.Event()

            def on_close(_: object) -> None:  # its server went away
                closed.set()

            conn.add_termination_listener(on_close)
            stack.callback(conn.remove_termination_listener, on_close)
            for channel in self.channels:
                await conn.add_listener(channel, self._notified)
                stack.push_async_callback(conn.remove_listener, channel, self._notified)
            if self.lost:
                log.info("loop listening again", extra={"fields": {"attempts": self.lost}})
                self.lost = 0
            self.listening.set()
            self.opened()
            ended = asyncio.ensure_future(stopping.wait())
            gone = asyncio.ensure_future(closed.wait())
            try:
                await asyncio.wait({ended, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
                gone.cancel()
            if closed.is_set() and not stopping.is_set():
                raise ConnectionError("the LISTEN connection closed")
