"""How many documents this process renders at once (`EVENTS_DOCUMENT_CONCURRENCY`).

Badge sheets and tickets PDFs are CPU work in worker threads; without a bound, enough of
them at once would leave every core (and the interpreter lock) to the renderers. One
`DocumentBound` per app holds the places: a document takes one from the start of its
rendering until its last byte is sent (a streamed sheet too: the response gives it back,
however it ends). A request waits at most `wait_s` (10 s) for a place, then answers 503
`documents_busy` (`place`), before any byte of the document; a mail's attachment waits its
turn instead (`queued`). Waiters are served in arrival order.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from events_svc import errors

WAIT_S = 10.0  # the longest a request waits for a place before it answers documents_busy


class Slot:
    """One document's place, given back once whatever path ends the document."""

    def __init__(self, give_back: Callable[[], None]) -> None:
        self._give_back: Callable[[], None] | None = give_back

    def release(self) -> None:
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()

    @property
    def held(self) -> bool:
        return self._give_back is not None


class DocumentBound:
    """At most `limit` documents rendered (and sent) at once; `limit` defaults to the
    number of CPU cores."""

    def __init__(self, limit: int | None = None, *, wait_s: float = WAIT_S) -> None:
        self.limit = limit if limit is not None else os.cpu_count() or 1
        if self.limit < 1:
            raise ValueError("a document bound holds at least one place")
        self.wait_s = wait_s
        self.in_use = 0  # places taken now
        self._free = asyncio.Semaphore(self.limit)

    async def place(self) -> Slot:
        """A place within `wait_s`, else 503 `documents_busy` (with `Retry-After`)."""
        try:
            async with asyncio.timeout(self.wait_s):
                await self._free.acquire()
        except TimeoutError:
            raise errors.DocumentsBusy() from None
        return self._taken()

    async def turn(self) -> Slot:
        """A place, however long the wait (a mail's attachment is never refused)."""
        await self._free.acquire()
        return self._taken()

    def _taken(self) -> Slot:
        self.in_use += 1
        return Slot(self._give_back)

    def _give_back(self) -> None:
        self.in_use -= 1
        self._free.release()

    @asynccontextmanager
    async def queued(self) -> AsyncIterator[None]:
        """Hold a place (waited for, never refused) for the body of the block."""
        slot = await self.turn()
        try:
            yield
        finally:
            slot.release()
