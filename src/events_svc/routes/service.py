"""Service routes: liveness and readiness."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from events_svc import errors, migrate
from events_svc.db import connection
from events_svc.routes.deps import Ctx

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
