"""The transport-level error with its HTTP form, apart from the error mapping
(:mod:`memstrata.api.errors`, which needs FastAPI): token checks raise it, and
``memstrata token`` imports those without the HTTP stack."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    """A transport-level error with its HTTP form (bad header, body too large, 401, 503)."""

    def __init__(
        self,
        status_code: int,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})
        self.code = code
