"""The sms transport: one signed JSON POST per outbox row to `EVENTS_SMS_GATEWAY_URL`.

The body is `{message_id, to, body}` (compact JSON, exactly the bytes signed), with the
Standard Webhooks headers under `EVENTS_SMS_GATEWAY_SECRET` (`webhook-id` is the row's
`message_id`, the same on every attempt). One shared client keeps connections alive; no
redirect is followed; the answer's body is never read. A 2xx is sent; a 429, a 5xx, a
timeout or a refused connection is retried (`temporary`, `timeout`, `connection`, each
marking the gateway down for the rest of the batch); any other status fails the message
(`permanent`).
"""

from __future__ import annotations

import json
import time

import httpx

from events_svc.adapters.signing import signed_headers
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, QueuedMessage


def body_of(message: QueuedMessage) -> bytes:
    doc = {"message_id": message.message_id, "to": message.recipient, "body": message.body}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class SmsGatewayTransport:
    """Posts sms rows to the gateway (see the module docstring)."""

    channel = "sms"

    def __init__(self, url: str, secret: str, *, timeout_s: float = 10.0, sessions: int = 4):
        self.url, self.secret, self.sessions = url, secret, sessions
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            limits=httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions),
        )

    async def send(self, message: QueuedMessage) -> DeliveryFailure | None:
        body = body_of(message)
        headers = signed_headers([self.secret], message.message_id, int(time.time()), body)
        headers["content-type"] = "application/json"
        try:
            async with self.client.stream("POST", self.url, content=body, headers=headers) as r:
                status = r.status_code  # the body is never read
        except httpx.TimeoutException:
            detail = "the gateway did not answer in time"
            return DeliveryFailure(DeliveryErrorKind.TIMEOUT, None, detail, relay_down=True)
        except httpx.TransportError as exc:
            detail = f"the gateway could not be reached ({type(exc).__name__})"
            return DeliveryFailure(DeliveryErrorKind.CONNECTION, None, detail, relay_down=True)
        if 200 <= status < 300:
            return None
        if status == 429 or status >= 500:
            detail = f"the gateway answered {status}"
            return DeliveryFailure(DeliveryErrorKind.TEMPORARY, status, detail, relay_down=True)
        return DeliveryFailure(
            DeliveryErrorKind.PERMANENT, status, f"the gateway refused the message ({status})"
        )

    async def close(self) -> None:
        await self.client.aclose()
