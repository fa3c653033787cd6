"""The standalone lead sink: a signed webhook (`EVENT_LEAD_WEBHOOK_URL`,
`EVENT_LEAD_WEBHOOK_SECRET`).

Each delivery is one POST of the JSON body `docs/architecture.md` fixes (`action`,
`rule_id`, `event_id`, `grain`, `group_key`, `lead_id`, `registration_ids`,
`new_registration_ids`),
with `X-Events-Signature: sha256=<hex HMAC-SHA256 of the raw body>` and
`Idempotency-Key: <provenance id>:<delivery number>`. A create expects a 2xx answer
`{"lead_id": "..."}`; an update any 2xx. Timeouts are bounded; a transport error, a 429
or a 5xx is retried a few times with a short doubling back-off (same body, same key);
anything else, or retries spent, is a `LeadRefused` with a safe reason (never the body:
it lists attendees). The lead pass calls it after its transaction commits, never under a
lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import Any

import httpx

from events_svc.ports import LeadDelivery, LeadRefused, LeadSink, RefusingLeadSink
from events_svc.settings import Settings

TIMEOUT = httpx.Timeout(10.0, connect=5.0)
ATTEMPTS = 3  # one call and two retries
RETRY_FIRST_S = 0.2  # 0.2 s, then 0.4 s
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


def signature(secret: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of the raw body>`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookLeadSink:
    """POSTs each delivery to one URL, signed with the shared secret."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        timeout: httpx.Timeout = TIMEOUT,
        attempts: int = ATTEMPTS,
        retry_first_s: float = RETRY_FIRST_S,
    ) -> None:
        self.url, self._secret = url, secret
        self.timeout, self.attempts, self.retry_first_s = timeout, attempts, retry_first_s

    async def create_lead(self, delivery: LeadDelivery) -> str:
        answer = await self._post(delivery)
        try:
            lead_id = json.loads(answer.content)["lead_id"]
        except (ValueError, KeyError, TypeError):
            raise LeadRefused("webhook answered a create without a lead_id") from None
        if isinstance(lead_id, int) and not isinstance(lead_id, bool):
            lead_id = str(lead_id)
        if not isinstance(lead_id, str) or not 0 < len(lead_id) <= MAX_LEAD_ID:
            raise LeadRefused("webhook answered a lead_id that is not a short text")
        return lead_id

    async def update_lead(self, delivery: LeadDelivery) -> None:
        await self._post(delivery)

    async def _post(self, delivery: LeadDelivery) -> httpx.Response:
        body = body_of(delivery)
        headers = {
            "Content-Type": "application/json",
            "X-Events-Signature": signature(self._secret, body),
            "Idempotency-Key": delivery.idempotency_key,
        }
        reason = "webhook not reached"
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            for attempt in range(self.attempts):
                if attempt:
                    await asyncio.sleep(self.retry_first_s * (1 << (attempt - 1)))
                try:
                    answer = await client.post(self.url, content=body, headers=headers)
                except httpx.HTTPError as exc:
                    reason = f"webhook transport error: {type(exc).__name__}"
                    continue
                if answer.is_success:
                    return answer
                reason = f"webhook answered {answer.status_code}"
                if answer.status_code != 429 and answer.status_code < 500:
                    break  # a refusal: retrying the same body will not change it
        raise LeadRefused(reason)


def lead_sink_from(settings: Settings) -> LeadSink:
    """The webhook when `EVENT_LEAD_WEBHOOK_URL` is set, else the refusing default."""
    if not settings.lead_webhook_url:
        return RefusingLeadSink()
    return WebhookLeadSink(settings.lead_webhook_url, settings.lead_webhook_secret)
