"""Reasoned operator commands on one registration: the correction of attendee fields, and
cancel and reactivate with a reason.

Each is one transaction: the registration is looked up among those the actor may see
(404 otherwise, replays included), the Idempotency-Key is claimed
(`revisions.claim_replay`), then the locks in the documented order (event, slot and
ticket when seats are re-checked, the registration), If-Match against the locked
version, the write, one revision row and one audit row (field names only). A correction
needs If-Match (428 without it); cancel and reactivate accept it. A correction that
changes nothing writes nothing to the registration, its history, the audit trail or the
webhooks; one that changes fields records `registration.updated` with their names
(`changed`). Cancel and reactivate are state changes: `write_state` records them.

The replay store keeps the first answer WITHOUT the attendee's name, email, phone and
answers: a replay answers the first result (state, version, ...) with the attendee data
read again, masked as the replaying request asks. A write answered with `pii=full` is
audited like a full read.

Cancel and reactivate go through the ONE transition (`states.write_state`): reactivation
is `cancel -> open`, so it re-checks seats and arms the after-subscription lines exactly
as the core does, and the receipts keep an attendee who already got a mail from getting it
again. A cancelled row is left alone by a second cancel; an open row by a second
reactivation (a retry without a key answers the row as it is).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models import (
    REGISTRATION_WRITABLE,
    RegistrationPatch,
    RegistrationState,
    RegistrationView,
)
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_if_match
from events_svc.verbs.facts import record_registration_facts
from events_svc.verbs.registrations.records import (
    find_registration,
    lock_registration,
    read_many,
    write_attendee,
)
from events_svc.verbs.registrations.revisions import (
    Replay,
    claim_replay,
    record_answer,
    write_revision,
)
from events_svc.verbs.registrations.states import lock_for_change, write_state

_FENCED = tuple(
    f for f in RegistrationPatch.model_fields if f not in (*REGISTRATION_WRITABLE, "reason")
)


# the attendee data of a view: never kept in the replay store, read again on a replay
_ATTENDEE_DATA = ("name", "email", "phone", "answers")

Work = Callable[[Connection, Any], Awaitable[dict[str, Any]]]


async def _command(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    replay: Replay | None,
    now: datetime,
    pii_full: bool,
    work: Work,
) -> dict[str, Any]:
    """One reasoned command: authorize (404), claim the key, work or replay, audit a full
    answer. A replay answers the first result with the attendee's current data."""
    async with transaction(pool) as conn:
        found = await find_registration(conn, actor, registration_id)
        first = await claim_replay(conn, actor, replay, now)
        if first is None:
            view = await work(conn, found)
            kept = RegistrationView.model_validate(view).model_dump(
                mode="json", exclude=set(_ATTENDEE_DATA)
            )
            await record_answer(conn, actor, replay, kept)
        else:
            current = (await read_many(conn, [registration_id]))[0]
            view = {**first, **{k: current[k] for k in _ATTENDEE_DATA}}
        if pii_full:
            await write_audit(
                conn,
                actor,
                "registration_pii_read",
                "registration",
                registration_id,
                event_id=found["event_id"],
                summary={"rows": 1, "command": replay.verb if replay else None},
            )
        return view


async def correct_registration(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    cmd: RegistrationPatch,
    now: datetime,
    *,
    if_match: int | None,
    idempotency_key: str | None = None,
    pii_full: bool = False,
) -> dict[str, Any]:
    """Correct attendee fields (locks: the registration); needs If-Match and a reason."""
    for name in _FENCED:
        if name in cmd.model_fields_set:
            raise errors.FieldNotWritable(f"{name} is not writable here.", field=name)
    if if_match is None:
        raise errors.PreconditionRequired()
    changes = cmd.given()
    reason = _reason(changes.pop("reason"))
    for name in ("name", "email", "phone", "company_name"):
        if name in changes and changes[name] is None:
            changes[name] = ""

    async def work(conn: Connection, found: Any) -> dict[str, Any]:
        reg = await lock_registration(conn, registration_id)
        check_if_match(reg["version"], if_match, name="version")
        view = await write_attendee(
            conn, actor, reg, changes, found["event_id"], now, "correct", reason
        )
        await _record_update(conn, reg, changes, now)
        return view

    replay = Replay.of(idempotency_key, "correct", registration_id, {**changes, "reason": reason})
    return await _command(pool, actor, registration_id, replay, now, pii_full, work)


async def _record_update(
    conn: Connection, reg: dict[str, Any], changes: dict[str, Any], now: datetime
) -> None:
    """`registration.updated` naming the fields the correction changed (their names only:
    the values are PII); nothing when it changed none."""
    changed = sorted(k for k, v in changes.items() if reg[k] != v)
    if changed:
        extra = {"changed": changed}
        await record_registration_facts(conn, "registration.updated", [reg["id"]], now, extra)


def _reason(text: str) -> str:
    reason = text.strip()
    if not reason:
        raise errors.ValidationFailed("reason cannot be blank", field="reason")
    return reason


async def _lifecycle(
    conn: Connection,
    actor: Actor,
    found: Any,
    registration_id: UUID,
    reactivate: bool,
    reason: str,
    now: datetime,
    if_match: int | None,
) -> dict[str, Any]:
    event, ticket, reg = await lock_for_change(
        conn, actor, registration_id, seats=reactivate, found=found
    )
    check_if_match(reg["version"], if_match, name="version")
    current = reg["state"]
    target: RegistrationState = "open" if reactivate else "cancel"
    verb = "reactivate" if reactivate else "cancel"
    if current != target:
        if reactivate and current != "cancel":
            raise errors.RegistrationNotCancelled(state=current)
        if reactivate and event["kanban_state"] == "cancel":
            raise errors.EventCancelled()
        await write_state(
            conn,
            actor,
            event,
            ticket,
            reg,
            target,
            now,
            origin="officer",
            sale_status=reg["sale_status"],
            note={"command": verb},
        )
        changes = {"state": (current, target)}
        await write_revision(conn, actor, reg["id"], reg["version"] + 1, verb, reason, changes, now)
    return (await read_many(conn, [reg["id"]]))[0]


async def change_lifecycle(
    pool: Pool,
    actor: Actor,
    registration_id: UUID,
    *,
    reactivate: bool,
    reason: str,
    now: datetime,
    if_match: int | None = None,
    idempotency_key: str | None = None,
    pii_full: bool = False,
) -> dict[str, Any]:
    """Cancel (any state -> `cancel`) or reactivate (`cancel` -> `open`, seats re-checked,
    armed) one registration with a reason (locks: event, slot, ticket, registration)."""
    why = _reason(reason)

    async def work(conn: Connection, found: Any) -> dict[str, Any]:
        return await _lifecycle(conn, actor, found, registration_id, reactivate, why, now, if_match)

    verb = "reactivate" if reactivate else "cancel"
    replay = Replay.of(idempotency_key, verb, registration_id, {"reason": why})
    return await _command(pool, actor, registration_id, replay, now, pii_full, work)
