"""``GET /api/config/limits``: the numbers a frontend must respect, from their one definition.

A settings page shows "12 KB of 256 KB" and offers the search sources; rather than copy
those numbers into the page (where they would drift from the server's), it asks here. The
values are the ones the services enforce: the store's content limit, the route body limits
(a memory file's is larger), the turn size limit, the search service's bounds. Read-only
and authenticated like every ``/api`` route.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.routing import APIRoute
from pydantic import BaseModel, Field

from memstrata.api.routing import Context, CurrentUser
from memstrata.api.schemas import ErrorBody
from memstrata.config import FILE_BODY_ROOM, JSON_ESCAPE_BYTES, file_request_bytes
from memstrata.memory.kinds import MAX_CONTENT_BYTES, USER_FILE_KINDS
from memstrata.retrieval.limits import MAX_QUERY_CHARS, MAX_TOP_K, SOURCES
from memstrata.retrieval.turn_limit import MAX_TURN_BYTES


class MemoryFileName(BaseModel):
    name: str = Field(examples=["user"], description="The `{name}` of /agent-files/{name}.")
    filename: str = Field(examples=["USER.md"])


class Limits(BaseModel):
    user_id: str = Field(description="The user the bearer token authenticates.")
    max_content_bytes: int = Field(
        examples=[262144], description="Largest memory file, UTF-8 bytes (413 above)."
    )
    max_request_bytes: int = Field(
        examples=[1048576],
        description="Largest request body, bytes (413 above), but for max_file_request_bytes.",
    )
    max_file_request_bytes: int = Field(
        examples=[JSON_ESCAPE_BYTES * MAX_CONTENT_BYTES + FILE_BODY_ROOM],
        description="Largest body of a request that carries a memory file, bytes (413 "
        "above): PUT /api/config/agent-files/{name}, and an MCP call of memory_write, "
        "update_long_term_memory or update_user. A file at max_content_bytes fits however "
        f"its JSON escapes it ({JSON_ESCAPE_BYTES} × max_content_bytes + {FILE_BODY_ROOM}, "
        "never below max_request_bytes); the file limit is the decoded content's.",
    )
    max_turn_bytes: int = Field(
        examples=[MAX_TURN_BYTES],
        description="Largest conversation turn: user_message and assistant_reply together, "
        "UTF-8 bytes (422 above; split a longer text over several turns).",
    )
    files: list[MemoryFileName] = Field(description="The editable memory files, in order.")
    search_sources: list[str] = Field(examples=[list(SOURCES)])
    max_top_k: int = Field(examples=[MAX_TOP_K])
    max_query_chars: int = Field(examples=[MAX_QUERY_CHARS])


def build_router(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(prefix="/api/config", tags=["config"], route_class=route_class)

    # Async: it reads no database and nothing else that blocks (the token check included),
    # so it answers in the event loop; as a sync route it queued behind the requests hung
    # on a frozen database that held every worker thread (7 s in a drill).
    @router.get("/limits", responses={401: {"model": ErrorBody}})
    async def get_limits(user_id: CurrentUser, context: Context) -> Limits:
        """Size limits, the editable files and the search bounds this server enforces."""
        return Limits(
            user_id=user_id,
            max_content_bytes=context.mem.store.max_content_bytes,
            max_request_bytes=context.settings.max_request_bytes,
            max_file_request_bytes=file_request_bytes(context.settings),
            max_turn_bytes=MAX_TURN_BYTES,
            files=[MemoryFileName(name=k.api_name, filename=k.filename) for k in USER_FILE_KINDS],
            search_sources=list(SOURCES),
            max_top_k=MAX_TOP_K,
            max_query_chars=MAX_QUERY_CHARS,
        )

    return router
