"""The webhook sender: one signed POST per attempt, through the one outbound client.

A webhook URL is company-set, so its client (`adapters.http`, partner `webhooks`) always
passes the egress guard (`EVENTS_WEBHOOK_ALLOW_PRIVATE` lifts only its address rule) and
never goes through a proxy. It keeps a connection pool per receiver; at most 10 s for the
whole attempt (connect, send, answer); no redirect followed (a 3xx is a failed attempt);
the answer's body read up to 64 KiB (so the connection can be used again) and never kept.
Each attempt is signed with the Standard Webhooks signer under every secret the endpoint
has (the previous one too while a rotation overlaps).
"""

from __future__ import annotations

import time
import typing

from events_svc.adapters.http import OutboundClient, Partner
from events_svc.adapters.signing import StandardWebhooks
from events_svc.egress import EgressGuard
from events_svc.ports import HttpAnswer
from events_svc.verbs.webhooks import MAX_IN_FLIGHT, PER_ENDPOINT

TIMEOUT_S = 10.0
USER_AGENT = "events-svc-webhooks/1"


class WebhookSender:
    """Sends one attempt (see the module docstring)."""

    def __init__(
        self,
        guard: EgressGuard,
        *,
        timeout_s: float = TIMEOUT_S,
        clock: typing.Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        # a receiver's pool may hold every attempt of the process (MAX_IN_FLIGHT), so no
        # attempt ever waits for a connection of ours and times out on a receiver that did
        # nothing wrong; the loop keeps at most PER_ENDPOINT in flight to one endpoint
        partner = Partner(
            "webhooks", timeout_s, MAX_IN_FLIGHT, PER_ENDPOINT, guard=guard, user_agent=USER_AGENT
        )
        self.client = OutboundClient(partner, clock=clock)

    async def send(
        self, url: str, secrets: tuple[str, ...], webhook_id: str, body: bytes
    ) -> HttpAnswer:
        """POST the body signed under every secret; the answer's status or why none."""
        return await self.client.post(url, body, StandardWebhooks(secrets), webhook_id)

    async def close(self) -> None:
        await self.client.close()
