"""The client address of the per-client windows, through real `serve` processes: the
socket peer unless `EVENT_TRUSTED_PROXY` is on AND the peer is one of
`EVENT_TRUSTED_PROXY_IPS`; then the right-most `X-Forwarded-For` hop that is not a listed
proxy. The HTTP server never rewrites the peer from a header by itself.

Each process serves with `EVENT_RATE_LIMIT_IP=5/minute`; a request is a GET of an event
page (an unknown id: 404, counted like any request of the client)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from events_svc.settings import LOOPBACK_PROXIES, Settings, SettingsError
from events_svc.throttle import client_address
from tests.probes.helpers import free_port, start_serve, stop_all, tails, wait_ready

WINDOW = 5
SECRET = "client-address-secret-0123"


@contextmanager
def served(db_url: str, logs: Path, **settings: dict[str, str]) -> Iterator[dict[str, str]]:
    """One `serve` process per named environment, started side by side; name -> base."""
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    bases: dict[str, str] = {}
    with ExitStack() as files:
        try:
            for name, given in settings.items():
                own = dict(given)
                args = own.pop("args", "").split()
                port = free_port()
                out = files.enter_context((logs / f"{name}.log").open("w"))
                base = f"http://127.0.0.1:{port}"
                env = {
                    "EVENT_SCHEDULER_ENABLED": "false",
                    "EVENT_INTAKE_PUBLIC": "true",
                    "EVENT_CAPABILITY_SECRET": SECRET,
                    "EVENT_RATE_LIMIT_IP": f"{WINDOW}/minute",
                    "EVENTS_POOL_MAX": "2",
                    "EVENTS_LOG_LEVEL": "WARNING",
                    **own,
                }
                proc = start_serve(db_url, port, *args, output=out.fileno(), **env)
                procs.append((base, proc))
                bases[name] = base
            for base, proc in procs:
                try:
                    wait_ready(proc, base, timeout=90)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: {tails(logs)}") from None
            yield bases
        finally:
            stop_all(procs)


def statuses(base: str, forwarded: list[str | None]) -> list[int]:
    """GET an event page once per entry, with that `X-Forwarded-For` (None: without)."""
    page = f"{base}/api/v1/event/public/events/{uuid.uuid4()}"
    codes = []
    with httpx.Client(timeout=10) as http:
        for hop in forwarded:
            headers = {"X-Forwarded-For": hop} if hop is not None else {}
            codes.append(http.get(page, headers=headers).status_code)
    return codes


def rotating(n: int) -> list[str | None]:
    return [f"198.51.100.{i + 1}" for i in range(n)]


@pytest.mark.long
def test_forwarding_headers_name_the_client_only_from_a_listed_proxy(db_url: str, tmp_path: Path):
    runs = {
        "off": {},  # EVENT_TRUSTED_PROXY=false (default)
        "loopback": {"EVENT_TRUSTED_PROXY": "true"},  # default list: 127.0.0.1, ::1
        "elsewhere": {"EVENT_TRUSTED_PROXY": "true", "EVENT_TRUSTED_PROXY_IPS": "10.0.0.0/8"},
        "workers": {"args": "--workers 2"},  # off, through uvicorn's worker processes
    }
    with served(db_url, tmp_path, **runs) as bases:
        # off: a rotating X-Forwarded-For (and X-Real-IP, Forwarded) changes nothing; the
        # peer's window runs out after WINDOW requests
        with httpx.Client(timeout=10) as http:
            page = f"{bases['off']}/api/v1/event/public/events/{uuid.uuid4()}"
            codes = [
                http.get(
                    page,
                    headers={
                        "X-Forwarded-For": f"203.0.113.{i}",
                        "X-Real-IP": f"203.0.113.{i}",
                        "Forwarded": f"for=203.0.113.{i}",
                    },
                ).status_code
                for i in range(WINDOW + 3)
            ]
        assert codes == [404] * WINDOW + [429] * 3
        # a listed proxy (the loopback peer): each forwarded client has its own window
        assert statuses(bases["loopback"], rotating(WINDOW + 3)) == [404] * (WINDOW + 3)
        # ... the right-most hop is the client: a forged left-hand hop changes nothing
        forged = [f"192.0.2.{i}, 203.0.113.7" for i in range(WINDOW + 1)]
        assert statuses(bases["loopback"], forged) == [404] * WINDOW + [429]
        # ... listed hops are skipped: the client behind two local proxies
        chained = [f"192.0.2.{i}, 203.0.113.8, 127.0.0.1" for i in range(WINDOW + 1)]
        assert statuses(bases["loopback"], chained) == [404] * WINDOW + [429]
        # ... without the header, the peer itself
        assert statuses(bases["loopback"], [None] * (WINDOW + 1)) == [404] * WINDOW + [429]
        # ... several X-Forwarded-For lines are one list, read from the right
        with httpx.Client(timeout=10) as http:
            page = f"{bases['loopback']}/api/v1/event/public/events/{uuid.uuid4()}"
            lines = [
                http.get(
                    page,
                    headers=[
                        ("X-Forwarded-For", f"192.0.2.{i}"),
                        ("X-Forwarded-For", "203.0.113.9"),
                    ],
                ).status_code
                for i in range(WINDOW + 1)
            ]
        assert lines == [404] * WINDOW + [429]
        # a peer that is not listed is its peer, whatever its headers say
        assert statuses(bases["elsewhere"], rotating(WINDOW + 2)) == [404] * WINDOW + [429] * 2
        # off, through uvicorn's worker processes too (each keeps its own windows: one
        # connection is one worker's)
        codes = statuses(bases["workers"], rotating(2 * WINDOW + 2))
        assert codes[:WINDOW] == [404] * WINDOW and 429 in codes, codes


def test_the_right_most_unlisted_hop_is_the_client():
    proxies = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::1/128"))
    cases = [
        # (peer, X-Forwarded-For, trusted) -> client
        (("10.1.1.1", "203.0.113.5", False), "10.1.1.1"),
        (("172.16.0.9", "203.0.113.5", True), "172.16.0.9"),  # peer not listed
        (("10.1.1.1", "", True), "10.1.1.1"),
        (("10.1.1.1", "192.0.2.1, 203.0.113.5", True), "203.0.113.5"),
        (("10.1.1.1", "192.0.2.1, 203.0.113.5, 10.2.2.2", True), "203.0.113.5"),
        (("::1", "2001:db8::7, ::1", True), "2001:db8::7"),
        (("10.1.1.1", "10.3.3.3, 10.2.2.2", True), "10.3.3.3"),  # all listed: the left-most
        (("10.1.1.1", "not-an-address", True), "not-an-address"),
    ]
    for (peer, header, trusted), client in cases:
        assert client_address(peer, header, trusted, proxies) == client, (peer, header)


def test_the_proxy_list_is_read_only_with_trusted_proxy_and_refuses_a_bad_entry():
    s = Settings.from_env({"EVENT_TRUSTED_PROXY": "true"})
    assert s.trusted_proxy_ips == LOOPBACK_PROXIES
    s = Settings.from_env(
        {"EVENT_TRUSTED_PROXY": "true", "EVENT_TRUSTED_PROXY_IPS": "10.0.0.1, 2001:db8::/32"}
    )
    assert [str(n) for n in s.trusted_proxy_ips] == ["10.0.0.1/32", "2001:db8::/32"]
    # off: the list is not read (a bad value there stops nothing)
    assert Settings.from_env({"EVENT_TRUSTED_PROXY_IPS": "nonsense"}).trusted_proxy is False
    with pytest.raises(SettingsError, match="EVENT_TRUSTED_PROXY_IPS"):
        Settings.from_env({"EVENT_TRUSTED_PROXY": "true", "EVENT_TRUSTED_PROXY_IPS": "proxy.lan"})


@pytest.mark.parametrize(
    ("var", "url"),
    [
        ("EVENTS_SMS_GATEWAY_URL", "https://gw-user:gw-Pa55word@sms.example/send"),
        ("EVENTS_SMS_GATEWAY_URL", "https://gw-user@sms.example/send"),
        ("EVENT_LEAD_WEBHOOK_URL", "https://:s3cret-token@leads.example/in"),
    ],
)
def test_a_credential_in_an_outgoing_url_stops_every_command(var: str, url: str):
    env = {
        **os.environ,
        var: url,
        "EVENTS_SMS_GATEWAY_SECRET": "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY",
        "EVENT_LEAD_WEBHOOK_SECRET": "lead-secret-0123456789",
        "EVENTS_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",  # never reached
    }
    for command in (["serve"], ["migrate"], ["scheduler", "run-once"]):
        r = subprocess.run(
            [sys.executable, "-m", "events_svc", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 2, (command, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and var in lines[0], lines
        for secret in ("gw-user", "Pa55word", "s3cret-token"):
            assert secret not in r.stderr + r.stdout
