"""The refusals of the kept-aside copies' service, named once for every transport.

:mod:`memstrata.memory.conflicts` refuses a name that is not a copy's, a copy that is not
there, and a sandbox that failed, each with its own exception and a message for the
reader. Which refusals there are, and the status and code each is answered with, is
:data:`REFUSALS`: REST answers them as its errors (:mod:`memstrata.api.routers.conflicts`),
MCP as JSON-RPC errors whose ``data`` carries the same status and code
(:mod:`memstrata.mcp.conflicts`), each transport through :func:`refusals_as` with its own
error form. The CLI prints the message alone, as one ``error:`` line, so it needs no code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from memstrata.errors import MemstrataError
from memstrata.memory.conflicts import (
    CopiesUnavailableError,
    InvalidCopyNameError,
    UnknownCopyError,
)


@dataclass(frozen=True)
class Refusal:
    """How one of the service's refusals is answered. ``retry_later``: the same request may
    succeed later (the sandbox failed), which REST says with ``Retry-After``."""

    status: int
    code: str
    description: str
    retry_later: bool = False


INVALID_NAME = Refusal(400, "invalid_conflict_name", "Not a copy's name.")
NOT_FOUND = Refusal(404, "conflict_not_found", "No copy of that name (the user's).")
SANDBOX_UNAVAILABLE = Refusal(
    503,
    "sandbox_unavailable",
    "The sandbox failed or did not answer in time.",
    retry_later=True,
)

_BY_ERROR: tuple[tuple[type[MemstrataError], Refusal], ...] = (
    (InvalidCopyNameError, INVALID_NAME),
    (UnknownCopyError, NOT_FOUND),
    (CopiesUnavailableError, SANDBOX_UNAVAILABLE),
)
REFUSALS = tuple(refusal for _, refusal in _BY_ERROR)
_ERRORS = tuple(error for error, _ in _BY_ERROR)

ErrorForm = Callable[[Refusal, str], Exception]


@contextmanager
def refusals_as(form: ErrorForm) -> Iterator[None]:
    """Within: a refusal of the service is raised again as ``form(refusal, message)`` (the
    transport's error), chained to it; any other exception passes unchanged."""
    try:
        yield
    except _ERRORS as exc:
        refusal = next(refusal for error, refusal in _BY_ERROR if isinstance(exc, error))
        raise form(refusal, str(exc)) from exc
