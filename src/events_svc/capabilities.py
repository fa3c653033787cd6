"""The ONE capability codec: signed, purpose-salted tokens for public links.

itsdangerous signs a compact JSON payload with HMAC-SHA256 and the purpose as the
salt, so a token minted for one purpose never opens another. The expiry travels inside the
payload and is checked against the `now` the caller passes (time is a
parameter). `EVENT_CAPABILITY_SECRET` may list several secrets: the first
signs, all verify, so a new secret can be rolled in before the old one is
removed. Opening never says why a token failed: tampered, expired, of another
purpose or signed by a removed secret all answer None.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer

from events_svc import errors

ICS = "event-ics-access"
MY_TICKETS = "event-registration-ticket-report-access"
INTAKE = "event-intake-access"
WAITLIST = "event-waitlist-entry-access"  # one person's place in a waiting list
FORM = "event-registration-form"  # a public page's form, for one event, for a while
PURPOSES = (ICS, MY_TICKETS, INTAKE, WAITLIST, FORM)


class CapabilityCodec:
    """Mint and open tokens; without a secret every call is a typed 503."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets

    @property
    def configured(self) -> bool:
        return bool(self._secrets)

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        if not self._secrets:
            raise errors.CapabilitySecretNotConfigured()
        if purpose not in PURPOSES:
            raise ValueError(f"unknown capability purpose {purpose}")
        # itsdangerous signs with the LAST key and verifies with all of them
        return URLSafeSerializer(
            list(reversed(self._secrets)),
            salt=purpose,
            signer_kwargs={"digest_method": hashlib.sha256},
        )

    def mint(self, purpose: str, payload: dict[str, Any], expires_at: datetime | None) -> str:
        body = dict(payload)
        if expires_at is not None:
            body["x"] = int(expires_at.timestamp())
        token: str = self._serializer(purpose).dumps(body)
        return token

    def open(self, purpose: str, token: str, now: datetime) -> dict[str, Any] | None:
        """The payload of a valid, unexpired token of this purpose, else None."""
        serializer = self._serializer(purpose)
        if len(token) > 2048:
            return None
        try:
            payload = serializer.loads(token)
        except BadSignature:
            return None
        if not isinstance(payload, dict):
            return None
        expiry = payload.get("x")
        if expiry is not None and datetime.fromtimestamp(int(expiry), UTC) <= now:
            return None
        return payload
