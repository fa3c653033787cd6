"""The ONE capability codec: signed, purpose-salted tokens for public links.

itsdangerous signs a compact JSON payload with HMAC-SHA256 and the purpose as the
salt, so a token minted for one purpose never opens another. The expiry travels inside the
payload and is checked against the `now` the caller passes (time is a
parameter). `EVENT_CAPABILITY_SECRET` may list several secrets: the first
signs, all verify, so a new secret can be rolled in before the old one is
removed. Opening never says why a token failed: tampered, expired, of another
purpose or signed by a removed secret all answer None.

Each purpose's payload is written and read in one place, by a typed pair below
(`mint_ics`/`open_ics`, `mint_tickets`/`open_tickets`, `mint_intake`/`open_intake`,
`mint_waitlist`/`open_waitlist`, `mint_form`/`open_form`): no caller spells a payload's
keys, and a payload that does not read as its purpose's (a key missing, an id that is no
uuid) opens as None, like a tampered token.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from itsdangerous import BadSignature, URLSafeSerializer

from events_svc import errors

ICS = "event-ics-access"
MY_TICKETS = "event-registration-ticket-report-access"
INTAKE = "event-intake-access"
WAITLIST = "event-waitlist-entry-access"  # one person's place in a waiting list
FORM = "event-registration-form"  # a public page's form, for one event, for a while
PURPOSES = (ICS, MY_TICKETS, INTAKE, WAITLIST, FORM)


class CapabilityCodec:
    """Mint and open tokens; without a secret every call is a typed 503."""

    def __init__(self, secrets: tuple[str, ...]) -> None:
        self._secrets = secrets

    @property
    def configured(self) -> bool:
        return bool(self._secrets)

    def _serializer(self, purpose: str) -> URLSafeSerializer:
        if not self._secrets:
            raise errors.CapabilitySecretNotConfigured()
        if purpose not in PURPOSES:
            raise ValueError(f"unknown capability purpose {purpose}")
        # itsdangerous signs with the LAST key and verifies with all of them
        return URLSafeSerializer(
            list(reversed(self._secrets)),
            salt=purpose,
            signer_kwargs={"digest_method": hashlib.sha256},
        )

    def mint(self, purpose: str, payload: dict[str, Any], expires_at: datetime | None) -> str:
        body = dict(payload)
        if expires_at is not None:
            body["x"] = int(expires_at.timestamp())
        token: str = self._serializer(purpose).dumps(body)
        return token

    def open(self, purpose: str, token: str, now: datetime) -> dict[str, Any] | None:
        """The payload of a valid, unexpired token of this purpose, else None."""
        serializer = self._serializer(purpose)
        if len(token) > 2048:
            return None
        try:
            payload = serializer.loads(token)
        except BadSignature:
            return None
        if not isinstance(payload, dict):
            return None
        expiry = payload.get("x")
        if expiry is not None and datetime.fromtimestamp(int(expiry), UTC) <= now:
            return None
        return payload


# --- the payload of each purpose, minted and opened in one place ------------------------


@dataclass(frozen=True)
class IcsScope:
    """What a calendar link opens: an event, or one of its slots."""

    event_id: UUID
    slot_id: UUID | None = None


@dataclass(frozen=True)
class TicketsScope:
    """What a my-tickets link shows: these registrations of one event."""

    event_id: UUID
    registration_ids: tuple[UUID, ...]


def _uuid(value: Any) -> UUID | None:
    try:
        return UUID(str(value))
    except ValueError:
        return None


def mint_ics(
    codec: CapabilityCodec, event_id: UUID, slot_id: UUID | None, expires_at: datetime
) -> str:
    """A calendar link of the event (or of one slot), expiring."""
    payload = {"e": str(event_id), "s": str(slot_id) if slot_id else None}
    return codec.mint(ICS, payload, expires_at)


def open_ics(codec: CapabilityCodec, token: str, now: datetime) -> IcsScope | None:
    payload = codec.open(ICS, token, now)
    event_id = _uuid(payload.get("e")) if payload else None
    if payload is None or event_id is None:
        return None
    raw = payload.get("s")
    slot_id = _uuid(raw) if raw else None
    if raw and slot_id is None:
        return None
    return IcsScope(event_id, slot_id)


def mint_tickets(codec: CapabilityCodec, event_id: UUID, registration_ids: list[UUID]) -> str:
    """The never-expiring my-tickets link of these registrations (sorted: one link per
    set)."""
    ids = sorted(str(i) for i in set(registration_ids))
    return codec.mint(MY_TICKETS, {"e": str(event_id), "r": ids}, None)


def open_tickets(codec: CapabilityCodec, token: str, now: datetime) -> TicketsScope | None:
    payload = codec.open(MY_TICKETS, token, now)
    event_id = _uuid(payload.get("e")) if payload else None
    raw = payload.get("r") if payload else None
    if event_id is None or not isinstance(raw, list):
        return None
    ids = [_uuid(i) for i in raw]
    if any(i is None for i in ids):
        return None
    return TicketsScope(event_id, tuple(i for i in ids if i is not None))


def mint_intake(codec: CapabilityCodec, event_id: UUID, expires_at: datetime) -> str:
    """A private registration link: it admits the event even unpublished."""
    return codec.mint(INTAKE, {"e": str(event_id)}, expires_at)


def open_intake(codec: CapabilityCodec, token: str, now: datetime) -> UUID | None:
    payload = codec.open(INTAKE, token, now)
    return _uuid(payload.get("e")) if payload else None


def mint_waitlist(codec: CapabilityCodec, entry_id: UUID, event_id: UUID) -> str:
    """The one link of a waiting-list entry: its status, offer, accept and decline."""
    return codec.mint(WAITLIST, {"w": str(entry_id), "e": str(event_id)}, None)


def open_waitlist(codec: CapabilityCodec, token: str, now: datetime) -> tuple[UUID, UUID] | None:
    """(entry id, event id) of a waiting-list link."""
    payload = codec.open(WAITLIST, token, now)
    if payload is None:
        return None
    entry_id, event_id = _uuid(payload.get("w")), _uuid(payload.get("e"))
    return (entry_id, event_id) if entry_id and event_id else None


def mint_form(codec: CapabilityCodec, event_id: UUID, expires_at: datetime) -> str:
    """The signed, expiring token of an event page's forms (it opens nothing)."""
    return codec.mint(FORM, {"e": str(event_id)}, expires_at)


def open_form(codec: CapabilityCodec, token: str, now: datetime) -> UUID | None:
    """The event a form token was minted for (forged or expired: None)."""
    payload = codec.open(FORM, token, now)
    return _uuid(payload.get("e")) if payload else None
