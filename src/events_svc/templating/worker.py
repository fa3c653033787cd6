"""Where templates are checked and compiled: a small pool of worker threads, never the
event loop.

Parsing and compiling a template is pure Python: on the event loop, one hostile template
would hold every other request (`/healthz` included) for as long as it takes. `off_loop`
runs such work in WORKERS threads of its own; the loop keeps serving while they run
(the interpreter switches threads every few milliseconds), and since no more than
WORKERS of them compete with the loop for the interpreter, a burst of template writes
queues here instead of starving it. Renders run elsewhere (`sandbox.render_pairs`, with
their own deadline).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

WORKERS = 2

_P = ParamSpec("_P")
_R = TypeVar("_R")

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="template-check")


async def off_loop(func: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """`func(*args, **kwargs)` in a template worker thread; the caller awaits its result
    (or its exception) while the loop serves others."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, functools.partial(func, *args, **kwargs))
