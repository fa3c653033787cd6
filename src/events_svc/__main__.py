"""The `events-svc` command: builds Settings and runs one subcommand.

serve [--workers N]        start PostgreSQL (embedded unless EVENTS_DATABASE_URL),
                           apply migrations, serve the API (and the loop)
migrate                    apply pending migrations and exit
token create|list|revoke   manage bearer API tokens
scheduler run-once         every pass once, now, as the loop runs them (--sweep: the done
                           sweep too); prints {passes, more} as JSON, exits 1 when one failed
outbox drain --once        send what the outbox holds now (SMTP, sms gateway), then exit
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import uvicorn

from events_svc import errors, migrate
from events_svc.adapters.standalone import standalone_ports
from events_svc.app import create_app
from events_svc.db import connect_host_by_host, create_pool
from events_svc.embedded import EmbeddedError, EmbeddedPostgres, running_url
from events_svc.loops import Drainer, DrainOptions, Entry, Services, compose_passes
from events_svc.observability import configure_logging
from events_svc.ports import close_ports
from events_svc.settings import Settings, SettingsError
from events_svc.verbs import tokens

log = logging.getLogger("events_svc.cli")


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _now() -> datetime:
    return datetime.now(UTC)


@contextlib.contextmanager
def database(settings: Settings) -> Iterator[str]:
    """The database URL: the configured one, a running embedded server, or a started one."""
    if settings.database_url:
        yield settings.database_url
        return
    attached = running_url(settings.data_dir)
    if attached:
        yield attached
        return
    server = EmbeddedPostgres(settings.data_dir)
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


async def _apply(url: str, settings: Settings) -> list[str]:
    """Apply the migrations over a session of their own (their advisory lock is a session
    lock): the direct URL behind a transaction pooler."""
    url = settings.database_direct_url or url
    conn = await connect_host_by_host(url, timeout=settings.connect_timeout_s)
    try:
        return await migrate.apply(conn, settings.migrations_dir or migrate.default_dir())
    finally:
        await conn.close()


def cmd_migrate(settings: Settings, _: argparse.Namespace) -> int:
    with database(settings) as url:
        applied = asyncio.run(_apply(url, settings))
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    host = args.host or settings.host
    port = args.port or settings.port
    workers = args.workers
    server: EmbeddedPostgres | None = None
    url = settings.database_url
    if url is None:
        server = EmbeddedPostgres(settings.data_dir)
        url = server.start()
        print(f"events-svc: embedded PostgreSQL data in {server.pgdata}", flush=True)
        print(f"events-svc: database URL {url}", flush=True)
    try:
        applied = asyncio.run(_apply(url, settings))
        print(f"events-svc: migrations applied: {len(applied)}", flush=True)
        for line in delivery_notice(settings):
            print(f"events-svc: {line}", flush=True)
        if workers > 1:
            # each worker process builds its own app from the environment (same database,
            # and the address it really listens on: the console cookie's default follows it)
            os.environ["EVENTS_DATABASE_URL"] = url
            os.environ["EVENTS_HOST"] = host
            target: Any = "events_svc.app:app_from_env"
        else:
            target = create_app(dataclasses.replace(settings, database_url=url, host=host))
        config = uvicorn.Config(
            target,
            host=host,
            port=port,
            log_level=settings.log_level.lower(),
            log_config=None,  # our JSON lines, not uvicorn's own formats
            access_log=False,  # one line per request comes from RequestObserver
            timeout_graceful_shutdown=30,
            # the client address is the socket peer; only the throttle reads forwarding
            # headers, and only from EVENT_TRUSTED_PROXY_IPS (throttle.client_ip)
            proxy_headers=False,
        )
        print(f"events-svc: serving on http://{host}:{port} ({workers} process(es))", flush=True)
        # uvicorn re-raises the signal that stopped it once it has drained; turn
        # SIGTERM into SystemExit so the embedded server below is stopped too.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        if workers > 1:
            uvicorn.run(
                target,
                factory=True,
                workers=workers,
                host=host,
                port=port,
                log_level=settings.log_level.lower(),
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=30,
                proxy_headers=False,
            )
        else:
            uvicorn.Server(config).run()
    finally:
        if server is not None:
            server.stop()
            print("events-svc: embedded PostgreSQL stopped", flush=True)
    return 0


def _with_pool(settings: Settings, work: Callable[[Any], Any]) -> Any:
    async def run(url: str) -> Any:
        pool = await create_pool(url, settings)
        try:
            return await work(pool)
        finally:
            await pool.close()

    with database(settings) as url:
        return asyncio.run(run(url))


def cmd_token(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "create":
        scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
        company: UUID | None = UUID(args.company) if args.company else None
        token, row = _with_pool(
            settings, lambda pool: tokens.create_token(pool, args.name, scopes, company, _now())
        )
        print(f"token id {row['id']} ({row['name']}, scopes {','.join(row['scopes'])})")
        print("the token is shown once; store it now:")
        print(token)
        return 0
    if args.action == "list":
        rows = _with_pool(settings, tokens.list_tokens)
        for row in rows:
            state = "revoked" if row["revoked_at"] else "live"
            owner = row["company_id"] or "-"
            print(
                f"{row['id']}  {row['token_prefix']}…  {state:7}  {row['name']}  "
                f"scopes={','.join(row['scopes'])}  company={owner}  "
                f"last_used={row['last_used_at'] or '-'}"
            )
        return 0
    row = _with_pool(settings, lambda pool: tokens.revoke_token(pool, UUID(args.id), _now()))
    print(
        f"revoked {row['id']} ({row['name']}) at {row['revoked_at']}; "
        f"console sessions ended: {row['console_sessions_ended']}"
    )
    return 0


def cmd_scheduler(settings: Settings, args: argparse.Namespace) -> int:
    """`scheduler run-once`: every pass of the one composition once, now, as the loop and
    `POST /admin/schedulers/run` run them (the done sweep only with --sweep); prints
    `{passes, more}` as one JSON object on stdout (logs go to stderr) and exits 1 when a
    pass failed."""

    async def once(pool: Any) -> dict[str, Any]:
        ports = standalone_ports(settings=settings, database=lambda: pool)
        passes = compose_passes(Services(lambda: pool, ports, settings, _now))
        try:
            reports = await passes.run(Entry("cli", sweep=args.sweep))
        finally:
            await passes.close()
            await close_ports(ports)
        return {
            "passes": [r.view() for r in reports],
            "more": any(r.more for r in reports),
        }

    result = _with_pool(settings, once)
    print(json.dumps(result, sort_keys=True))
    return 1 if any(p["status"] == "failed" for p in result["passes"]) else 0


def delivery_notice(settings: Settings) -> list[str]:
    """What `serve` says once at startup about the outbox: one line naming the held
    channels and how to turn their delivery on (and one more when this process sends
    nothing although a relay is set)."""
    lines = []
    held = []
    if settings.smtp is None:
        held.append(("mail", "EVENTS_SMTP_URL and EVENTS_MAIL_FROM"))
    if not settings.sms_gateway_url:
        held.append(("sms", "EVENTS_SMS_GATEWAY_URL and EVENTS_SMS_GATEWAY_SECRET"))
    if held:
        channels = " and ".join(channel for channel, _ in held)
        verb = "are" if len(held) > 1 else "is"
        how = ", ".join(f"set {names} to send {channel}" for channel, names in held)
        lines.append(f"{channels} {verb} held in the outbox (delivery_state queued): {how}")
    if (settings.smtp is not None or settings.sms_gateway_url) and not settings.scheduler_enabled:
        lines.append(
            "EVENT_SCHEDULER_ENABLED=false: this process sends nothing from the outbox "
            "(another process, or `events-svc outbox drain --once`, must)"
        )
    return lines


def cmd_outbox(settings: Settings, args: argparse.Namespace) -> int:
    """`outbox drain --once`: claim and send every due message now, then print the summary
    as JSON (exit 1 when no transport is configured)."""
    if settings.smtp is None and not settings.sms_gateway_url:
        print(
            "events-svc: nothing can be sent: set EVENTS_SMTP_URL (and EVENTS_MAIL_FROM) or "
            "EVENTS_SMS_GATEWAY_URL",
            file=sys.stderr,
        )
        return 1

    async def drain(pool: Any) -> dict[str, Any]:
        ports = standalone_ports(settings=settings, database=lambda: pool)
        drainer = Drainer(
            lambda: pool, ports.transports, DrainOptions.from_settings(settings), _now
        )
        try:
            return (await drainer.drain()).as_dict()
        finally:
            await close_ports(ports)  # the transports, and the lead sink's client

    print(json.dumps(_with_pool(settings, drain), sort_keys=True))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="events-svc", description="Event registration service")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="start the service")
    serve.add_argument("--host", help="listen address (default EVENTS_HOST)")
    serve.add_argument("--port", type=int, help="listen port (default EVENTS_PORT)")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="service processes sharing the port (each runs the loop)",
    )
    sub.add_parser("migrate", help="apply pending migrations")
    token = sub.add_parser("token", help="manage API tokens")
    actions = token.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="mint a token (printed once)")
    create.add_argument("--name", required=True)
    create.add_argument(
        "--scopes", required=True, help="comma-separated, e.g. event:read,event:write"
    )
    create.add_argument("--company", help="company UUID (omit for a platform operator)")
    actions.add_parser("list", help="list tokens (never the tokens themselves)")
    revoke = actions.add_parser("revoke", help="revoke a token by id")
    revoke.add_argument("id")
    scheduler = sub.add_parser("scheduler", help="run the scheduler by hand")
    runs = scheduler.add_subparsers(dest="action", required=True)
    once = runs.add_parser("run-once", help="one pass now; prints its summary as JSON")
    once.add_argument("--sweep", action="store_true", help="also run the done sweep")
    outbox = sub.add_parser("outbox", help="the outbox's delivery, by hand")
    outbox_actions = outbox.add_subparsers(dest="action", required=True)
    drain = outbox_actions.add_parser("drain", help="send what is due now")
    drain.add_argument(
        "--once", action="store_true", required=True, help="drain what is due now, then exit"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings.from_env()
    except SettingsError as exc:
        print(f"events-svc: configuration error: {exc}", file=sys.stderr)
        return 2
    # JSON lines on stderr; the client libraries log warnings only (QUIET_LIBRARIES): no
    # outgoing request's URL, header or body in the log
    configure_logging(settings.log_level)
    commands = {
        "serve": cmd_serve,
        "migrate": cmd_migrate,
        "token": cmd_token,
        "scheduler": cmd_scheduler,
        "outbox": cmd_outbox,
    }
    try:
        return commands[args.command](settings, args)
    except SettingsError as exc:
        print(f"events-svc: configuration error: {exc}", file=sys.stderr)
        return 2
    except (EmbeddedError, migrate.MigrationError) as exc:
        print(f"events-svc: {exc}", file=sys.stderr)
        return 1
    except errors.DomainError as exc:
        print(f"events-svc: {exc.code}: {exc.detail}", file=sys.stderr)
        return 1
    except asyncpg.PostgresError as exc:  # its text may carry the statement's values
        print(f"events-svc: {type(exc).__name__} (SQLSTATE {exc.sqlstate})", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"events-svc: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
