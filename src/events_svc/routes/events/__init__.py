"""Admin routes of events: `records` (CRUD, publication, mark-done, seats, question links)
and `catalog` (stages, tag categories, tags, types with their template lines, questions
with their suggested answers, tickets and slots)."""

from fastapi import APIRouter

from events_svc.routes.events import catalog, records

router = APIRouter()
router.include_router(records.router)
router.include_router(catalog.router)

__all__ = ["router"]
