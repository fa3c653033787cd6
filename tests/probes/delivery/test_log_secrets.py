"""A real `events-svc serve` process at `EVENTS_LOG_LEVEL=INFO` sends a mail (SMTP relay
with AUTH over STARTTLS), an sms (a gateway whose URL holds a secret path segment and a
`?key=`), a webhook (an endpoint whose URL holds a secret path segment and query) and a
lead (a sink whose URL holds the same kinds of secrets), each failing once and then sent:
no line of its output (stdout and stderr, the service's lines and every library's) holds
any of those secrets, the gateway's, the lead sink's or the webhook's signing secret, the
capability secret, the SMTP password or user, the bearer token or a body's marker; the
failure lines name the channel and the receiver's host and port.

With `--workers 2` the same holds: each worker process configures its log like `serve`.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import secrets
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import trustme

from events_svc.observability import QUIET_LIBRARIES, JsonFormatter, host_of, quiet_libraries
from events_svc.verbs.tokens import create_token
from tests.probes.delivery.helpers import MAIL_FROM, queue_mail, queue_sms, row
from tests.probes.delivery.sink import ca_file, smtp_sink
from tests.probes.helpers import (
    API,
    event_body,
    free_port,
    start_serve,
    stop_all,
    until_listening,
    until_true,
    wait_ready,
)


def _secret(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


@dataclass
class Partner:
    """An HTTP partner on loopback: records each request's path (with its query) and
    answers 500 to the first one, then 200 (`{"lead_id": ...}`: a lead sink's create)."""

    port: int = 0
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def got(self) -> int:
        with self.lock:
            return len(self.paths)


@contextmanager
def partner() -> Iterator[Partner]:
    state = Partner()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            with state.lock:
                state.paths.append(self.path)
                first = len(state.paths) == 1
            body = b'{"error":"later"}' if first else b'{"lead_id":"lead-1"}'
            self.send_response(500 if first else 200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


async def _until_state(pool: asyncpg.Pool, row_id: uuid.UUID, state: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        found = await row(pool, row_id)
        return found if found["state"] == state else None

    found: dict[str, Any] = await until_true(reached, 15)
    return found


def _lines(text: str, message: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for line in text.splitlines()
        if line.startswith("{") and f'"message": "{message}"' in line
    ]


@pytest.mark.parametrize("workers", [1, 2])
async def test_no_log_line_holds_an_outgoing_requests_path_query_or_any_secret(
    db_url: str, pool: asyncpg.Pool, tmp_path: Path, workers: int
):
    smtp_user, smtp_password = _secret("u"), _secret("pw-")
    gw_segment, gw_key = _secret("gwpath"), _secret("gwkey")
    gw_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    lead_segment, lead_key, lead_secret = _secret("lpath"), _secret("lkey"), _secret("lsec")
    hook_segment, hook_key = _secret("hpath"), _secret("hkey")
    capability_secret = _secret("cap")
    mail_marker, sms_marker = _secret("mailbody"), _secret("smsbody")
    token, _ = await create_token(pool, "logs", ["*"], None, datetime.now(UTC))
    ca = trustme.CA()
    with (
        smtp_sink(tls=ca, auth=(smtp_user, smtp_password)) as (relay, smtp_port),
        partner() as gateway,
        partner() as sink,
        partner() as hook,
    ):
        relay.script = ["451 4.3.0 try later"]  # the first mail fails once
        env = {
            "EVENTS_LOG_LEVEL": "INFO",
            "EVENT_SCHEDULER_ENABLED": "true",
            "EVENTS_SMTP_URL": f"smtp://{smtp_user}:{smtp_password}@localhost:{smtp_port}",
            "EVENTS_SMTP_CA_FILE": str(ca_file(ca, tmp_path)),
            "EVENTS_MAIL_FROM": MAIL_FROM,
            "EVENTS_SMTP_RATE": "0",
            "EVENTS_SMTP_TIMEOUT_S": "5",
            "EVENTS_SMS_GATEWAY_URL": (
                f"http://127.0.0.1:{gateway.port}/sms/{gw_segment}?key={gw_key}"
            ),
            "EVENTS_SMS_GATEWAY_SECRET": gw_secret,
            "EVENT_LEAD_WEBHOOK_URL": (
                f"http://127.0.0.1:{sink.port}/leads/{lead_segment}?apikey={lead_key}"
            ),
            "EVENT_LEAD_WEBHOOK_SECRET": lead_secret,
            "EVENT_CAPABILITY_SECRET": capability_secret,
            "EVENTS_WEBHOOK_ALLOW_PRIVATE": "true",
            "EVENTS_POOL_MAX": "6",
        }
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log_path = tmp_path / "serve.log"
        with log_path.open("w") as out:
            proc = start_serve(db_url, port, "--workers", str(workers), output=out.fileno(), **env)
            procs = [(base, proc)]
            try:
                wait_ready(proc, base, 90)
                await until_listening(pool, workers)
                headers = {"Authorization": f"Bearer {token}"}
                async with httpx.AsyncClient(
                    base_url=f"{base}{API}", headers=headers, timeout=30
                ) as api:
                    # a webhook endpoint whose URL holds secrets; a ping to it fails once
                    hook_url = f"http://127.0.0.1:{hook.port}/hook/{hook_segment}?token={hook_key}"
                    body = {"url": hook_url, "event_types": ["registration.created"]}
                    r = await api.post("/admin/webhooks", json=body)
                    assert r.status_code == 201, r.text
                    endpoint = r.json()
                    hook_secret = endpoint["secret"]
                    r = await api.post(f"/admin/webhooks/{endpoint['id']}/ping")
                    assert r.status_code == 202, r.text
                    await until_true(lambda: hook.got() >= 1, 15)

                    # a lead rule and a registration it admits: the sink fails once
                    event = (await api.post("/admin/events", json=event_body())).json()
                    rule = {
                        "name": "Leads",
                        "predicates": [{"axis": "event", "value_ids": [event["id"]]}],
                    }
                    assert (await api.post("/admin/lead-rules", json=rule)).status_code == 201
                    guest = {"event_id": event["id"], "name": "Ada", "email": "ada@example.org"}
                    r = await api.post("/admin/registrations", json=guest)
                    assert r.status_code == 201, r.text
                    await until_true(lambda: sink.got() >= 1, 15)

                    # a mail and an sms: each fails once
                    [mail] = await queue_mail(pool, body=f"Hello {mail_marker}")
                    sms = await queue_sms(pool, body=f"See you {sms_marker}")
                    await _until_state(pool, mail, "retrying")
                    await _until_state(pool, sms, "retrying")

                    # then each is sent: the outbox's retries, the lead requests' run, the
                    # webhook's redelivery
                    for message in (mail, sms):
                        r = await api.post(f"/admin/outbox/{message}/retry")
                        assert r.status_code == 200, r.text
                    await _until_state(pool, mail, "sent")
                    await _until_state(pool, sms, "sent")

                    async def parked() -> bool:
                        r = await api.get("/admin/lead-requests", params={"limit": 10})
                        return any(i["attempts"] > 0 for i in r.json()["items"])

                    await until_true(parked, 15)
                    r = await api.post("/admin/lead-requests/run")
                    assert r.status_code == 200 and r.json()["finished"] >= 1, r.text

                    async def attempts() -> list[dict[str, Any]]:
                        r = await api.get(f"/admin/webhooks/{endpoint['id']}/deliveries")
                        return list(r.json()["items"])

                    async def failed() -> dict[str, Any] | None:
                        found = [a for a in await attempts() if a["response_status"] == 500]
                        return found[0] if found else None

                    first = await until_true(failed, 15)
                    r = await api.post(f"/admin/webhook-deliveries/{first['id']}/redeliver")
                    assert r.status_code == 202, r.text

                    async def succeeded() -> bool:
                        return any(
                            a["state"] == "succeeded" and a["message_id"] == first["message_id"]
                            for a in await attempts()
                        )

                    await until_true(succeeded, 15)
            finally:
                stop_all(procs)

    assert len(relay.accepted) == 1 and mail_marker in relay.accepted[0].as_string()
    # every partner got its requests as configured, query included
    assert gateway.paths == [f"/sms/{gw_segment}?key={gw_key}"] * 2
    assert sink.paths[0] == f"/leads/{lead_segment}?apikey={lead_key}" and len(sink.paths) >= 2
    assert set(hook.paths) == {f"/hook/{hook_segment}?token={hook_key}"}

    said = log_path.read_text()
    assert "events-svc: serving on" in said  # the whole output was read
    forbidden = {
        "the SMTP password": smtp_password,
        "the SMTP user": smtp_user,
        "the gateway's path segment": gw_segment,
        "the gateway's query key": gw_key,
        "the gateway's secret": gw_secret,
        "the gateway's secret (its key)": gw_secret.removeprefix("whsec_"),
        "the lead sink's path segment": lead_segment,
        "the lead sink's query key": lead_key,
        "the lead sink's secret": lead_secret,
        "the webhook's path segment": hook_segment,
        "the webhook's query value": hook_key,
        "the webhook's signing secret": hook_secret,
        "the webhook's signing secret (its key)": hook_secret.removeprefix("whsec_"),
        "the capability secret": capability_secret,
        "the bearer token": token,
        "the mail's body": mail_marker,
        "the sms's body": sms_marker,
    }
    for number, line in enumerate(said.splitlines(), 1):
        for what, value in forbidden.items():
            assert value not in line, f"line {number} holds {what}: {line}"
    assert not re.search(r"/(sms|leads|hook)/", said), "a request's path is in the log"
    # the client libraries say nothing at INFO (not even a line cut to its host)
    for library in ("httpx", "httpcore", "hpack", "h11", "aiosmtplib"):
        assert f'"logger": "{library}' not in said, library

    # the failure lines name the channel, the host and port, and the outcome
    failed_sends = _lines(said, "outbox delivery attempt failed")
    by_channel = {line["channel"]: line for line in failed_sends}
    assert by_channel["mail"]["host"] == f"localhost:{smtp_port}", failed_sends
    assert by_channel["mail"]["error_kind"] == "temporary"
    assert by_channel["sms"]["host"] == f"127.0.0.1:{gateway.port}", failed_sends
    assert by_channel["sms"]["code"] == 500
    [paused] = _lines(said, "outbox channel paused: its relay is down")
    assert (paused["channel"], paused["host"]) == ("sms", f"127.0.0.1:{gateway.port}")
    [webhook] = _lines(said, "webhook delivery attempt failed")
    assert (webhook["channel"], webhook["host"]) == ("webhook", f"127.0.0.1:{hook.port}")
    assert webhook["status"] == 500
    [lead] = _lines(said, "lead request parked")
    assert (lead["channel"], lead["host"]) == ("lead_sink", f"127.0.0.1:{sink.port}")
    assert lead["reason"] == "webhook answered 500"


def test_a_line_names_no_url_path_query_or_userinfo_and_no_exception_message():
    """Whatever a library writes (its message, an exception it carries), the JSON line
    keeps a URL's scheme, host and port only, and an exception's types and frames."""
    url = "https://U53R:PA55@gw.example.org:8443/send/S3GMENT?key=K3Y#FR4G"
    try:
        raise httpx.ConnectError(f"cannot reach {url}")
    except httpx.ConnectError:
        record = logging.LogRecord(
            "httpx", logging.ERROR, __file__, 1, "HTTP Request: POST %s failed", (url,), None
        )
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    for secret in ("U53R", "PA55", "S3GMENT", "K3Y", "FR4G", "cannot reach"):
        assert secret not in line, line
    doc = json.loads(line)
    assert doc["message"] == "HTTP Request: POST https://gw.example.org:8443 failed"
    assert doc["error_type"] == "ConnectError" and doc["trace"]
    assert host_of(url) == "gw.example.org:8443"
    assert host_of("http://[::1]/hook?token=t") == "[::1]:80"


def test_the_client_libraries_log_warnings_only():
    before = {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    try:
        for name in QUIET_LIBRARIES:
            logging.getLogger(name).setLevel(logging.DEBUG)
        quiet_libraries()
        assert {"httpx", "httpcore", "hpack", "h11", "aiosmtplib"} <= set(QUIET_LIBRARIES)
        for name in (*QUIET_LIBRARIES, "httpcore.http11", "httpcore.connection"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
    finally:
        for name, level in before.items():
            logging.getLogger(name).setLevel(level)
