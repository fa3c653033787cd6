"""Delivery: the drainer's claims and the one rule of an attempt's answer.

`claim_due` leases due outbox rows (`FOR UPDATE SKIP LOCKED`), `settle` turns an answer
into the row's next state (sent; retrying with back-off; failed), `give_back` returns an
untried message to where it was, `record` writes a claim's answers in one statement,
`next_delivery_due` tells the drainer when to wake.
"""

from events_svc.verbs.delivery.claims import (
    Claim,
    Claimed,
    Settled,
    claim_due,
    give_back,
    next_delivery_due,
    record,
    settle,
)

__all__ = [
    "Claim",
    "Claimed",
    "Settled",
    "claim_due",
    "give_back",
    "next_delivery_due",
    "record",
    "settle",
]
