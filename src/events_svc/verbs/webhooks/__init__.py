"""Webhooks for integrators: endpoints (`endpoints`), their delivery log, redelivery and
ping (`deliveries`), and the delivery pass's statements and answer rule (`pass_`).

The facts themselves are written by the verbs that make the changes (`verbs.facts`).
"""

from events_svc.verbs.webhooks import pass_
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
    "create_endpoint",
    "delete_endpoint",
    "get_endpoint",
    "list_deliveries",
    "list_endpoints",
    "pass_",
    "patch_endpoint",
    "ping",
    "redeliver",
    "rotate_secret",
]
