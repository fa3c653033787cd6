"""The signers of what we send: one per partner, chosen by the caller of the outbound
client (`adapters.http`).

- `StandardWebhooks` (standardwebhooks.com), for webhooks and the SMS gateway. A secret
  is `whsec_` followed by the base64 of its key. The signed content is
  `{webhook-id}.{webhook-timestamp}.{body}`; the signature is `v1,` and the base64 of its
  HMAC-SHA256. During a rotation several secrets sign at once: the signatures are
  space-separated in one `webhook-signature` header, and a receiver accepts any of them.
- `BodyHmac`, for the lead sink (its wire format in `api.md`): `X-Events-Signature:
  sha256=<hex HMAC-SHA256 of the raw body>` and `Idempotency-Key: <the delivery's key>`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Signer(Protocol):
    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        """The headers that sign `body`, sent as the message `message_id`."""
        ...


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256>` of one request under one `whsec_` secret."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signed_headers(
    secrets: Sequence[str], webhook_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The three Standard Webhooks headers of one request."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, webhook_id, timestamp, body) for s in secrets),
    }


@dataclass(frozen=True)
class StandardWebhooks:
    """Signs under every secret given (the current one, and the previous one while a
    rotation overlaps), stamped with the time of sending."""

    secrets: tuple[str, ...] = field(repr=False)
    clock: Callable[[], float] = time.time

    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        return signed_headers(self.secrets, message_id, int(self.clock()), body)


def body_signature(secret: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of the raw body>`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class BodyHmac:
    """The lead sink's signature, and the delivery's key as `Idempotency-Key`."""

    secret: str = field(repr=False)

    def headers(self, message_id: str, body: bytes) -> dict[str, str]:
        return {
            "X-Events-Signature": body_signature(self.secret, body),
            "Idempotency-Key": message_id,
        }
