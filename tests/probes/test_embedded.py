"""The embedded PostgreSQL default and its known hazards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events_svc.embedded import (
    EmbeddedError,
    EmbeddedPostgres,
    clear_stale_pidfile,
    prune_handle_pids,
    scratch_server,
)


def test_a_stale_pidfile_naming_another_process_is_deleted_never_killed(tmp_path: Path):
    pgdata = tmp_path / "pg"
    pgdata.mkdir()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (pgdata / "postmaster.pid").write_text(f"{bystander.pid}\n{pgdata}\n0\n5432\n\n\n\n\n")
        assert clear_stale_pidfile(pgdata) is True
        assert not (pgdata / "postmaster.pid").exists()
        assert bystander.poll() is None  # still alive: never killed
    finally:
        bystander.kill()
        bystander.wait()


def test_leftover_handle_pids_of_dead_processes_are_pruned(tmp_path: Path):
    pgdata = tmp_path / "pg"
    pgdata.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid, os.getppid()]))
    assert prune_handle_pids(pgdata) == [os.getppid()]
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == [os.getppid()]


def test_the_server_survives_restarts_and_a_second_serve_is_refused(tmp_path: Path):
    first = EmbeddedPostgres(tmp_path)
    url = first.start()
    try:
        assert "/events?" in url
        with pytest.raises(EmbeddedError, match="in use by pid"):
            EmbeddedPostgres(tmp_path).start()
    finally:
        first.stop()
    assert not (tmp_path / "pg" / "postmaster.pid").exists()
    # a crash leaves a pidfile naming some other live process: the next start cleans it
    (tmp_path / "pg" / "postmaster.pid").write_text(f"{os.getpid()}\n{tmp_path}\n0\n5432\n\n\n\n\n")
    again = EmbeddedPostgres(tmp_path)
    try:
        assert again.start() == url.split("?")[0] + "?" + url.split("?")[1]
    finally:
        again.stop()


@pytest.mark.parametrize(
    ("name", "value"), [("fsync", "off'; DROP TABLE x; --"), ("fsync = off; x", "on"), ("", "1")]
)
def test_a_scratch_server_refuses_a_setting_that_is_not_plain_words(name: str, value: str):
    with pytest.raises(ValueError, match="not a plain server parameter"):  # noqa: SIM117
        with scratch_server("events-never-", {name: value}):
            pytest.fail("no server may start with such a setting")
