"""Migration 0024 (seam orders are company-scoped) on rows written before it: each order,
registration, booking, order line and inbox key takes its company from what it recorded,
and the facts that follow act on the right company's order (real PostgreSQL: migrated up
to 0023, rows written as the old seam wrote them, then migrated on)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from events_svc import migrate
from events_svc.actors import SYSTEM, Actor
from events_svc.db import create_pool
from events_svc.models.sale import OrderConfirmed, OrderFact
from events_svc.settings import Settings
from events_svc.verbs.sale import seam
from tests.probes.helpers import migrate_before

NOW = datetime(2027, 1, 1, tzinfo=UTC)
_OLD_ORDER = (
    "INSERT INTO event.sale_orders (order_id, state, amount_is_zero) VALUES ($1, 'sent', false)"
)
A, B = uuid.uuid4(), uuid.uuid4()


async def _event(conn: asyncpg.Connection, company: uuid.UUID | None) -> uuid.UUID:
    return await conn.fetchval(
        "INSERT INTO event.events (name, date_begin, date_end, company_id)"
        " VALUES ('E', '2027-05-10T09:00Z', '2027-05-12T18:00Z', $1) RETURNING id",
        company,
    )


async def _rows(conn: asyncpg.Connection, event_id: uuid.UUID, order: uuid.UUID, n: int) -> list:
    """Rows as the old seam minted them: draft, to_pay, origin sale, the event's company."""
    return [
        await conn.fetchval(
            "INSERT INTO event.registrations (event_id, state, barcode, sale_status,"
            " sale_order_id, sale_order_state, sale_amount_is_zero, state_origin, company_id)"
            " SELECT $1, 'draft', $2, 'to_pay', $3, 'sent', false, 'sale', company_id"
            " FROM event.events WHERE id = $1 RETURNING id",
            event_id,
            str(uuid.uuid4().int)[:20],
            order,
        )
        for _ in range(n)
    ]


async def _inbox(
    conn: asyncpg.Connection,
    company: uuid.UUID | None,
    key: str,
    verb: str,
    order: uuid.UUID,
    ids: list[uuid.UUID],
) -> None:
    await conn.execute(
        "INSERT INTO event.seam_inbox (consumer, external_id, verb, order_id, outcome,"
        " registration_ids) VALUES ($1, $2, $3, $4, 'applied', $5)",
        f"event_sale:{company or '*'}",
        key,
        verb,
        order,
        ids,
    )


async def _booth(conn: asyncpg.Connection, event_id: uuid.UUID) -> uuid.UUID:
    category = await conn.fetchval(
        "INSERT INTO event.booth_categories (name) VALUES ('Stand') RETURNING id"
    )
    return await conn.fetchval(
        "INSERT INTO event.booths (event_id, name, booth_category_id) VALUES ($1, 'B', $2)"
        " RETURNING id",
        event_id,
        category,
    )


async def _booking(
    conn: asyncpg.Connection,
    booth: uuid.UUID,
    event_id: uuid.UUID,
    order: uuid.UUID,
    line: uuid.UUID,
) -> uuid.UUID:
    await conn.execute(
        "INSERT INTO event.booth_order_lines (order_line_id, event_id, order_id)"
        " VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        line,
        event_id,
        order,
    )
    return await conn.fetchval(
        "INSERT INTO event.booth_bookings (event_booth_id, event_id, order_id, order_line_id)"
        " VALUES ($1, $2, $3, $4) RETURNING id",
        booth,
        event_id,
        order,
        line,
    )


async def test_rows_written_before_the_migration_keep_working_as_their_companys(
    empty_db_url: str, tmp_path: Path
):
    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrate_before(conn, tmp_path / "before", "0024")
        ev_a, shared = await _event(conn, A), await _event(conn, None)
        # order X: A's seam confirmed it on its event and a shared one, with a booth line;
        # B's officer booked a shared booth for an order X of its own
        x, y = uuid.uuid4(), uuid.uuid4()
        x_rows = await _rows(conn, ev_a, x, 1) + await _rows(conn, shared, x, 1)
        await _inbox(conn, A, f"confirmed:{x}", "confirmed", x, x_rows)
        await conn.execute(_OLD_ORDER, x)
        line = uuid.uuid4()
        a_booth, b_booth = await _booth(conn, shared), await _booth(conn, shared)
        await _booking(conn, a_booth, shared, x, line)
        b_booking = await _booking(conn, b_booth, shared, x, line)  # the old claim was global
        await conn.execute(
            "INSERT INTO event.event_audit_log (actor_id, actor_kind, company_id, verb,"
            " object_kind, object_id) VALUES ('t', 'token', $1, 'booth_booking_created',"
            " 'booth_booking', $2)",
            B,
            b_booking,
        )
        # order Y: a platform actor confirmed it on A's event and a shared one
        y_rows = await _rows(conn, ev_a, y, 1) + await _rows(conn, shared, y, 1)
        await _inbox(conn, None, f"confirmed:{y}", "confirmed", y, y_rows)
        await conn.execute(_OLD_ORDER, y)
        # order Z: B confirmed it; then A's paid fact for Z applied (the attack) and marked
        # the one global order row paid
        ev_b = await _event(conn, B)
        z = uuid.uuid4()
        z_rows = await _rows(conn, ev_b, z, 1)
        await _inbox(conn, B, f"confirmed:{z}", "confirmed", z, z_rows)
        await _inbox(conn, A, f"paid:{z}", "paid", z, [])
        await conn.execute(_OLD_ORDER, z)
        await conn.execute(
            "UPDATE event.sale_orders SET state = 'sale', paid_at = now() WHERE order_id = $1", z
        )
        await migrate.apply(conn, migrate.default_dir())

        async def companies(sql: str, *args: Any) -> set[Any]:
            return {r[0] for r in await conn.fetch(sql, *args)}

        order_companies = "SELECT company_id FROM event.sale_orders WHERE order_id = $1"
        assert await companies(order_companies, x) == {A, B}  # B's booking made it B's too
        assert await companies(order_companies, y) == {A}  # the company of its events
        row_companies = (
            "SELECT sale_order_company_id FROM event.registrations WHERE id = ANY($1::uuid[])"
        )
        assert await companies(row_companies, x_rows) == {A}
        assert await companies(row_companies, y_rows) == {A}
        assert await companies("SELECT consumer FROM event.seam_inbox WHERE order_id = $1", y) == {
            f"event_sale:{A}"
        }
        assert await companies(
            "SELECT company_id FROM event.booth_order_lines WHERE order_line_id = $1", line
        ) == {A, B}  # one claim per company
        split = await conn.fetch(
            "SELECT company_id, state::text, paid_at IS NOT NULL AS paid"
            " FROM event.sale_orders WHERE order_id = $1",
            z,
        )
        assert {tuple(r) for r in split} == {(A, "sale", True), (B, "sent", False)}
    finally:
        await conn.close()

    pool = await create_pool(empty_db_url, Settings(database_url=empty_db_url, pool_max=4))
    try:
        actor_a = Actor(id="a", kind="token", scopes=frozenset({"seam:write"}), company_id=A)
        paid = OrderFact(order_id=x)
        answer = await seam.deliver(
            pool,
            actor_a,
            "paid",
            paid,
            lambda c, order: seam.apply_paid(c, actor_a, order, NOW),
            NOW,
        )
        assert sorted(answer["registration_ids"]) == sorted(x_rows)  # the shared row too
        async with pool.acquire() as c:
            paid_booths = await companies_of(c, "SELECT id FROM event.booths WHERE is_paid")
        assert paid_booths == {a_booth}  # B's booking of its own order X stays unpaid
        # the platform's recorded confirmation of Y now lives with A's order: answered again
        body = OrderConfirmed.model_validate(
            {
                "order_id": str(y),
                "amount_total": "10",
                "currency": "EUR",
                "lines": [
                    {
                        "line_id": str(uuid.uuid4()),
                        "event_id": str(ev_a),
                        "attendees": [{"name": "N"}],
                    }
                ],
            }
        )
        again = await seam.deliver(
            pool,
            SYSTEM,
            "confirmed",
            body,
            lambda c, order: seam.apply_confirmed(c, SYSTEM, body, order, NOW),
            NOW,
        )
        assert again["outcome"] == "already_applied"
        assert sorted(again["registration_ids"]) == sorted(y_rows)
    finally:
        await pool.close()


async def companies_of(conn: Any, sql: str) -> set[Any]:
    return {r[0] for r in await conn.fetch(sql)}
