"""Lead rules: create, read, list, patch, delete, and the answer-to-rule bridge.

A rule is a name, `active`, a trigger (`create`, `confirm`) and typed predicates over the
closed vocabulary of axes (`event`, `event_type`, `company`, `question_answer`), each a
JSON array of uuids (`value_ids`) and, on the `question_answer` axis only, the question
(a DB CHECK). Predicates are ANDed, the ids of one predicate ORed. A `question_answer`
predicate must name answers of its question (422 `answer_not_of_question`).

**The company fence.** A rule belongs to the company of the actor that created it
(`company_id`; NULL: a platform rule, made by an actor without a company); a patch never
moves it. A company actor lists, reads, patches and deletes only its company's rules
(another company's, or a platform rule: 404 like a missing one); an actor without a
company sees every rule (`event.lead_rule_visible_to`). A predicate may name only what
the rule's company sees (`_check_scope`, on create, patch and the answer-to-rule bridge;
422 `lead_predicate_out_of_scope` naming the predicate, its axis and the offending ids):
events visible to it (`event.visible_to`: its own and shared ones; an unknown id answers
exactly like another company's), its own company on the `company` axis (any company for
a platform rule), existing types; questions are checked as before (an unknown one 422
`reference_not_found`). Types and questions are company-shared configuration, visible to
all: naming them is always in scope, and what keeps a rule on a shared type or question
inside its company is the walk's fence (the rule reaches only its company's and shared
events and registrations: `arming`, `worker`, `walk`).

Creating a rule active, activating it, or editing an active rule's predicates or trigger
queues every event it can match (`arming.queue_for_rule`). Writes are audited with
field names and axes, never values. Deleting a rule deletes its predicates and its
provenance (the groups it handed to the sink); the host's leads are untouched.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, transaction
from events_svc.models.leads import (
    LeadRuleCreate,
    LeadRuleFromAnswer,
    LeadRulePatch,
    predicates_of,
)
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import clamp_limit, decode_cursor, page
from events_svc.verbs.leads.arming import queue_for_rule

_GET = """
SELECT * FROM event.lead_rule_view
WHERE id = $1 AND event.lead_rule_visible_to(company_id, $2)
"""
_LIST = """
SELECT * FROM event.lead_rule_view
WHERE event.lead_rule_visible_to(company_id, $4)
  AND ($1::timestamptz IS NULL OR (created_at, id) > ($1, $2::uuid))
ORDER BY created_at, id LIMIT $3
"""
_INSERT = """
INSERT INTO event.lead_rules (name, active, trigger, company_id, created_at, updated_at)
VALUES ($1, $2, $3::event.lead_trigger, $5, $4, $4) RETURNING id
"""
_LOCK = """
SELECT id, name, active, trigger::text AS trigger, company_id FROM event.lead_rules
WHERE id = $1 AND event.lead_rule_visible_to(company_id, $2)
FOR NO KEY UPDATE  -- one writer of a rule at a time
"""
_UPDATE = """
UPDATE event.lead_rules SET name = $2, active = $3, trigger = $4::event.lead_trigger,
    updated_at = $5
WHERE id = $1
"""
_DELETE_PREDICATES = "DELETE FROM event.lead_rule_predicates WHERE rule_id = $1"
_INSERT_PREDICATES = """
INSERT INTO event.lead_rule_predicates (rule_id, axis, value_ids, question_id, position)
SELECT $1, a.axis::event.lead_predicate_axis, a.value_ids::jsonb, a.question_id, a.position
FROM unnest($2::text[], $3::text[], $4::uuid[], $5::int[])
    AS a(axis, value_ids, question_id, position)
"""
_DELETE = """
DELETE FROM event.lead_rules WHERE id = $1 AND event.lead_rule_visible_to(company_id, $2)
RETURNING id
"""
# what a predicate may name: events the rule's company sees, existing (shared) types
_EVENTS_SEEN = """
SELECT id FROM event.events WHERE id = ANY($1::uuid[]) AND event.visible_to(company_id, $2)
"""
_TYPES_SEEN = "SELECT id FROM event.types WHERE id = ANY($1::uuid[])"
_QUESTION = "SELECT title FROM event.questions WHERE id = $1"
_ANSWERS_OF = """
SELECT count(*) FROM event.question_answers WHERE question_id = $1 AND id = ANY($2::uuid[])
"""

_WRITABLE = ("name", "active", "trigger")


async def read_rule(conn: Connection, actor: Actor, rule_id: UUID) -> dict[str, Any]:
    """The rule's read model (predicates, groups per grain, last error) when the actor
    sees the rule; 404 otherwise (another company's rule answers like a missing one)."""
    row = await conn.fetchrow(_GET, rule_id, actor.company_id)
    if row is None:
        raise errors.NotFound("No such lead rule.")
    return dict(row)


async def _out_of_scope(
    conn: Connection, company: UUID | None, axis: str, value_ids: list[UUID]
) -> list[UUID]:
    """The ids of one predicate that name nothing the rule's company sees."""
    if axis == "event":
        seen = {r["id"] for r in await conn.fetch(_EVENTS_SEEN, value_ids, company)}
    elif axis == "event_type":
        seen = {r["id"] for r in await conn.fetch(_TYPES_SEEN, value_ids)}
    elif axis == "company":
        seen = set(value_ids) if company is None else {company}
    else:  # question_answer: questions are shared, their answers checked by _check_answers
        return []
    return [v for v in value_ids if v not in seen]


async def _check_scope(
    conn: Connection, company: UUID | None, predicates: list[dict[str, Any]]
) -> None:
    """Every predicate names only what the rule's company sees (`company`: the creating
    actor's, None for a platform rule, which may name anything that exists); 422
    `lead_predicate_out_of_scope` naming the first predicate that does not. An unknown id
    and another company's answer alike (the refusal tells nothing about other companies)."""
    for index, p in enumerate(predicates):
        offending = await _out_of_scope(conn, company, p["axis"], [UUID(v) for v in p["value_ids"]])
        if offending:
            raise errors.LeadPredicateOutOfScope(
                f"Predicate {index} (axis {p['axis']}) names ids outside the actor's scope.",
                field=f"predicates.{index}.value_ids",
                predicate=index,
                axis=p["axis"],
                value_ids=[str(v) for v in offending],
            )


async def _check_answers(conn: Connection, predicates: list[dict[str, Any]]) -> None:
    """A question_answer predicate names an existing question and answers of it."""
    for index, p in enumerate(predicates):
        if p["axis"] != "question_answer":
            continue
        if await conn.fetchval(_QUESTION, p["question_id"]) is None:
            raise errors.ReferenceNotFound(
                "No such question.", field=f"predicates.{index}.question_id"
            )
        answer_ids = [UUID(v) for v in p["value_ids"]]
        if await conn.fetchval(_ANSWERS_OF, p["question_id"], answer_ids) != len(answer_ids):
            raise errors.AnswerNotOfQuestion(
                "Every value of a question_answer predicate is an answer of its question.",
                field=f"predicates.{index}.value_ids",
                question_id=str(p["question_id"]),
            )


async def _write_predicates(
    conn: Connection, rule_id: UUID, predicates: list[dict[str, Any]]
) -> None:
    await conn.execute(
        _INSERT_PREDICATES,
        rule_id,
        [p["axis"] for p in predicates],
        [json.dumps(p["value_ids"]) for p in predicates],
        [p["question_id"] for p in predicates],
        list(range(len(predicates))),
    )


def _summary(fields: list[str], predicates: list[dict[str, Any]] | None) -> dict[str, Any]:
    summary: dict[str, Any] = {"fields": sorted(fields)}
    if predicates is not None:
        summary["axes"] = [p["axis"] for p in predicates]
    return summary


async def _create(
    conn: Connection,
    actor: Actor,
    name: str,
    active: bool,
    trigger: str,
    predicates: list[dict[str, Any]],
    now: datetime,
    verb: str,
) -> dict[str, Any]:
    """The rule belongs to the actor's company (None: a platform rule)."""
    await _check_scope(conn, actor.company_id, predicates)
    await _check_answers(conn, predicates)
    rule_id = await conn.fetchval(_INSERT, name, active, trigger, now, actor.company_id)
    await _write_predicates(conn, rule_id, predicates)
    queued = await queue_for_rule(conn, rule_id, now) if active else 0
    summary = {**_summary(["name", "active", "trigger", "predicates"], predicates)}
    summary["events_queued"] = queued
    await write_audit(conn, actor, verb, "lead_rule", rule_id, summary=summary)
    return await read_rule(conn, actor, rule_id)


async def create_rule(
    pool: Pool, actor: Actor, cmd: LeadRuleCreate, now: datetime
) -> dict[str, Any]:
    """A new rule of the actor's company; when active, every event it can match is
    queued."""
    async with transaction(pool) as conn:
        return await _create(
            conn,
            actor,
            cmd.name,
            cmd.active,
            cmd.trigger,
            predicates_of(cmd),
            now,
            "lead_rule_created",
        )


async def create_from_answer(
    pool: Pool, actor: Actor, cmd: LeadRuleFromAnswer, now: datetime
) -> dict[str, Any]:
    """A rule whose one predicate is (question, answers); named after the question unless
    a name is given. The answers must belong to the question; the rule belongs to the
    actor's company, and its scope is checked like any rule's."""
    predicate = {
        "axis": "question_answer",
        "value_ids": [str(v) for v in dict.fromkeys(cmd.answer_ids)],
        "question_id": cmd.question_id,
    }
    async with transaction(pool) as conn:
        title = await conn.fetchval(_QUESTION, cmd.question_id)
        if title is None:
            raise errors.ReferenceNotFound("No such question.", field="question_id")
        try:
            await _check_answers(conn, [predicate])
        except errors.AnswerNotOfQuestion:
            raise errors.AnswerNotOfQuestion(
                "Every answer must be an answer of the question.",
                field="answer_ids",
                question_id=str(cmd.question_id),
            ) from None
        name = cmd.name or f"Lead: {title}"[:256]
        return await _create(
            conn, actor, name, True, "create", [predicate], now, "lead_rule_created_from_answer"
        )


async def get_rule(pool: Pool, actor: Actor, rule_id: UUID) -> dict[str, Any]:
    async with transaction(pool) as conn:
        return await read_rule(conn, actor, rule_id)


async def list_rules(
    pool: Pool, actor: Actor, *, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    """The rules the actor sees, by creation (keyset)."""
    size = clamp_limit(limit)
    key, after = decode_cursor(cursor, datetime)
    async with transaction(pool) as conn:
        rows = [dict(r) for r in await conn.fetch(_LIST, key, after, size + 1, actor.company_id)]
    return page(rows, size, "created_at")


async def patch_rule(
    pool: Pool, actor: Actor, rule_id: UUID, cmd: LeadRulePatch, now: datetime
) -> dict[str, Any]:
    """Change a rule; `predicates`, when sent, replace them. Activating it, or changing
    the predicates or trigger of an active rule, queues the events it can match. The rule
    keeps its company; new predicates must stay within that company's scope (for a
    company actor, its own)."""
    changes = cmd.given()
    for name in (*_WRITABLE, "predicates"):
        if name in changes and changes[name] is None:
            raise errors.ValidationFailed(f"{name} cannot be null", field=name)
    async with transaction(pool) as conn:
        row = await conn.fetchrow(_LOCK, rule_id, actor.company_id)
        if row is None:
            raise errors.NotFound("No such lead rule.")
        current = dict(row)
        merged = {k: changes.get(k, current[k]) for k in _WRITABLE}
        predicates = predicates_of(cmd) if "predicates" in changes else None
        changed = [k for k in _WRITABLE if merged[k] != current[k]]
        if predicates is not None:
            await _check_scope(conn, current["company_id"], predicates)
            await _check_answers(conn, predicates)
            await conn.execute(_DELETE_PREDICATES, rule_id)
            await _write_predicates(conn, rule_id, predicates)
            changed.append("predicates")
        if changed:
            await conn.execute(
                _UPDATE, rule_id, merged["name"], merged["active"], merged["trigger"], now
            )
            rearm = merged["active"] and bool({"active", "trigger", "predicates"} & set(changed))
            summary = _summary(changed, predicates)
            summary["events_queued"] = await queue_for_rule(conn, rule_id, now) if rearm else 0
            await write_audit(
                conn, actor, "lead_rule_updated", "lead_rule", rule_id, summary=summary
            )
        return await read_rule(conn, actor, rule_id)


async def delete_rule(pool: Pool, actor: Actor, rule_id: UUID) -> None:
    """Delete a rule the actor sees, with its predicates and provenance."""
    async with transaction(pool) as conn:
        if await conn.fetchval(_DELETE, rule_id, actor.company_id) is None:
            raise errors.NotFound("No such lead rule.")
        await write_audit(conn, actor, "lead_rule_deleted", "lead_rule", rule_id)
