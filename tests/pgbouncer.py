"""A real PgBouncer (Debian's `pgbouncer`, installed by `make test`'s setup step) in
transaction pooling, in front of the session's PostgreSQL server, for the probes of
`EVENTS_DB_POOLER=transaction`.

It listens on a free loopback port, accepts every database of the server under the
superuser (`auth_type = trust`: a throwaway, loopback-only bouncer), and keeps a few
server connections per database (`SERVER_POOL`), so that many more clients than server
sessions share them: two transactions of one client run on different sessions. Run as
root (a container's test run), it drops to the user that owns the server's folder, as
the embedded server itself does.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

SERVER_POOL = 3


def binary() -> str:
    """The pgbouncer program; a clear failure when missing (`make test` installs it)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/sbin")
    if not found:
        raise RuntimeError(
            "pgbouncer is not installed: the transaction-pooling probes need it "
            "(apt-get install -y --no-install-recommends pgbouncer; `make test` does this)"
        )
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(admin_url: str) -> tuple[str, int, str]:
    """(host or socket folder, port, superuser) of the server an admin URL names."""
    parts = urlsplit(admin_url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    return host, parts.port or int(query.get("port", ["5432"])[0]), parts.username or "postgres"


@contextlib.contextmanager
def pgbouncer(admin_url: str, report: Path | None = None) -> Iterator[str]:
    """A running PgBouncer in transaction mode; yields its URL with `{database}` to fill.
    With `report`, a line with the number of client logins it served is appended to that
    file when it stops (what a run through it proves it went through it with)."""
    host, port, user = _server(admin_url)
    listen = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="events-pgbouncer-"))
    config = folder / "pgbouncer.ini"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    config.write_text(
        "[databases]\n"
        f"* = host={host} port={port}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {listen}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {SERVER_POOL}\n"
        "max_client_conn = 1000\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    argv = [binary(), str(config)]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        owner = pwd.getpwuid(Path(host).stat().st_uid).pw_name if host.startswith("/") else None
        owner = owner if owner and owner != "root" else "nobody"
        os.chmod(folder, 0o755)
        for name in ("pgbouncer.ini", "users.txt"):
            os.chmod(folder / name, 0o644)
        (folder / "pgbouncer.log").touch()
        shutil.chown(folder / "pgbouncer.log", user=owner)
        argv[1:1] = ["-u", owner]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", listen), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log = folder / "pgbouncer.log"
                said = log.read_text()[-1000:] if log.exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {said}")
            time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{listen}/{{database}}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if report is not None:
            log = folder / "pgbouncer.log"
            logins = log.read_text().count("login attempt") if log.exists() else 0
            with report.open("a") as out:
                out.write(f"{logins}\n")
        shutil.rmtree(folder, ignore_errors=True)
