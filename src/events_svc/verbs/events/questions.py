"""The question library: questions, their suggested answers, and the links
that put questions on events (the one registration-question relation) and
on event types.

A question's kind is immutable once attendees answered it; a default
question must be reusable (CHECK); a suggested answer attendees chose cannot
be deleted. Questions are company-shared; linking one to an event is fenced
by the event's company.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.models import AnswerCreate, QuestionCreate
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, merge_patch, page
from events_svc.verbs.fence import get_event_row, lock_event

_GET = "SELECT * FROM event.question_view q WHERE q.id = $1"
_LIST = """
SELECT * FROM event.question_view q
WHERE ($1::int IS NULL OR (q.sequence, q.id) > ($1, $2::uuid))
ORDER BY q.sequence, q.id LIMIT $3
"""
_LOCK = "SELECT * FROM event.questions WHERE id = $1 FOR UPDATE"
_INSERT = """
INSERT INTO event.questions (title, question_type, is_mandatory_answer, is_default,
    is_reusable, sequence, created_at, updated_at)
VALUES ($1, $2::event.question_kind, $3, $4, $5, $6, $7, $7) RETURNING id
"""
_UPDATE = """
UPDATE event.questions SET title = $2, question_type = $3::event.question_kind,
    is_mandatory_answer = $4, is_default = $5, is_reusable = $6, sequence = $7, updated_at = $8
WHERE id = $1
"""
_ANSWERED = "SELECT EXISTS (SELECT 1 FROM event.registration_answers WHERE question_id = $1)"
_DELETE = "DELETE FROM event.questions WHERE id = $1 RETURNING id"
_ANSWER_INSERT = """
INSERT INTO event.question_answers (question_id, name, sequence, created_at)
VALUES ($1, $2, $3, $4) RETURNING id, question_id, name, sequence
"""
_ANSWER_LOCK = """
SELECT id, question_id, name, sequence FROM event.question_answers
WHERE id = $1 AND question_id = $2 FOR UPDATE
"""
_ANSWER_UPDATE = """
UPDATE event.question_answers SET name = $2, sequence = $3 WHERE id = $1
RETURNING id, question_id, name, sequence
"""
_ANSWER_DELETE = "DELETE FROM event.question_answers WHERE id = $1"
_LINK = """
INSERT INTO event.registration_questions (event_id, question_id, sequence, once_per_order)
VALUES ($1, $2, $3, $4)
"""
_UNLINK = "DELETE FROM event.registration_questions WHERE event_id = $1 AND question_id = $2"
_EVENT_QUESTIONS = """
SELECT q.*, rq.sequence AS link_sequence, rq.once_per_order
FROM event.registration_questions rq JOIN event.question_view q ON q.id = rq.question_id
WHERE rq.event_id = $1 ORDER BY rq.sequence, q.sequence, q.id
"""
_NOT_NULL = frozenset(
    {"title", "question_type", "is_mandatory_answer", "is_default", "is_reusable", "sequence"}
)


async def _read(conn: Connection, question_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(_GET, question_id)
    if row is None:
        raise errors.NotFound("No such question.")
    return dict(row)


async def create_question(
    pool: Pool, actor: Actor, cmd: QuestionCreate, now: datetime
) -> dict[str, Any]:
    """A library question with its suggested answers; audited."""
    async with transaction(pool) as conn:
        qid = await conn.fetchval(
            _INSERT,
            cmd.title,
            cmd.question_type,
            cmd.is_mandatory_answer,
            cmd.is_default,
            cmd.is_reusable,
            cmd.sequence,
            now,
        )
        for answer in cmd.answers:
            await conn.execute(_ANSWER_INSERT, qid, answer.name, answer.sequence, now)
        await write_audit(
            conn, actor, "question_created", "question", qid, summary={"answers": len(cmd.answers)}
        )
        return await _read(conn, qid)


async def get_question(pool: Pool, question_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return await _read(conn, question_id)


async def list_questions(
    pool: Pool, *, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, int)
    async with connection(pool) as conn:
        rows = [dict(r) for r in await conn.fetch(_LIST, key, after, size + 1)]
    return page(rows, size, "sequence")


async def patch_question(
    pool: Pool, actor: Actor, question_id: UUID, changes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Write the fields sent; the kind is locked once attendees answered (row locked)."""
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_LOCK, question_id)
        if current is None:
            raise errors.NotFound("No such question.")
        cur = dict(current)
        cur["question_type"] = str(cur["question_type"])
        new = merge_patch(cur, changes, _NOT_NULL)
        if new["question_type"] != cur["question_type"] and await conn.fetchval(
            _ANSWERED, question_id
        ):
            raise errors.QuestionKindLocked()
        await conn.execute(
            _UPDATE,
            question_id,
            new["title"],
            new["question_type"],
            new["is_mandatory_answer"],
            new["is_default"],
            new["is_reusable"],
            new["sequence"],
            now,
        )
        await write_audit(
            conn,
            actor,
            "question_updated",
            "question",
            question_id,
            summary={"fields": sorted(changes)},
        )
        return await _read(conn, question_id)


async def delete_question(pool: Pool, actor: Actor, question_id: UUID) -> None:
    """Delete a question attendees never answered (else 409 question_in_use)."""
    async with transaction(pool) as conn:
        if await conn.fetchval(_DELETE, question_id) is None:
            raise errors.NotFound("No such question.")
        await write_audit(conn, actor, "question_deleted", "question", question_id)


async def add_answer(
    pool: Pool, actor: Actor, question_id: UUID, cmd: AnswerCreate, now: datetime
) -> dict[str, Any]:
    """Add a suggested answer (question row locked)."""
    async with transaction(pool) as conn:
        if await conn.fetchrow(_LOCK, question_id) is None:
            raise errors.NotFound("No such question.")
        row = must(await conn.fetchrow(_ANSWER_INSERT, question_id, cmd.name, cmd.sequence, now))
        await write_audit(conn, actor, "answer_created", "question_answer", row["id"])
        return await _read(conn, question_id)


async def patch_answer(
    pool: Pool, actor: Actor, question_id: UUID, answer_id: UUID, changes: dict[str, Any]
) -> dict[str, Any]:
    """Rename or reorder a suggested answer."""
    async with transaction(pool) as conn:
        current = await conn.fetchrow(_ANSWER_LOCK, answer_id, question_id)
        if current is None:
            raise errors.NotFound("No such answer.")
        new = merge_patch(dict(current), changes, frozenset({"name", "sequence"}))
        await conn.execute(_ANSWER_UPDATE, answer_id, new["name"], new["sequence"])
        await write_audit(conn, actor, "answer_updated", "question_answer", answer_id)
        return await _read(conn, question_id)


async def delete_answer(pool: Pool, actor: Actor, question_id: UUID, answer_id: UUID) -> None:
    """Delete a suggested answer nobody chose (else 409 answer_in_use)."""
    async with transaction(pool) as conn:
        if await conn.fetchrow(_ANSWER_LOCK, answer_id, question_id) is None:
            raise errors.NotFound("No such answer.")
        await conn.execute(_ANSWER_DELETE, answer_id)
        await write_audit(conn, actor, "answer_deleted", "question_answer", answer_id)


async def link_question(
    pool: Pool,
    actor: Actor,
    event_id: UUID,
    question_id: UUID,
    sequence: int,
    *,
    once_per_order: bool = False,
) -> list[dict[str, Any]]:
    """Put a library question on an event, general (`once_per_order`) or specific (event
    row locked); answers the event's questions."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, event_id)
        await conn.execute(_LINK, event_id, question_id, sequence, once_per_order)
        await write_audit(
            conn, actor, "event_question_linked", "question", question_id, event_id=event_id
        )
        return [dict(r) for r in await conn.fetch(_EVENT_QUESTIONS, event_id)]


async def unlink_question(pool: Pool, actor: Actor, event_id: UUID, question_id: UUID) -> None:
    """Take a question off an event (answers already given stay)."""
    async with transaction(pool) as conn:
        await lock_event(conn, actor, event_id)
        if await conn.execute(_UNLINK, event_id, question_id) == "DELETE 0":
            raise errors.NotFound("The question is not on this event.")
        await write_audit(
            conn, actor, "event_question_unlinked", "question", question_id, event_id=event_id
        )


async def list_event_questions(pool: Pool, actor: Actor, event_id: UUID) -> list[dict[str, Any]]:
    async with transaction(pool) as conn:
        await get_event_row(conn, actor, event_id)
        return [dict(r) for r in await conn.fetch(_EVENT_QUESTIONS, event_id)]
