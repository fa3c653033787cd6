"""Service routes: liveness and readiness (GET and HEAD), and the metrics scrape."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from events_svc import errors, migrate
from events_svc.db import connection, takes_writes
from events_svc.models import HealthView, ReadyView
from events_svc.routes.deps import Ctx, answer
from events_svc.verbs import webhooks
from events_svc.verbs.mail import count_failing_lines, next_due, outbox
from events_svc.verbs.waitlist import waitlist_counts

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=HealthView)
async def healthz() -> Response:
    """200 while the process lives."""
    return answer(HealthView, {"status": "ok"})


_UNREADY: dict[int | str, dict[str, Any]] = {
    503: {"model": ReadyView, "description": "unavailable, with the reason"}
}


@router.get("/readyz", response_model=ReadyView, responses=_UNREADY)
async def readyz(ctx: Ctx) -> Response:
    """200 when the database answers and every migration is applied, else 503."""
    unready: dict[str, Any] = {"status": "unavailable"}
    try:
        async with asyncio.timeout(ctx.settings.connect_timeout_s):
            async with connection(ctx.db()) as conn:
                waiting = await migrate.pending(conn, ctx.migrations_dir)
                writable = await takes_writes(conn)
    except (errors.DomainError, migrate.MigrationError, TimeoutError) as exc:
        reason = exc.code if isinstance(exc, errors.DomainError) else "migrations_invalid"
        if isinstance(exc, TimeoutError):
            reason = "database_unavailable"
        unready["reason"] = reason
        return answer(ReadyView, unready, status_code=503, exclude_none=True)
    if not writable:
        unready["reason"] = "database_unavailable"
        return answer(ReadyView, unready, status_code=503, exclude_none=True)
    if waiting:
        unready.update(reason="migrations_pending", pending=waiting)
        return answer(ReadyView, unready, status_code=503)
    return answer(ReadyView, {"status": "ready"}, exclude_none=True)


# HEAD answers like GET (status and headers; servers send no body); probes of load
# balancers use it. Left out of the OpenAPI document, which describes GET.
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


@router.get("/metrics", response_class=Response, include_in_schema=False)
async def metrics(ctx: Ctx) -> Response:
    """Prometheus text format; the scheduler lag, failing lines, the outbox's messages by
    channel and delivery state, the live waiting-list entries and the waiting webhook
    attempts are read at scrape time."""
    now = ctx.clock()
    try:
        due = await next_due(ctx.db(), now)
        ctx.metrics.lag.set(max(0.0, (now - due).total_seconds()) if due else 0.0)
        ctx.metrics.lines_failing.set(await count_failing_lines(ctx.db(), now))
        counts = {(c, s): 0 for c in ("mail", "sms") for s in outbox.DELIVERY_STATES}
        counts.update({(c, s): n for c, s, n in await outbox.outbox_counts(ctx.db())})
        for (channel, state), n in counts.items():
            ctx.metrics.outbox.labels(channel, state).set(n)
        for status, n in (await waitlist_counts(ctx.db())).items():
            ctx.metrics.waitlist.labels(status).set(n)
        ctx.metrics.webhook_pending.set(await webhooks.attempts.pending_count(ctx.db()))
    except errors.DomainError:
        pass  # the database is away: the other metrics still answer
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
