"""The event page's probes: the intake mounted, a capability secret, windows wide enough
for a probe's own requests (the throttle probe narrows them)."""

from __future__ import annotations

import dataclasses

import pytest

from events_svc.settings import Settings
from tests.probes.pages.kit import SECRET


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return dataclasses.replace(
        settings,
        pool_max=8,
        capability_secrets=(SECRET,),
        intake_public=True,
        rate_limit_ip="1000/minute",
        rate_limit_capability="1000/minute",
        rate_limit_email="1000/hour",
    )
