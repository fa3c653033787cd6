"""The base of every refusal, and the list of them all."""

from __future__ import annotations

from typing import Any, ClassVar


class DomainError(Exception):
    """The request was refused."""

    code: ClassVar[str] = "refused"
    status: ClassVar[int] = 400
    headers: ClassVar[dict[str, str]] = {}

    def __init__(
        self, detail: str | None = None, *, headers: dict[str, str] | None = None, **fields: Any
    ) -> None:
        self.detail = detail or " ".join((self.__doc__ or self.code).split())
        self.fields = fields
        self.extra_headers = headers or {}
        super().__init__(self.detail)

    def response_headers(self) -> dict[str, str]:
        return {**self.headers, **self.extra_headers}

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "detail": self.detail, **self.fields}}


def all_errors() -> list[type[DomainError]]:
    """Every concrete refusal, for the OpenAPI document and the docs."""
    seen: list[type[DomainError]] = []
    stack: list[type[DomainError]] = [DomainError]
    while stack:
        cls = stack.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.append(sub)
                stack.append(sub)
    return seen
