"""The company-shared configuration nouns: stages, tag categories, tags, event types.

They share one shape (create, read, list, patch, delete, each write audited),
so one set of verbs serves them, driven by a `Noun` that holds each noun's own
constant SQL. Their constraints (names, seat caps, references) answer typed
refusals through the constraint map in `db.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from events_svc import errors
from events_svc.actors import Actor
from events_svc.db import Connection, Pool, connection, must, transaction
from events_svc.verbs.audit import write_audit
from events_svc.verbs.common import check_timezone, clamp_limit, decode_cursor, merge_patch, page


@dataclass(frozen=True)
class Noun:
    """One configuration noun: its name, its writable fields in SQL order, its SQL."""

    kind: str
    fields: tuple[str, ...]
    not_null: frozenset[str]
    order_key: str
    key_type: type
    get_sql: str
    lock_sql: str
    list_sql: str
    insert_sql: str  # $1..$n = fields, $n+1 = now
    update_sql: str  # $1 = id, $2..$n+1 = fields, $n+2 = now
    delete_sql: str


STAGES = Noun(
    kind="stage",
    fields=("name", "description", "sequence", "fold", "pipe_end"),
    not_null=frozenset({"name", "description", "sequence", "fold", "pipe_end"}),
    order_key="sequence",
    key_type=int,
    get_sql="SELECT * FROM event.stages WHERE id = $1",
    lock_sql="SELECT * FROM event.stages WHERE id = $1 FOR UPDATE",
    list_sql="""
        SELECT * FROM event.stages WHERE ($1::int IS NULL OR (sequence, id) > ($1, $2::uuid))
        ORDER BY sequence, id LIMIT $3""",
    insert_sql="""
        INSERT INTO event.stages (name, description, sequence, fold, pipe_end, created_at,
            updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *""",
    update_sql="""
        UPDATE event.stages SET name = $2, description = $3, sequence = $4, fold = $5,
            pipe_end = $6, updated_at = $7 WHERE id = $1 RETURNING *""",
    delete_sql="DELETE FROM event.stages WHERE id = $1 RETURNING id",
)

TAG_CATEGORIES = Noun(
    kind="tag_category",
    fields=("name", "sequence"),
    not_null=frozenset({"name", "sequence"}),
    order_key="sequence",
    key_type=int,
    get_sql="SELECT * FROM event.tag_categories WHERE id = $1",
    lock_sql="SELECT * FROM event.tag_categories WHERE id = $1 FOR UPDATE",
    list_sql="""
        SELECT * FROM event.tag_categories
        WHERE ($1::int IS NULL OR (sequence, id) > ($1, $2::uuid))
        ORDER BY sequence, id LIMIT $3""",
    insert_sql="""
        INSERT INTO event.tag_categories (name, sequence, created_at, updated_at)
        VALUES ($1, $2, $3, $3) RETURNING *""",
    update_sql="""
        UPDATE event.tag_categories SET name = $2, sequence = $3, updated_at = $4
        WHERE id = $1 RETURNING *""",
    delete_sql="DELETE FROM event.tag_categories WHERE id = $1 RETURNING id",
)

TAGS = Noun(
    kind="tag",
    fields=("category_id", "name", "sequence", "color"),
    not_null=frozenset({"category_id", "name", "sequence"}),
    order_key="sequence",
    key_type=int,
    get_sql="SELECT * FROM event.tags WHERE id = $1",
    lock_sql="SELECT * FROM event.tags WHERE id = $1 FOR UPDATE",
    list_sql="""
        SELECT * FROM event.tags WHERE ($1::int IS NULL OR (sequence, id) > ($1, $2::uuid))
        ORDER BY sequence, id LIMIT $3""",
    insert_sql="""
        INSERT INTO event.tags (category_id, name, sequence, color, created_at, updated_at)
        VALUES ($1, $2, $3, $4, $5, $5) RETURNING *""",
    update_sql="""
        UPDATE event.tags SET category_id = $2, name = $3, sequence = $4, color = $5,
            updated_at = $6 WHERE id = $1 RETURNING *""",
    delete_sql="DELETE FROM event.tags WHERE id = $1 RETURNING id",
)

TYPES = Noun(
    kind="type",
    fields=("name", "note", "date_tz", "seats_limited", "seats_max"),
    not_null=frozenset({"name", "note", "date_tz", "seats_limited", "seats_max"}),
    order_key="name",
    key_type=str,
    get_sql="SELECT * FROM event.type_view t WHERE t.id = $1",
    lock_sql="SELECT * FROM event.types WHERE id = $1 FOR UPDATE",
    list_sql="""
        SELECT * FROM event.type_view t WHERE ($1::text IS NULL OR (t.name, t.id) > ($1, $2::uuid))
        ORDER BY t.name, t.id LIMIT $3""",
    insert_sql="""
        INSERT INTO event.types (name, note, date_tz, seats_limited, seats_max, created_at,
            updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id""",
    update_sql="""
        UPDATE event.types SET name = $2, note = $3, date_tz = $4, seats_limited = $5,
            seats_max = $6, updated_at = $7 WHERE id = $1 RETURNING id""",
    delete_sql="DELETE FROM event.types WHERE id = $1 RETURNING id",
)


_DELETE_TAGS = "DELETE FROM event.event_tags WHERE event_id = $1"
_INSERT_TAGS = """
INSERT INTO event.event_tags (event_id, tag_id) SELECT $1, unnest($2::uuid[])
ON CONFLICT DO NOTHING
"""
_MISSING_TAGS = """
SELECT t FROM unnest($1::uuid[]) t WHERE NOT EXISTS (SELECT 1 FROM event.tags WHERE id = t)
"""


async def set_event_tags(conn: Connection, event_id: UUID, tag_ids: list[UUID]) -> None:
    """Replace an event's tags (the caller holds the event row); an unknown tag is 422."""
    if await conn.fetch(_MISSING_TAGS, tag_ids):
        raise errors.ReferenceNotFound("A tag in tag_ids does not exist.", field="tag_ids")
    await conn.execute(_DELETE_TAGS, event_id)
    await conn.execute(_INSERT_TAGS, event_id, tag_ids)


_STAGE_HAS_EVENTS = "SELECT EXISTS (SELECT 1 FROM event.events WHERE stage_id = $1)"


def _validate(noun: Noun, values: dict[str, Any]) -> None:
    if "date_tz" in noun.fields and values.get("date_tz") is not None:
        check_timezone(values["date_tz"])


async def _read(conn: Connection, noun: Noun, obj_id: UUID) -> dict[str, Any]:
    row = await conn.fetchrow(noun.get_sql, obj_id)
    if row is None:
        raise errors.NotFound(f"No such {noun.kind.replace('_', ' ')}.")
    return dict(row)


async def create(
    pool: Pool, actor: Actor, noun: Noun, values: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Insert one row of the noun; audited."""
    _validate(noun, values)
    async with transaction(pool) as conn:
        row = must(await conn.fetchrow(noun.insert_sql, *(values[f] for f in noun.fields), now))
        await write_audit(conn, actor, f"{noun.kind}_created", noun.kind, row["id"])
        return await _read(conn, noun, row["id"])


async def get(pool: Pool, noun: Noun, obj_id: UUID) -> dict[str, Any]:
    async with connection(pool) as conn:
        return await _read(conn, noun, obj_id)


async def list_page(
    pool: Pool, noun: Noun, *, limit: int | None = None, cursor: str | None = None
) -> dict[str, Any]:
    size = clamp_limit(limit)
    after_key, after_id = decode_cursor(cursor, noun.key_type)
    async with connection(pool) as conn:
        rows = [dict(r) for r in await conn.fetch(noun.list_sql, after_key, after_id, size + 1)]
    return page(rows, size, noun.order_key)


async def patch(
    pool: Pool, actor: Actor, noun: Noun, obj_id: UUID, changes: dict[str, Any], now: datetime
) -> dict[str, Any]:
    """Write the fields sent (row locked first); audited with the changed field names."""
    async with transaction(pool) as conn:
        current = await conn.fetchrow(noun.lock_sql, obj_id)
        if current is None:
            raise errors.NotFound(f"No such {noun.kind.replace('_', ' ')}.")
        new = merge_patch(dict(current), changes, noun.not_null)
        _validate(noun, changes)
        changed = sorted(f for f in noun.fields if new[f] != current[f])
        # events reach a terminal stage only through mark-done, one by one, audited
        turning_terminal = noun is STAGES and "pipe_end" in changed and new["pipe_end"]
        if turning_terminal and await conn.fetchval(_STAGE_HAS_EVENTS, obj_id):
            raise errors.StageInUse(
                "Events are in this stage; mark them done instead.", field="pipe_end"
            )
        if changed:
            await conn.execute(noun.update_sql, obj_id, *(new[f] for f in noun.fields), now)
            await write_audit(
                conn, actor, f"{noun.kind}_updated", noun.kind, obj_id, summary={"fields": changed}
            )
        return await _read(conn, noun, obj_id)


async def delete(pool: Pool, actor: Actor, noun: Noun, obj_id: UUID) -> None:
    """Delete one row; rows still referenced answer the typed 409 of their constraint."""
    async with transaction(pool) as conn:
        if await conn.fetchval(noun.delete_sql, obj_id) is None:
            raise errors.NotFound(f"No such {noun.kind.replace('_', ' ')}.")
        await write_audit(conn, actor, f"{noun.kind}_deleted", noun.kind, obj_id)
