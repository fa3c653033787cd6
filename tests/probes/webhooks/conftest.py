"""The webhook probes' fixtures: a receiver, the probe's clock and a hand-driven loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from events_svc.loops import WebhookPass
from tests.probes.webhooks.kit import Clock, hand_loop, utc_now
from tests.probes.webhooks.receiver import Receiver, receiver


@pytest.fixture
def sink() -> Iterator[Receiver]:
    with receiver() as r:
        yield r


@pytest.fixture
def clock() -> Clock:
    return Clock(utc_now())


@pytest.fixture
async def loop(app: Any, clock: Clock) -> AsyncIterator[WebhookPass]:
    hand = hand_loop(app, clock)
    yield hand
    await hand.sender.close()
