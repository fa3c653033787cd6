"""The sms transport: one signed JSON POST per outbox row to `EVENTS_SMS_GATEWAY_URL`.

The body is `{message_id, to, body}` (compact JSON, exactly the bytes signed), with the
Standard Webhooks headers under `EVENTS_SMS_GATEWAY_SECRET` (`webhook-id` is the row's
`message_id`, the same on every attempt), sent by the one outbound client (`adapters.http`)
with the gateway's own settings: `EVENTS_SMS_GATEWAY_TIMEOUT_S` for a whole attempt,
`EVENTS_SMS_GATEWAY_CONCURRENCY` calls at once, `EVENTS_OUTBOUND_PROXY` when set (the
gateway is the operator's own: it may be on a private address). No redirect is followed;
the answer's body is never kept. A 2xx is sent; a 429, a 5xx, a timeout or a refused
connection is retried (`temporary`, `timeout`, `connection`, each marking the gateway
down for the rest of the batch); any other status fails the message (`permanent`).
Its log lines (the drainer's) name the gateway's `host` (host and port) only: the URL's
path and query (a gateway's `?key=`) are sent, never logged.
"""

from __future__ import annotations

import json

from events_svc.adapters.http import OutboundClient, Partner
from events_svc.adapters.signing import StandardWebhooks
from events_svc.observability import host_of
from events_svc.ports import DeliveryErrorKind, DeliveryFailure, QueuedMessage


def body_of(message: QueuedMessage) -> bytes:
    doc = {"message_id": message.message_id, "to": message.recipient, "body": message.body}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


class SmsGatewayTransport:
    """Posts sms rows to the gateway (see the module docstring)."""

    channel = "sms"

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout_s: float = 10.0,
        sessions: int = 4,
        proxy: str | None = None,
    ) -> None:
        self.url, self.sessions = url, sessions
        self.host = host_of(url)  # what the log names: the URL's path and query may hold a key
        self.signer = StandardWebhooks((secret,))
        self.client = OutboundClient(
            Partner("sms_gateway", timeout_s, sessions, sessions, proxy=proxy)
        )

    async def send(self, message: QueuedMessage) -> DeliveryFailure | None:
        answer = await self.client.post(self.url, body_of(message), self.signer, message.message_id)
        status = answer.status
        if status is None:
            if answer.error == "timeout":
                detail = "the gateway did not answer in time"
                return DeliveryFailure(DeliveryErrorKind.TIMEOUT, None, detail, relay_down=True)
            detail = "the gateway could not be reached"
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
        await self.client.close()
