"""Delivery: the outbox's claims and the one rule of an attempt's answer.

`claims`: `claim_due` leases due outbox rows from the one leased queue, `outcome_of`
turns an answer into the row's next state (sent; retrying with back-off; failed),
`give_back` returns untried messages as they were, `record` writes a claim's answers in
one statement, `next_delivery_due` tells the drainer when to wake. `wake`: the drainers'
channel, and the retry that reaches every process.
"""

from events_svc.verbs.delivery.claims import (
    Claim,
    Claimed,
    Outcome,
    claim_due,
    give_back,
    next_delivery_due,
    outcome_of,
    record,
)
from events_svc.verbs.delivery.wake import WAKE_CHANNEL, retried, retry_of

__all__ = [
    "WAKE_CHANNEL",
    "Claim",
    "Claimed",
    "Outcome",
    "claim_due",
    "give_back",
    "next_delivery_due",
    "outcome_of",
    "record",
    "retried",
    "retry_of",
]
