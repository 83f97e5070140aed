"""``POST web/merge``: the page's "re-apply my edits" runs the server's three-way merge.

When the merge gives up, the answer says exactly where (``merge3_parts``): the lines merged
and each place both edits change, so the page asks the user only about those.

The page has no merge of its own: the one rule for merging two edits of a text is
:func:`memstrata.sandbox.merge.merge3` (the sandbox sync uses it when the agent and a human
edit one file), and this route is a thin transport over it. Like every API route it is
built by :func:`memstrata.api.routing.route_class`: the token is checked before the body is
read, and errors have the API's one shape (401, 413, 422). Each text is checked as the
store checks a file's content (at most the store's ``max_content_bytes``; no NUL), its
refusal naming the text by its field (``theirs is … bytes``, ``loc`` ``["body",
"theirs"]``). The body may hold three files at that limit however their JSON escapes them
(:func:`memstrata.config.file_request_bytes` of three files, as a memory file's PUT takes
one), so texts a save would take are never too large to merge.

Imported by :func:`memstrata.web.web_router` when it builds the router, not by
``memstrata.web`` itself: ``memstrata.api`` imports ``memstrata.web``.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, StrictStr

from memstrata.api.context import ApiContext
from memstrata.api.routing import Context, CurrentUser, larger_body, route_class
from memstrata.config import Settings, file_request_bytes
from memstrata.memory.store import validate_content
from memstrata.runtime import Memstrata
from memstrata.sandbox.merge import Conflict, merge3, merge3_parts

MERGE_PATH = "/web/merge"


class MergeRequest(BaseModel):
    """Three texts in the editor's form (LF line breaks): the version the user started
    from, the user's text, and the version stored now."""

    # A misspelt field is a 422, never ignored (and merged as if it were an empty text).
    model_config = ConfigDict(extra="forbid")

    base: StrictStr
    mine: StrictStr
    theirs: StrictStr


class Place(BaseModel):
    """A place the merge left to the user: base lines ``base`` (``[from, to)``, 0-based, of
    the text split at LF) became lines ``mine`` of the user's text and lines ``theirs`` of
    the stored version, which are ``mine_lines`` and ``theirs_lines``."""

    base: tuple[int, int]
    mine: tuple[int, int]
    theirs: tuple[int, int]
    mine_lines: list[str]
    theirs_lines: list[str]


class Lines(BaseModel):
    """Lines merged without a question."""

    lines: list[str]


class Choice(BaseModel):
    conflict: Place


class MergeAnswer(BaseModel):
    """The merged text, or ``None`` when the two edits change the same or neighbouring
    lines differently (nothing is guessed). Then ``parts`` is the text region by region,
    :func:`~memstrata.sandbox.merge.merge3_parts`: the lines merged, and each place for the
    user to choose at; their lines, each place chosen, joined with LF, are the text."""

    merged: str | None
    parts: list[Lines | Choice] | None


def merge_request_bytes(settings: Settings) -> int:
    """The merge's body limit: each of its texts may be a whole file."""
    return file_request_bytes(settings, files=len(MergeRequest.model_fields))


@larger_body(merge_request_bytes)
def merge(body: MergeRequest, user_id: CurrentUser, context: Context) -> MergeAnswer:
    """``merge3(base, mine, theirs)``. A plain ``def``: FastAPI runs it on a worker thread,
    so a long diff never holds up the event loop."""
    limit = context.mem.store.max_content_bytes
    for field, text in (("base", body.base), ("mine", body.mine), ("theirs", body.theirs)):
        validate_content(text, limit, field)  # 413 over the limit, 422 for NUL or surrogates
    merged = merge3(body.base, body.mine, body.theirs)
    if merged is not None:
        return MergeAnswer(merged=merged, parts=None)
    parts: list[Lines | Choice] = [
        Lines(lines=list(part))
        if not isinstance(part, Conflict)
        else Choice(
            conflict=Place(
                base=part.base,
                mine=part.ours,
                theirs=part.theirs,
                mine_lines=list(part.ours_lines),
                theirs_lines=list(part.theirs_lines),
            )
        )
        for part in merge3_parts(body.base, body.mine, body.theirs)
    ]
    return MergeAnswer(merged=None, parts=parts)


def merge_router(memstrata: Memstrata | ApiContext) -> APIRouter:
    """The route, authenticated and limited by ``memstrata``'s context."""
    router = APIRouter(route_class=route_class(ApiContext.of(memstrata)), include_in_schema=False)
    router.post(MERGE_PATH)(merge)
    return router
