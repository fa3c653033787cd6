"""Database access: the pool, the one transaction helper, the constraint map.

Every verb opens its transaction through `transaction()`. The helper maps what
PostgreSQL says into refusals: a lock wait beyond `lock_timeout`, a deadlock and a
serialization failure are `busy` (503 + Retry-After; never a 500: the lock order
below makes deadlocks rare, this makes them harmless), a lost connection is
`database_unavailable`, and a
violated constraint becomes the refusal registered for its NAME below. A
constraint name missing from the map is a bug and surfaces as a 500.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import asyncpg.pool

from events_svc import errors
from events_svc.settings import Settings

Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
Connection: TypeAlias = "asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
Record: TypeAlias = asyncpg.Record

# (refusal when a row is written, refusal when a referenced row is deleted)
_FK = tuple[type[errors.DomainError], type[errors.DomainError]]

# Constraint name -> refusal. Foreign keys carry a pair: the insert/update side
# ("the referenced row is missing") and the delete side ("still referenced").
CONSTRAINT_ERRORS: dict[str, type[errors.DomainError] | _FK] = {
    # names
    "stages_name_not_blank": errors.ValidationFailed,
    "tag_categories_name_not_blank": errors.ValidationFailed,
    "tags_name_not_blank": errors.ValidationFailed,
    "questions_title_not_blank": errors.ValidationFailed,
    "question_answers_name_not_blank": errors.ValidationFailed,
    "types_name_not_blank": errors.ValidationFailed,
    "type_tickets_name_not_blank": errors.ValidationFailed,
    "events_name_not_blank": errors.ValidationFailed,
    "tickets_name_not_blank": errors.ValidationFailed,
    "api_tokens_name_not_blank": errors.ValidationFailed,
    "message_templates_name_not_blank": errors.ValidationFailed,
    "tags_color_range": errors.ValidationFailed,
    # dates, seats, caps, urls
    "events_date_order": errors.DateOrder,
    "slots_date_order": errors.DateOrder,
    "tickets_sale_window_order": errors.DateOrder,
    "events_seats_max_nonneg": errors.SeatsMaxNegative,
    "tickets_seats_max_nonneg": errors.SeatsMaxNegative,
    "types_seats_max_nonneg": errors.SeatsMaxNegative,
    "type_tickets_seats_max_nonneg": errors.SeatsMaxNegative,
    "tickets_per_order_cap_range": errors.PerOrderCapOutOfRange,
    "type_tickets_per_order_cap_range": errors.PerOrderCapOutOfRange,
    "events_url_absolute": errors.EventUrlNotAbsolute,
    "questions_default_is_reusable": errors.DefaultQuestionNotReusable,
    "type_mails_interval_nbr_nonneg": errors.ValidationFailed,
    "mails_interval_nbr_nonneg": errors.ValidationFailed,
    # links and references
    "tags_category_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "events_type_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "events_stage_fkey": (errors.ReferenceNotFound, errors.StageInUse),
    "event_tags_pkey": errors.AlreadyLinked,
    "event_tags_tag_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "event_tags_event_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "tickets_event_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "slots_event_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "type_mails_type_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "type_tickets_type_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "type_questions_pkey": errors.AlreadyLinked,
    "type_questions_type_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "type_questions_question_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "registration_questions_pkey": errors.AlreadyLinked,
    "registration_questions_event_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "registration_questions_question_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "question_answers_question_fkey": (errors.ReferenceNotFound, errors.Conflict),
    # registrations hold their event, ticket, slot, question and chosen answer
    "registrations_event_fkey": (errors.ReferenceNotFound, errors.EventHasRegistrations),
    "registrations_event_multi_slots_fkey": (
        errors.ReferenceNotFound,
        errors.EventHasRegistrations,
    ),
    "registrations_slot_in_event_fkey": (errors.ReferenceNotFound, errors.SlotHasRegistrations),
    "registrations_ticket_in_event_fkey": (
        errors.ReferenceNotFound,
        errors.TicketHasRegistrations,
    ),
    "registrations_slot_required": errors.RegistrationsWithoutSlot,
    "registration_answers_question_fkey": (errors.ReferenceNotFound, errors.QuestionInUse),
    "registration_answers_answer_of_question_fkey": (
        errors.AnswerNotOfQuestion,
        errors.AnswerInUse,
    ),
    "registration_answers_value_xor": errors.ValidationFailed,
    "mails_event_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "mail_slots_slot_fkey": (errors.ReferenceNotFound, errors.Conflict),
    # booths (0014): the exclusivity index and the order-line claim are the walls
    "booth_categories_name_not_blank": errors.ValidationFailed,
    "booth_categories_product_ref_length": errors.ValidationFailed,
    "tickets_product_ref_length": errors.ValidationFailed,
    "booths_name_not_blank": errors.ValidationFailed,
    "type_booths_name_not_blank": errors.ValidationFailed,
    "booths_event_fkey": (errors.ReferenceNotFound, errors.EventHasBooths),
    "booths_category_fkey": (errors.ReferenceNotFound, errors.BoothCategoryInUse),
    "type_booths_type_fkey": (errors.ReferenceNotFound, errors.Conflict),
    "type_booths_category_fkey": (errors.ReferenceNotFound, errors.BoothCategoryInUse),
    "booth_order_lines_event_fkey": (errors.ReferenceNotFound, errors.EventHasBooths),
    "booth_bookings_booth_fkey": (errors.BoothNotFound, errors.BoothHasBookings),
    "booth_bookings_order_line_event_fkey": (errors.BoothEventMismatch, errors.Conflict),
    "booth_bookings_order_line_booth_key": errors.AlreadyLinked,
    "booths_confirmed_exclusivity": errors.BoothAlreadyConfirmed,
    "mails_channel_follows_kind": errors.ChannelKindMismatch,
    # lead rules (0016): the shapes are checked by the models first
    "lead_rules_name_not_blank": errors.ValidationFailed,
    "lead_rules_name_length": errors.ValidationFailed,
    "lead_rule_predicates_question_on_answer_axis": errors.ValidationFailed,
    "lead_rule_predicates_value_ids_shape": errors.ValidationFailed,
    "lead_rule_predicates_question_fkey": (errors.ReferenceNotFound, errors.QuestionInUse),
    "type_mails_channel_follows_kind": errors.ChannelKindMismatch,
    # attendance imports (0018): an event deleted while its import was being created
    "attendance_imports_event_fkey": (errors.NotFound, errors.Conflict),
    # webhooks (0032): an event or an endpoint deleted while a row naming it was written
    "webhook_endpoints_event_id_fkey": (errors.NotFound, errors.Conflict),
    "webhook_deliveries_message_id_fkey": (errors.NotFound, errors.Conflict),
    "webhook_deliveries_endpoint_id_fkey": (errors.NotFound, errors.Conflict),
    "webhook_messages_endpoint_id_fkey": (errors.NotFound, errors.Conflict),
}


def refusal_for(exc: asyncpg.IntegrityConstraintViolationError) -> errors.DomainError | None:
    """The refusal registered for the violated constraint, or None (a bug)."""
    name = getattr(exc, "constraint_name", None)
    entry = CONSTRAINT_ERRORS.get(name or "")
    if entry is None:
        return None
    if isinstance(entry, tuple):
        # RESTRICT (23001) and NO ACTION ("is still referenced from") are the delete side
        referenced = isinstance(exc, asyncpg.RestrictViolationError) or "referenced from" in (
            getattr(exc, "detail", "") or ""
        )
        cls = entry[1] if referenced else entry[0]
    else:
        cls = entry
    # the constraint name is safe to show; the server's detail may hold values: never shown
    return cls(constraint=name)


CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ConnectionError,
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.ConnectionDoesNotExistError,
    asyncpg.InterfaceError,
    TimeoutError,
    # the server is going away (a fast shutdown, a crash, a standby being promoted, the
    # database dropped, an idle session ended: every operator intervention but a
    # cancelled statement, which `_translate` answers as busy first)
    asyncpg.OperatorInterventionError,
    # the reconnect storm after a promote meeting max_connections
    asyncpg.TooManyConnectionsError,
    # the connection sits on a server that takes no writes: a standby, such as the old
    # primary started again as one (`_dropped_when_broken` drops the connection)
    asyncpg.ReadOnlySQLTransactionError,
    # every host of the URL answered, none takes writes (mid-failover)
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    # a session the server ended mid-operation can leave asyncpg's protocol between two
    # states ("another operation is in progress"): the connection is gone, not the code
    # wrong (`_dropped_when_broken` drops it)
    asyncpg.InternalClientError,
)


def _translate(exc: BaseException) -> BaseException:
    if isinstance(exc, errors.DomainError):
        return exc
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return errors.Busy()
    if isinstance(exc, asyncpg.TransactionRollbackError):  # deadlock, serialization failure
        return errors.Busy("A concurrent change got in the way; retry shortly.")
    if isinstance(exc, asyncpg.QueryCanceledError):
        return errors.Busy("The statement took too long; retry shortly.")
    if isinstance(exc, asyncpg.IntegrityConstraintViolationError):
        refusal = refusal_for(exc)
        return refusal if refusal is not None else exc
    if isinstance(exc, CONNECTION_ERRORS):
        return errors.DatabaseUnavailable()
    return exc


async def takes_writes(conn: Connection) -> bool:
    """Whether the server of `conn` takes writes (not a standby, not read-only): what
    `/readyz` asks, so a load balancer leaves a process whose database is a standby (a
    pooler still pointing at the old primary's standby, say)."""
    return bool(await conn.fetchval("SELECT current_setting('transaction_read_only') = 'off'"))


_BROKEN: tuple[type[BaseException], ...] = (
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.InternalClientError,
)


@asynccontextmanager
async def _dropped_when_broken(conn: Connection) -> AsyncIterator[None]:
    """A connection that met a server taking no writes (a standby, such as a server the URL
    named as primary before a failover, started again as a standby), or whose protocol a
    server's sudden end left mid-operation, is dropped, not handed back: the pool makes
    the next one afresh, to the new primary (several hosts in the URL and
    `target_session_attrs=read-write`)."""
    try:
        yield
    except _BROKEN:
        conn.terminate()
        raise


@asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """One verb, one transaction: acquire, BEGIN, yield, COMMIT; map failures to refusals."""
    try:
        async with pool.acquire() as conn, _dropped_when_broken(conn), conn.transaction():
            timeouts = getattr(conn, "local_timeouts", None)
            if timeouts is not None:  # behind a transaction pooler: this transaction's own
                await conn.execute(_LOCAL_TIMEOUTS, *timeouts)
            yield conn
    except BaseException as exc:
        mapped = _translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc


@asynccontextmanager
async def connection(pool: Pool) -> AsyncIterator[Connection]:
    """A connection for reads that need no transaction; failures mapped like writes."""
    try:
        async with pool.acquire() as conn, _dropped_when_broken(conn):
            yield conn
    except BaseException as exc:
        mapped = _translate(exc)
        if mapped is exc:
            raise
        raise mapped from exc


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Release without the reset query (one round trip saved per request).

    asyncpg still rolls back an open transaction before this runs. Pooled connections
    never take session state (no SET, advisory lock or cursor; a transaction's own
    `SET LOCAL` ends with it): the migration runner uses a connection of its own, and so
    does the scheduler's LISTEN when the database URL is known. A host that hands in only
    a pool lends the loop one pooled connection for LISTEN, which the loop holds for its
    whole life and unlistens before giving it back.
    """


_IDLE_IN_TRANSACTION_MS = 60000
_LOCAL_TIMEOUTS = """
SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
    set_config('idle_in_transaction_session_timeout', $3, true)
"""


class TransactionPooled(asyncpg.Connection):
    """A connection through a transaction pooler (PgBouncer, `pool_mode = transaction`):
    its server session is anyone's between two transactions, so it keeps no state there.
    The timeouts, which a direct connection sets once at its start, are set by each
    transaction for itself (`SET LOCAL`, by `transaction()`); a statement outside a
    transaction runs under the role's settings (docs/operations.md, "Connection
    poolers")."""

    local_timeouts: tuple[str, str, str] | None = None


def each_host(url: str) -> list[str]:
    """A URL naming several hosts (`h1:5432,h2:5432`) as one URL per host, in order, each
    with the rest of the URL (user, database, `target_session_attrs`); one host: itself."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    hosts = hostlist.split(",")
    if len(hosts) < 2:
        return [url]
    return [urlunsplit(parts._replace(netloc=userinfo + at + host)) for host in hosts]


async def connect_host_by_host(dsn: str | None = None, **options: Any) -> Any:
    """`asyncpg.connect`, host by host, each with the whole `timeout`: asyncpg's own
    connect spends one timeout over every host of the URL, so a first host that does not
    answer at all (a machine powered off or cut off mid-failover, rather than a refused
    connection) would use it up and the new primary after it would never be tried."""
    if dsn is None:  # the parts given one by one: asyncpg's own way
        return await asyncpg.connect(**options)
    failure: BaseException | None = None
    for one in each_host(dsn):
        try:
            return await asyncpg.connect(one, **options)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            failure = exc
    assert failure is not None
    raise failure


class BoundedPool(asyncpg.Pool):
    """The pool, whose `acquire` waits at most `wait_s` by default for a connection (a free
    one, or a new one made): past it, `TimeoutError`, which a verb answers as 503
    `database_unavailable`. A database that stops answering (a primary frozen or cut off
    mid-failover) then makes requests wait a bounded time, not for as long as the
    connections it holds stay stuck."""

    __slots__ = ("wait_s",)
    wait_s: float

    def acquire(self, *, timeout: float | None = None) -> Any:
        return super().acquire(timeout=self.wait_s if timeout is None else timeout)


async def create_pool(url: str, settings: Settings) -> Pool:
    """The asyncpg pool, sized and bounded by settings.

    Direct (or through a session pooler): prepared statements cached per connection and
    the timeouts set once as session settings at connect. Behind a transaction pooler
    (`EVENTS_DB_POOLER=transaction`): no prepared-statement cache (a named statement would
    live on one server session and be asked for on another), and only the startup
    parameters PgBouncer keeps per client (`application_name`, `TimeZone`), the timeouts
    set by each transaction (`TransactionPooled`)."""
    timeouts = {
        "lock_timeout": str(settings.lock_timeout_ms),
        "statement_timeout": str(settings.statement_timeout_ms),
        "idle_in_transaction_session_timeout": str(_IDLE_IN_TRANSACTION_MS),
    }
    pooled = settings.db_pooler == "transaction"
    init = _init_connection
    if pooled:

        async def init(conn: asyncpg.Connection[asyncpg.Record]) -> None:
            await _init_connection(conn)
            conn.local_timeouts = tuple(timeouts.values())  # type: ignore[attr-defined]

    server_settings = {"application_name": "events-svc", "TimeZone": "UTC"}
    pool = BoundedPool(
        url,
        min_size=settings.pool_min,
        max_size=settings.pool_max,
        timeout=settings.connect_timeout_s,
        command_timeout=settings.statement_timeout_ms / 1000 + 5,
        init=init,
        reset=_keep_session,
        server_settings=server_settings if pooled else {**server_settings, **timeouts},
        statement_cache_size=0 if pooled else 100,
        connection_class=TransactionPooled if pooled else asyncpg.Connection,
        record_class=asyncpg.Record,
        max_queries=50000,
        max_inactive_connection_lifetime=300.0,
        loop=None,
        connect=connect_host_by_host,
    )
    pool.wait_s = float(settings.pool_wait_s)
    await pool
    return pool


def affected(status: str) -> int:
    """The rows a statement touched, from its command status (`UPDATE 3`, `INSERT 0 3`)."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def must(row: Record | None) -> dict[str, Any]:
    """A row the statement always returns (INSERT/UPDATE ... RETURNING on a locked row)."""
    if row is None:
        raise RuntimeError("statement returned no row")
    return dict(row)
