"""The agents' kept-aside copies over HTTP: list, read, dismiss (``/api/memory/conflicts``).

Each route is a thin transport over one coroutine of :mod:`memstrata.memory.conflicts`,
which holds every rule (names, paging, what a failing sandbox answers); this module answers
its refusals (:mod:`memstrata.memory.conflict_refusals`: which there are, their status and
code) in the API's one error shape. The user is the token's: the service opens that
user's sandbox only.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query
from fastapi.routing import APIRoute

from memstrata.api.conflict_schemas import (
    ConflictContent,
    ConflictDismissed,
    ConflictList,
)
from memstrata.api.error_shape import error_body
from memstrata.api.errors import ApiError
from memstrata.api.routing import (
    Context,
    CurrentUser,
    checked_before_body,
    register_anything_convertor,
)
from memstrata.api.schemas import ErrorBody, error_responses
from memstrata.db.integers import MAX_INT
from memstrata.memory.conflict_refusals import (
    INVALID_NAME,
    NOT_FOUND,
    REFUSALS,
    SANDBOX_UNAVAILABLE,
    Refusal,
    refusals_as,
)
from memstrata.memory.conflicts import (
    DEFAULT_PAGE,
    MAX_PAGE,
    dismiss_copy,
    list_copies,
    parse_name,
    read_copy,
)
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind, api_kind

_NAME = "MEMORY.md.20260301T120000.123456Z.md"
_BAD_NAME = (
    "'../USER.md' is not the name of a kept-aside copy: names are as GET "
    f"/api/memory/conflicts lists them, such as {_NAME!r}"
)
_UNKNOWN = (
    f"no kept-aside copy named {_NAME!r}: it was dismissed already, or never kept; "
    "GET /api/memory/conflicts lists the copies there are"
)
_DOWN = "the copy could not be read from the sandbox (SandboxError); try again later"
# What each refusal's answer says, for /openapi.json: the service's words for REST.
_EXAMPLES = {INVALID_NAME: _BAD_NAME, NOT_FOUND: _UNKNOWN, SANDBOX_UNAVAILABLE: _DOWN}


def _example(refusal: Refusal) -> dict[str, Any]:
    body = error_body(refusal.status, _EXAMPLES[refusal], code=refusal.code)
    return {
        "model": ErrorBody,
        "description": refusal.description,
        "content": {"application/json": {"example": body}},
    }


_ONE_COPY: dict[int | str, dict[str, object]] = {
    **error_responses(),
    **{refusal.status: _example(refusal) for refusal in REFUSALS},
}


@checked_before_body
async def path_copy_name(
    name: Annotated[str, Path(description="A copy's `name`, as the list gives it.")],
) -> str:
    """The name, or 400 saying what a name is (after the token: the route class checks it
    first); async so that FastAPI runs it on the event loop."""
    with as_api_errors(0):
        parse_name(name)
    return name


def as_api_errors(retry_after_s: float) -> AbstractContextManager[None]:
    """The service's refusals in the API's shape: 400, 404, or 503 with ``Retry-After``
    (``retry_after_s``, at least 1 s: a sandbox call's deadline)."""
    retry_after = {"Retry-After": str(max(1, math.ceil(retry_after_s)))}

    def api_error(refusal: Refusal, message: str) -> ApiError:
        headers = retry_after if refusal.retry_later else None
        return ApiError(refusal.status, message, code=refusal.code, headers=headers)

    return refusals_as(api_error)


def _file_kind(
    file: Annotated[
        str | None,
        Query(
            description="Only the copies of this file: user, soul or memory.",
            json_schema_extra={"enum": [k.api_name for k in USER_FILE_KINDS]},
        ),
    ] = None,
) -> FileKind | None:
    # Validated by api_kind, as the file routes' names are: a bad one is spec §3's 400.
    return None if file is None else api_kind(file)


def build_router(route_class: type[APIRoute]) -> APIRouter:
    register_anything_convertor()
    router = APIRouter(prefix="/api/memory/conflicts", tags=["memory"], route_class=route_class)

    # "/" too: the routes below would take it as an empty name.
    @router.get("", responses=error_responses(400, 422))
    @router.get("/", include_in_schema=False)
    async def list_conflicts(
        user_id: CurrentUser,
        context: Context,
        kind: Annotated[FileKind | None, Depends(_file_kind)],
        offset: Annotated[int, Query(ge=0, le=MAX_INT, description="Copies to skip.")] = 0,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE, description=f"Copies per page, 1 to {MAX_PAGE}.")
        ] = DEFAULT_PAGE,
    ) -> ConflictList:
        """The agents' edits that sync kept aside in this user's sandbox, newest first: each
        conflicted with a human's edit (the stored version won) or was refused by the
        database. Each `preview` shows the lines the copy has that the stored file has not.
        A sandbox that fails or hangs is `sandbox: "sandbox_failed"` with `warnings`, never
        an error."""
        mem = context.mem
        page = await list_copies(
            mem.sandboxes, user_id, kind=kind, offset=offset, limit=limit, db=mem.sync.db
        )
        return ConflictList.of(page)

    # Any characters reach the route (after the token), so a bad name is a 400, not a 404.
    @router.get("/{name:anything}", responses=_ONE_COPY)
    async def get_conflict(
        user_id: CurrentUser, name: Annotated[str, Depends(path_copy_name)], context: Context
    ) -> ConflictContent:
        """One kept-aside copy, whole (read-only)."""
        with as_api_errors(context.settings.sandbox_timeout_s):
            text = await read_copy(context.mem.sandboxes, user_id, name)
        return ConflictContent.of(text)

    @router.delete("/{name:anything}", responses=_ONE_COPY)
    async def dismiss_conflict(
        user_id: CurrentUser, name: Annotated[str, Depends(path_copy_name)], context: Context
    ) -> ConflictDismissed:
        """Dismiss a kept-aside copy: its file is deleted from the sandbox. A second
        dismissal of the same copy is a 404."""
        with as_api_errors(context.settings.sandbox_timeout_s):
            copy = await dismiss_copy(context.mem.sandboxes, user_id, name)
        return ConflictDismissed(name=copy.name)

    return router
