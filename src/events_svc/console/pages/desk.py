"""Console pages: desk."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
