"""Standard Webhooks signatures (standardwebhooks.com), for every signed request we send.

A secret is `whsec_` followed by the base64 of its key. The signed content is
`{webhook-id}.{webhook-timestamp}.{body}`; the signature is `v1,` and the base64 of its
HMAC-SHA256. During a rotation several secrets sign at once: the signatures are
space-separated in one `webhook-signature` header, and a receiver accepts any of them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Sequence


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
