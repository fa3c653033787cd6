"""Where templates are checked and compiled: a small pool of worker threads, never the
event loop.

Parsing and compiling a template is pure Python: on the event loop, one hostile template
would hold every other request (`/healthz` included) for as long as it takes. `off_loop`
runs such work in WORKERS threads of its own; the loop keeps serving while they run
(the interpreter switches threads every few milliseconds), and since no more than
WORKERS of them compete with the loop for the interpreter, a burst of template writes
queues here instead of starving it. Renders run elsewhere (`sandbox.render_pairs`, with
their own deadline).

While a check or compile runs, the cyclic garbage collector is paused (`_collector_paused`):
a large text parses into thousands of nodes, and the collections those allocations set off
would run a full pass over the process's whole heap under the interpreter lock (over
100 ms with the test suite loaded), stalling the loop as surely as the parse itself. The
tree holds no cycles and is freed by reference counting as soon as the check is done, so
nothing is left for the collector to find; a check is bounded (`tree`), so the pause is.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

WORKERS = 2

_P = ParamSpec("_P")
_R = TypeVar("_R")

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="template-check")


_PAUSE = threading.Lock()
_paused = 0  # checks running with the collector paused
_resume = False  # whether the last of them turns it back on (it was on when paused)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic collection while any check runs; the collector as it was afterwards."""
    global _paused, _resume
    with _PAUSE:
        if _paused == 0:
            _resume = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _PAUSE:
            _paused -= 1
            if _paused == 0 and _resume:
                gc.enable()


def _paused_call(func: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    with _collector_paused():
        return func(*args, **kwargs)


async def off_loop(func: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """`func(*args, **kwargs)` in a template worker thread, the collector paused; the
    caller awaits its result (or its exception) while the loop serves others."""
    loop = asyncio.get_running_loop()
    call = functools.partial(_paused_call, func, *args, **kwargs)
    return await loop.run_in_executor(_POOL, call)
