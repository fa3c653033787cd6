"""Admin routes of registrations: `records` (the register verb, reads and counts, the state
verbs, archiving, the partner sync) and `corrections` (the reasoned commands: correction,
cancel and reactivate with a reason, the revision history)."""

from fastapi import APIRouter

from events_svc.routes.registrations import corrections, records

router = APIRouter()
router.include_router(records.router)  # the hottest routes match first
router.include_router(corrections.router)

__all__ = ["router"]
