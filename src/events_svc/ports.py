"""Host ports: small Protocols the host may implement, with refusing defaults.

Missing wiring is loud: a `Refusing*` default raises a typed refusal, never a
silent skip. The standalone composition (`events-svc serve`) installs its own
adapters where it has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from events_svc import errors


class PartnerDirectoryNotComposed(errors.DomainError):
    """No partner directory is wired into this deployment."""

    code = "partner_directory_not_composed"
    status = 503


@dataclass(frozen=True)
class PartnerContact:
    """What a partner directory knows of a party: its contact fields."""

    name: str = ""
    email: str = ""
    phone: str = ""
    company_name: str = ""


class PartnerDirectory(Protocol):
    async def contact(self, partner_id: UUID) -> PartnerContact | None:
        """The partner's contact fields, or None when the partner is unknown."""
        ...


class RefusingPartnerDirectory:
    """The default: refuses every lookup with 503 partner_directory_not_composed."""

    async def contact(self, partner_id: UUID) -> PartnerContact | None:
        raise PartnerDirectoryNotComposed()


@dataclass(frozen=True)
class Ports:
    """The bundle of host ports handed to `create_app`."""

    partner_directory: PartnerDirectory = field(default_factory=RefusingPartnerDirectory)
