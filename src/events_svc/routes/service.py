"""Service routes: liveness and readiness."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from events_svc import errors, migrate
from events_svc.db import connection
from events_svc.routes.deps import Ctx
from events_svc.verbs.mail_pass import next_due

router = APIRouter(tags=["service"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """200 while the process lives."""
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(ctx: Ctx) -> JSONResponse | dict[str, Any]:
    """200 when the database answers and every migration is applied, else 503."""
    try:
        async with asyncio.timeout(ctx.settings.connect_timeout_s):
            async with connection(ctx.db()) as conn:
                waiting = await migrate.pending(conn, ctx.migrations_dir)
    except (errors.DomainError, migrate.MigrationError, TimeoutError) as exc:
        reason = exc.code if isinstance(exc, errors.DomainError) else "migrations_invalid"
        if isinstance(exc, TimeoutError):
            reason = "database_unavailable"
        return JSONResponse({"status": "unavailable", "reason": reason}, status_code=503)
    if waiting:
        return JSONResponse(
            {"status": "unavailable", "reason": "migrations_pending", "pending": waiting},
            status_code=503,
        )
    return {"status": "ready"}


@router.get("/metrics", response_class=Response, include_in_schema=False)
async def metrics(ctx: Ctx) -> Response:
    """Prometheus text format; the scheduler lag is measured at scrape time."""
    now = ctx.clock()
    try:
        due = await next_due(ctx.db(), now)
        ctx.metrics.lag.set(max(0.0, (now - due).total_seconds()) if due else 0.0)
    except errors.DomainError:
        pass  # the database is away: the other metrics still answer
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
