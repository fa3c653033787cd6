"""Actors: who is asking, with which scopes, for which company.

An actor with no company is a platform operator (sees every row); an actor of
a company sees its own rows and the shared rows (company_id NULL). Another
company's object answers 404, never 403, so ids leak nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

SCOPES: frozenset[str] = frozenset(
    {
        "*",
        "event:read",
        "event:write",
        "event:delete",
        "registration:read",
        "registration:write",
        "registration:pii",
        "scheduler:run",
        "capability:mint",
        "template:write",
        "desk:scan",
        "seam:write",
        "booth:write",
        "lead:write",
        "registration:correct",
        "registration:lifecycle",
        "attendance:write",
        "registration:export",
        "event:operate",
        "webhook:write",
    }
)


@dataclass(frozen=True)
class Actor:
    """The authenticated caller; `id` is what audit rows record (never a secret)."""

    id: str
    kind: str  # "token", "host", "system"
    scopes: frozenset[str] = field(default_factory=frozenset)
    company_id: UUID | None = None
    name: str = ""

    def has(self, scope: str) -> bool:
        return "*" in self.scopes or scope in self.scopes


SYSTEM = Actor(id="system", kind="system", scopes=frozenset({"*"}), name="system")
