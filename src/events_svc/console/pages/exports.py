"""Console pages: exports."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()
