"""Questions to the host's partner directory (`ports.PartnerDirectory`), bounded in time.

A pass asks through `ask` (its failure, a timeout included, is the work's own: it parks
and backs off). A request asks through `answered`: a directory that fails or does not
answer within `DIRECTORY_TIMEOUT_S` answers 503 `partner_directory_unavailable` (the
error's class logged, never its text), never a 500 and never a request that hangs; a
directory not composed answers 503 `partner_directory_not_composed` as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar
from uuid import UUID

from events_svc import errors
from events_svc.diagnostics import error_fields
from events_svc.ports import PartnerContact, PartnerDirectory

log = logging.getLogger("events_svc.partners")

DIRECTORY_TIMEOUT_S = 5.0  # the partner directory's time to answer one question

T = TypeVar("T")


async def ask(directory: PartnerDirectory, partner_id: UUID) -> PartnerContact | None:
    """One question; `TimeoutError` when the directory takes longer than
    `DIRECTORY_TIMEOUT_S`."""
    async with asyncio.timeout(DIRECTORY_TIMEOUT_S):
        return await directory.contact(partner_id)


async def answered(question: Awaitable[T]) -> T:
    """A question asked for a request (see the module docstring)."""
    try:
        return await question
    except errors.DomainError:
        raise
    except Exception as exc:
        log.warning("partner directory unavailable", extra={"fields": error_fields(exc)})
        raise errors.PartnerDirectoryUnavailable() from exc
