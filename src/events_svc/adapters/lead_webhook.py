"""The standalone lead sink: a signed webhook (`EVENT_LEAD_WEBHOOK_URL`,
`EVENT_LEAD_WEBHOOK_SECRET`).

Each delivery is one POST of the JSON body `api.md` fixes (`action`, `rule_id`,
`event_id`, `grain`, `group_key`, `lead_id`, `registration_ids`, `new_registration_ids`),
with `X-Events-Signature: sha256=<hex HMAC-SHA256 of the raw body>` and
`Idempotency-Key: <provenance id>:<delivery number>` (`adapters.signing.BodyHmac`), sent
by the one outbound client (`adapters.http`): the CRM is the operator's own (it may be on
a private address; `EVENTS_OUTBOUND_PROXY` when set). A create expects a 2xx answer
`{"lead_id": "..."}`; an update any 2xx. Each call is tried once and bounded in time
(`TIMEOUT_S` for connect, send and answer together): a transport error, no answer in
time, a 429, a 5xx or any other refusal is a `LeadRefused` with a safe reason (never the
body: it lists attendees), and the lead pass parks the request and backs it off. The
pass calls it after its transaction commits, never under a lock. Its `host` (host and
port) is what the pass's log lines name: the URL's path and query are sent, never logged.
"""

from __future__ import annotations

import json
from typing import Any

from events_svc.adapters.http import OutboundClient, Partner
from events_svc.adapters.signing import BodyHmac
from events_svc.observability import host_of
from events_svc.ports import LeadDelivery, LeadRefused, LeadSink, RefusingLeadSink
from events_svc.settings import Settings

TIMEOUT_S = 10.0  # a whole call: connect, send and answer
CONNECTIONS = 4
MAX_LEAD_ID = 200


def body_of(delivery: LeadDelivery) -> bytes:
    """The raw body: compact JSON, exactly the bytes that are signed and sent."""
    doc: dict[str, Any] = {
        "action": delivery.action,
        "rule_id": str(delivery.rule_id),
        "event_id": str(delivery.event_id),
        "grain": delivery.grain,
        "group_key": delivery.group_key,
        "lead_id": delivery.lead_id,
        "registration_ids": [str(r) for r in delivery.registration_ids],
        "new_registration_ids": [str(r) for r in delivery.new_registration_ids],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


class WebhookLeadSink:
    """POSTs each delivery to one URL, signed with the shared secret."""

    def __init__(
        self, url: str, secret: str, *, timeout_s: float = TIMEOUT_S, proxy: str | None = None
    ) -> None:
        self.url = url
        self.host = host_of(url)  # what the lead pass's log lines name: never path or query
        self.signer = BodyHmac(secret)
        self.client = OutboundClient(
            Partner("lead_sink", timeout_s, CONNECTIONS, CONNECTIONS, proxy=proxy)
        )

    async def create_lead(self, delivery: LeadDelivery) -> str:
        body = await self._post(delivery)
        try:
            lead_id = json.loads(body)["lead_id"]
        except (ValueError, KeyError, TypeError):
            raise LeadRefused("webhook answered a create without a lead_id") from None
        if isinstance(lead_id, int) and not isinstance(lead_id, bool):
            lead_id = str(lead_id)
        if not isinstance(lead_id, str) or not 0 < len(lead_id) <= MAX_LEAD_ID:
            raise LeadRefused("webhook answered a lead_id that is not a short text")
        return lead_id

    async def update_lead(self, delivery: LeadDelivery) -> None:
        await self._post(delivery)

    async def _post(self, delivery: LeadDelivery) -> bytes:
        answer = await self.client.post(
            self.url, body_of(delivery), self.signer, delivery.idempotency_key, keep_body=True
        )
        if answer.ok:
            return answer.body
        if answer.status is not None:
            raise LeadRefused(f"webhook answered {answer.status}")
        if answer.error == "timeout":
            raise LeadRefused(f"webhook did not answer within {self.client.partner.timeout_s:g} s")
        raise LeadRefused("webhook could not be reached")

    async def close(self) -> None:
        await self.client.close()


def lead_sink_from(settings: Settings) -> LeadSink:
    """The webhook when `EVENT_LEAD_WEBHOOK_URL` is set, else the refusing default."""
    if not settings.lead_webhook_url:
        return RefusingLeadSink()
    return WebhookLeadSink(
        settings.lead_webhook_url,
        settings.lead_webhook_secret,
        proxy=settings.outbound_proxy or None,
    )
