"""Webhooks for integrators: endpoints (`endpoints`), their delivery log, redelivery and
ping (`deliveries`), and the attempts: the delivery pass's statements and the rule of an
answer (`attempts`).

The facts themselves are written by the verbs that make the changes (`verbs.facts`).
"""

from events_svc.verbs.webhooks import attempts
from events_svc.verbs.webhooks.attempts import MAX_IN_FLIGHT, PER_ENDPOINT, WAKE_CHANNEL
from events_svc.verbs.webhooks.deliveries import list_deliveries, ping, redeliver
from events_svc.verbs.webhooks.endpoints import (
    create_endpoint,
    delete_endpoint,
    get_endpoint,
    list_endpoints,
    patch_endpoint,
    rotate_secret,
)

__all__ = [
    "MAX_IN_FLIGHT",
    "PER_ENDPOINT",
    "WAKE_CHANNEL",
    "attempts",
    "create_endpoint",
    "delete_endpoint",
    "get_endpoint",
    "list_deliveries",
    "list_endpoints",
    "patch_endpoint",
    "ping",
    "redeliver",
    "rotate_secret",
]
