"""Admin routes of the CRM lead rules: the rules (with the answer-to-rule bridge), the
queue, one lead pass now, and the relink of a merged lead. Reads need `event:read`,
writes `lead:write`. Every route is fenced by the actor's company (the verbs hold the
rules: `verbs/leads/rules.py`, `queue.py`, `worker.py`)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Response, status

from events_svc.actors import Actor
from events_svc.loops import within
from events_svc.models import Page
from events_svc.models.leads import (
    LeadRelink,
    LeadRelinkView,
    LeadRequestView,
    LeadRuleCreate,
    LeadRuleFromAnswer,
    LeadRulePatch,
    LeadRuleView,
    LeadRunView,
)
from events_svc.routes.deps import Ctx, Cursor, Limit, answer, require
from events_svc.verbs.leads import LeadOptions, queue, rules, run_lead_pass

router = APIRouter(tags=["leads"])

Read = Annotated[Actor, require("event:read")]
Write = Annotated[Actor, require("lead:write")]


@router.get("/admin/lead-rules", response_model=Page[LeadRuleView])
async def list_lead_rules(
    ctx: Ctx, actor: Read, limit: Limit = None, cursor: Cursor = None
) -> Response:
    found = await rules.list_rules(ctx.db(), actor, limit=limit, cursor=cursor)
    return answer(Page[LeadRuleView], found)


@router.post("/admin/lead-rules", status_code=201, response_model=LeadRuleView)
async def create_lead_rule(ctx: Ctx, actor: Write, body: LeadRuleCreate) -> Response:
    """A rule over typed predicates; when active, every event it can match is queued."""
    view = await rules.create_rule(ctx.db(), actor, body, ctx.clock())
    return answer(LeadRuleView, view, status_code=201)


@router.post("/admin/lead-rules/from-answer", status_code=201, response_model=LeadRuleView)
async def create_lead_rule_from_answer(
    ctx: Ctx, actor: Write, body: LeadRuleFromAnswer
) -> Response:
    """A rule whose one predicate is the (question, answers) pair."""
    view = await rules.create_from_answer(ctx.db(), actor, body, ctx.clock())
    return answer(LeadRuleView, view, status_code=201)


@router.get("/admin/lead-rules/{rule_id}", response_model=LeadRuleView)
async def get_lead_rule(ctx: Ctx, actor: Read, rule_id: UUID) -> Response:
    return answer(LeadRuleView, await rules.get_rule(ctx.db(), actor, rule_id))


@router.patch("/admin/lead-rules/{rule_id}", response_model=LeadRuleView)
async def patch_lead_rule(ctx: Ctx, actor: Write, rule_id: UUID, body: LeadRulePatch) -> Response:
    view = await rules.patch_rule(ctx.db(), actor, rule_id, body, ctx.clock())
    return answer(LeadRuleView, view)


@router.delete("/admin/lead-rules/{rule_id}", status_code=204, response_class=Response)
async def delete_lead_rule(ctx: Ctx, actor: Write, rule_id: UUID) -> Response:
    await rules.delete_rule(ctx.db(), actor, rule_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/admin/lead-requests", response_model=Page[LeadRequestView])
async def list_lead_requests(
    ctx: Ctx, actor: Read, event_id: UUID | None = None, limit: Limit = None, cursor: Cursor = None
) -> Response:
    """The queue: one request per event."""
    found = await queue.list_requests(
        ctx.db(), actor, event_id=event_id, limit=limit, cursor=cursor
    )
    return answer(Page[LeadRequestView], found)


@router.post("/admin/lead-requests/run", response_model=LeadRunView)
async def run_lead_requests(ctx: Ctx, actor: Write) -> Response:
    """One lead pass now; it shares the lease with the scheduled pass and ignores the
    back-off of parked requests, bounded in time as the loop's pass (`more` then says work
    is left). A company actor's run works only its company's events' requests; an actor
    without a company's, every request."""
    summary = await run_lead_pass(
        ctx.db(),
        ctx.ports.lead_sink,
        LeadOptions.from_settings(ctx.settings),
        ctx.clock(),
        stopping=within(),
        force=True,
        company_id=actor.company_id,
    )
    return answer(LeadRunView, summary.as_dict())


@router.post("/admin/leads/relink", response_model=LeadRelinkView)
async def relink_lead(ctx: Ctx, actor: Write, body: LeadRelink) -> Response:
    """The host merged two leads: the old lead's groups now name the new one."""
    moved = await queue.relink_lead(
        ctx.db(), actor, body.old_lead_id, body.new_lead_id, ctx.clock()
    )
    return answer(LeadRelinkView, {"moved": moved})
