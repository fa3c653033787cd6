"""The test session's one PostgreSQL server under pytest-xdist.

This file sits at the root of `tests/` so that pytest's controlling process loads it
before any worker starts (it loads no probe module): the first worker's start starts the
server (`tests/server.py`), every worker gets its URL, and the server stops after the
last worker has finished.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tests.server import URL_KEY, database_server


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller: start the one server before the first worker, hand it to each."""
    config = node.config
    url = getattr(config, "_events_admin_url", None)
    if url is None:
        stack = contextlib.ExitStack()
        config.add_cleanup(stack.close)  # after every worker has finished
        url = config._events_admin_url = stack.enter_context(database_server())
    node.workerinput[URL_KEY] = url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long probes (`@pytest.mark.long`) first, the rest in their order: under
    pytest-xdist's work stealing a long probe started last would leave one worker running
    it alone at the end of the run."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
