"""The sms gateway against a real HTTP receiver on loopback: the signed POST verifies with
the Standard Webhooks reference verifier, and each kind of answer makes its state."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import asyncpg
from standardwebhooks.webhooks import Webhook

from events_svc.settings import Settings
from tests.probes.delivery.helpers import drainer, due_now, now, queue_mail, queue_sms, row
from tests.probes.helpers import free_port

SECRET = "whsec_" + base64.b64encode(b"gateway-secret-of-32-bytes-long!").decode()


@dataclasses.dataclass
class Received:
    headers: dict[str, str]
    body: bytes


class Gateway:
    """What the receiver saw, and the script of its answers (a status, or "stall")."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self.script: list[str] = []
        self.lock = threading.Lock()


@contextlib.contextmanager
def gateway() -> Iterator[tuple[Gateway, str]]:
    """A running receiver on 127.0.0.1; its state and its URL."""
    state = Gateway()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with state.lock:
                state.received.append(
                    Received({k.lower(): v for k, v in self.headers.items()}, body)
                )
                action = state.script.pop(0) if state.script else "200"
            if action == "stall":
                time.sleep(3)
                action = "200"
            self.send_response(int(action))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}/sms"
    finally:
        server.shutdown()
        server.server_close()


def sms_settings(settings: Settings, url: str, **over: Any) -> Settings:
    return dataclasses.replace(
        settings, sms_gateway_url=url, sms_gateway_secret=SECRET, sms_gateway_timeout_s=1, **over
    )


def _error(found: dict[str, Any]) -> dict[str, Any]:
    raw = found["last_error"]
    return json.loads(raw) if isinstance(raw, str) else raw


async def test_a_text_message_is_posted_signed_and_verifies(pool: asyncpg.Pool, settings: Settings):
    row_id = await queue_sms(pool, phone="+32470000001", body="Zoë, see you at 9 — Café Ω")
    with gateway() as (seen, url):
        summary = await drainer(pool, sms_settings(settings, url)).drain()
    assert (summary.claimed, summary.sent) == (1, 1)
    [request] = seen.received
    found = await row(pool, row_id)
    # the reference verifier accepts it (signature over id, timestamp and the exact body)
    payload = Webhook(SECRET).verify(request.body, request.headers)
    assert payload == {
        "message_id": found["message_id"],
        "to": "+32470000001",
        "body": "Zoë, see you at 9 — Café Ω",
    }
    assert request.headers["webhook-id"] == found["message_id"]
    assert request.headers["content-type"] == "application/json"
    assert abs(int(request.headers["webhook-timestamp"]) - time.time()) < 60
    assert found["state"] == "sent" and found["attempts"] == 1 and found["sent_at"] is not None
    # a tampered body does not verify
    tampered = request.body.replace(b"see you", b"pay us!")
    try:
        Webhook(SECRET).verify(tampered, request.headers)
    except Exception as exc:  # the verifier's own refusal
        assert "signature" in str(exc).lower()
    else:
        raise AssertionError("a tampered body verified")


async def test_503_then_200_retries_with_the_same_webhook_id(
    pool: asyncpg.Pool, settings: Settings
):
    row_id = await queue_sms(pool)
    with gateway() as (seen, url):
        seen.script = ["503"]
        first = await drainer(pool, sms_settings(settings, url)).drain()
        assert (first.claimed, first.retrying) == (1, 1)
        found = await row(pool, row_id)
        assert found["state"] == "retrying" and found["attempts"] == 1
        assert _error(found) == {
            "kind": "temporary",
            "code": 503,
            "detail": "the gateway answered 503",
        }
        waited = (found["next_attempt_at"] - now()).total_seconds()
        assert 55 <= waited <= 65  # the first back-off is one minute
        await due_now(pool, row_id)
        second = await drainer(pool, sms_settings(settings, url)).drain()
    assert second.sent == 1
    found = await row(pool, row_id)
    assert found["state"] == "sent" and found["attempts"] == 2
    ids = {r.headers["webhook-id"] for r in seen.received}
    assert ids == {found["message_id"]}  # the receiver recognises the retry


async def test_400_fails_at_once_and_429_or_a_silent_gateway_retry(
    pool: asyncpg.Pool, settings: Settings
):
    refused = await queue_sms(pool)
    with gateway() as (seen, url):
        seen.script = ["400"]
        await drainer(pool, sms_settings(settings, url)).drain()
        found = await row(pool, refused)
        assert found["state"] == "failed" and found["next_attempt_at"] is None
        assert (_error(found)["kind"], _error(found)["code"]) == ("permanent", 400)

        throttled = await queue_sms(pool)
        seen.script = ["429"]
        await drainer(pool, sms_settings(settings, url)).drain()
        found = await row(pool, throttled)
        assert found["state"] == "retrying"
        assert (_error(found)["kind"], _error(found)["code"]) == ("temporary", 429)

        await due_now(pool, throttled)
        seen.script = ["stall"]
        await drainer(pool, sms_settings(settings, url)).drain()
        found = await row(pool, throttled)
        assert found["state"] == "retrying" and found["attempts"] == 2
        assert (_error(found)["kind"], _error(found)["code"]) == ("timeout", None)
    for r in (await row(pool, refused), found):
        assert "+32" not in json.dumps(_error(r))  # never the number


async def test_a_gateway_that_is_down_holds_the_batch_and_mail_is_not_held_with_it(
    pool: asyncpg.Pool, settings: Settings
):
    texts = [await queue_sms(pool) for _ in range(3)]
    [mail] = await queue_mail(pool)
    url = f"http://127.0.0.1:{free_port()}/sms"  # nothing listens there
    summary = await drainer(pool, sms_settings(settings, url)).drain()  # no SMTP relay here
    assert summary.claimed == 3  # mail has no transport: it stays queued, unclaimed
    for text in texts:
        found = await row(pool, text)
        assert found["state"] == "retrying" and _error(found)["kind"] == "connection"
        assert found["attempts"] == 1  # one attempt each: the others were not tried
    assert (await row(pool, mail))["state"] == "queued"
