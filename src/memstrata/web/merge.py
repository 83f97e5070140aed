"""``POST web/merge``: the page's "re-apply my edits" runs the server's three-way merge.

The page has no merge of its own: the one rule for merging two edits of a text is
:func:`memstrata.sandbox.merge.merge3` (the sandbox sync uses it when the agent and a human
edit one file), and this route is a thin transport over it. Like every API route it is
built by :func:`memstrata.api.routing.route_class`: the token is checked before the body is
read, the body is limited to ``max_request_bytes``, and errors have the API's one shape
(401, 413, 422). Each text is checked as the store checks a file's content (at most the
store's ``max_content_bytes``; no NUL), its refusal naming the text by its field
(``theirs is … bytes``, ``loc`` ``["body", "theirs"]``). The three texts share one
request body (``max_request_bytes``, 1 MiB): three files near the content limit, once
escaped as JSON, can exceed it, and the page then says the texts are too large to merge
(docs/WEB.md).

Imported by :func:`memstrata.web.web_router` when it builds the router, not by
``memstrata.web`` itself: ``memstrata.api`` imports ``memstrata.web``.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, StrictStr

from memstrata.api.context import ApiContext
from memstrata.api.routing import Context, CurrentUser, route_class
from memstrata.memory.store import validate_content
from memstrata.runtime import Memstrata
from memstrata.sandbox.merge import merge3

MERGE_PATH = "/web/merge"


class MergeRequest(BaseModel):
    """Three texts in the editor's form (LF line breaks): the version the user started
    from, the user's text, and the version stored now."""

    # A misspelt field is a 422, never ignored (and merged as if it were an empty text).
    model_config = ConfigDict(extra="forbid")

    base: StrictStr
    mine: StrictStr
    theirs: StrictStr


class MergeAnswer(BaseModel):
    """The merged text, or ``None`` when the two edits change the same or neighbouring
    lines differently (nothing is guessed)."""

    merged: str | None


def merge(body: MergeRequest, user_id: CurrentUser, context: Context) -> MergeAnswer:
    """``merge3(base, mine, theirs)``. A plain ``def``: FastAPI runs it on a worker thread,
    so a long diff never holds up the event loop."""
    limit = context.mem.store.max_content_bytes
    for field, text in (("base", body.base), ("mine", body.mine), ("theirs", body.theirs)):
        validate_content(text, limit, field)  # 413 over the limit, 422 for NUL or surrogates
    return MergeAnswer(merged=merge3(body.base, body.mine, body.theirs))


def merge_router(memstrata: Memstrata | ApiContext) -> APIRouter:
    """The route, authenticated and limited by ``memstrata``'s context."""
    router = APIRouter(route_class=route_class(ApiContext.of(memstrata)), include_in_schema=False)
    router.post(MERGE_PATH)(merge)
    return router
