"""What a log line may say about an exception, for every layer (verbs, the loop, the HTTP
middleware): no web framework here, so verbs may use it too."""

from __future__ import annotations

import traceback
from typing import Any


def error_fields(exc: BaseException) -> dict[str, Any]:
    """What a log line may say about an exception: its type (and its causes' types), the
    SQLSTATE and constraint name of a database error, and where it was raised (file, line,
    function of each frame). Never its message: a database error's text carries the
    statement's bound values, and other messages may quote attendee data."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain and len(chain) < 5:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    fields: dict[str, Any] = {"error_type": " <- ".join(type(e).__name__ for e in chain)}
    for e in chain:
        sqlstate = getattr(e, "sqlstate", None)
        if isinstance(sqlstate, str):
            fields["sqlstate"] = sqlstate
            constraint = getattr(e, "constraint_name", None)
            if constraint:
                fields["constraint"] = str(constraint)
            break
    frames = traceback.extract_tb(exc.__traceback__)
    fields["trace"] = [f"{f.filename}:{f.lineno} in {f.name}" for f in frames[-12:]]
    return fields
