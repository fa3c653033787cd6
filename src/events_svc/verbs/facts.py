"""Webhook facts: what a verb records, in its own transaction, for the integrators'
endpoints (design §7.16). ONE row per fact, whatever the number of endpoints: the
delivery pass fans it out. A fact nobody listens to (`event.webhook_listens`: no active
endpoint of the company, event and type) is not written at all, in the same statement.
The register verb's `registration.created` facts are written by its own INSERT
(`take_seats._INSERT`), with the same functions and the same rule. A fact keeps its PII
only when an endpoint that wants it has `include_pii` (`event.webhook_listens_with_pii`).

`data` is ids, states, times and the names of things; `pii` (attendee name, email, phone,
company, barcode) reaches only endpoints with `include_pii`. The shapes of a registration
and of an event are SQL functions (`event.registration_fact`, `event.event_fact`), read
from the row as the verb's transaction sees it, so every verb says the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc.db import Connection

_FACT = """
INSERT INTO event.webhook_facts (company_id, event_id, type, occurred_at, data)
SELECT $1::uuid, $2::uuid, $3::text, $4, $5::jsonb
WHERE event.webhook_listens($1::uuid, $2::uuid, $3::text)
"""
# every registration of the list in one statement: a combined batch writes its facts at once
_REGISTRATIONS = """
INSERT INTO event.webhook_facts (company_id, event_id, type, occurred_at, data, pii)
SELECT r.company_id, r.event_id, $1::text, $3, event.registration_fact(r) || $4::jsonb,
    CASE WHEN event.webhook_listens_with_pii(r.company_id, r.event_id, $1)
        THEN event.registration_pii(r) ELSE '{}' END
FROM event.registrations r
WHERE r.id = ANY($2::uuid[]) AND event.webhook_listens(r.company_id, r.event_id, $1::text)
ORDER BY r.created_at, r.id
"""
_EVENT = """
INSERT INTO event.webhook_facts (company_id, event_id, type, occurred_at, data)
SELECT e.company_id, e.id, $1::text, $3, event.event_fact(e) || $4::jsonb
FROM event.events e
WHERE e.id = $2 AND event.webhook_listens(e.company_id, e.id, $1::text)
"""


async def record_fact(
    conn: Connection,
    kind: str,
    at: datetime,
    *,
    company_id: UUID | None,
    event_id: UUID | None,
    data: dict[str, Any],
) -> None:
    """One fact of `kind` (when an endpoint listens), with the data given: no attendee's
    data (an order's or an operation's facts carry ids and states only)."""
    await conn.execute(_FACT, company_id, event_id, kind, at, data)


async def record_registration_facts(
    conn: Connection,
    kind: str,
    registration_ids: Sequence[UUID],
    at: datetime,
    extra: dict[str, Any] | None = None,
) -> None:
    """One fact of `kind` per registration (as this transaction sees it), `extra` merged
    into each one's data."""
    if registration_ids:
        await conn.execute(_REGISTRATIONS, kind, list(registration_ids), at, extra or {})


async def record_event_fact(
    conn: Connection,
    kind: str,
    event_id: UUID,
    at: datetime,
    extra: dict[str, Any] | None = None,
) -> None:
    """One fact of `kind` about the event (as this transaction sees it)."""
    await conn.execute(_EVENT, kind, event_id, at, extra or {})
