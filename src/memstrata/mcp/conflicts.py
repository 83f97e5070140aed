"""The agent's kept-aside edits over MCP, read-only: resources, not tools.

When sync keeps an agent's edit aside (it conflicted with a human's edit, or the database
refused it; :mod:`memstrata.memory.conflicts`), the agent should be able to see what was
not stored. Two resources show it, over the same service as REST
``GET /api/memory/conflicts[/{name}]``:

* ``memstrata://conflicts`` (``?file=&offset=&limit=``: the service's paging) — one page of
  the copies, newest first, as JSON: the REST list body, each copy with its ``uri``;
* ``memstrata://conflicts/{name}`` — one copy, whole, as Markdown; the name is
  percent-encoded as in the REST URL (``/`` may stay as it is).

Resources, because the memory files are resources already and reading is all an agent may
do here: dismissing a copy deletes the one record of an edit the user never saw stored, so
it is the user's choice (REST ``DELETE``, the settings page, ``memstrata conflicts
dismiss``), never the agent's. Nor does a rare event cost every agent a tool schema in its
context.

Two kinds of refusal, answered as the server answers their kind elsewhere:

* the service's refusals of a copy (a name that is not a copy's, a copy that is not there,
  a failed sandbox; :mod:`memstrata.memory.conflict_refusals`) are failures of the read,
  answered as every failure is (the server's ``FailureAnswers``): a JSON-RPC error whose
  ``data`` is the status and code REST answers the same refusal with, logged as
  ``mcp.request``;
* a bad query of the listing (a parameter it does not take or given twice, a ``file`` that
  is not a user file, an ``offset`` or ``limit`` that is not a whole number or out of
  range) is a malformed request, answered as the server answers an unknown resource or a
  bad prompt argument: ``-32602`` with what to send instead, and no REST status, which
  would be a guess (REST refuses the page's range with FastAPI's 422 and the file with
  400). It is logged as ``mcp.resource``, as a resource read of the wrong shape is.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qs, quote, unquote

from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)

from memstrata.api.conflict_schemas import ConflictContent, ConflictList
from memstrata.api.errors import INVALID_FILE_NAME_MESSAGE, ApiError
from memstrata.db.integers import MAX_INT
from memstrata.errors import InvalidFileTypeError
from memstrata.logs import log_event
from memstrata.mcp.base import Caller
from memstrata.mcp.refusal_log import INPUT_REFUSED_LEVEL
from memstrata.mcp.tool_args import json_text
from memstrata.memory.conflict_refusals import Refusal, refusals_as
from memstrata.memory.conflicts import (
    DEFAULT_PAGE,
    MAX_PAGE,
    check_page,
    list_copies,
    read_copy,
)
from memstrata.memory.kinds import FileKind, api_kind

logger = logging.getLogger(__name__)

LISTING_URI = "memstrata://conflicts"
COPY_PREFIX = LISTING_URI + "/"
LISTING_TEMPLATE = LISTING_URI + "{?file,offset,limit}"
COPY_TEMPLATE = COPY_PREFIX + "{name}"
# What the service's refusals name as the list of copies.
LISTING = f"the resource {LISTING_URI}"
_PARAMETERS = ("file", "offset", "limit")
_EXAMPLE = f"{LISTING_URI}?file=memory&offset={DEFAULT_PAGE}&limit={DEFAULT_PAGE}"
# How to fix a bad query, after what is wrong with it.
_TAKES = (
    f"{LISTING_URI} takes file (user, soul or memory), offset (from 0) and limit "
    f"(1 to {MAX_PAGE}), e.g. {_EXAMPLE}"
)
_INTEGER = re.compile(r"-?[0-9]+")
# How much of a bad value or parameter name an error repeats, and how many unknown names.
_SHOWN_CHARS = 40
_NAMES_SHOWN = 3
# More characters than any number in range has (MAX_INT's, with a sign): such a number is
# refused without int(), whose time grows with the square of the length.
_MAX_CHARS = len(str(-MAX_INT))


def is_conflicts_uri(uri: str) -> bool:
    return uri == LISTING_URI or uri.startswith((f"{LISTING_URI}?", COPY_PREFIX))


def copy_uri(name: str) -> str:
    return COPY_PREFIX + quote(name, safe="/")


LISTING_RESOURCE = Resource(
    name="kept-aside edits",
    uri=LISTING_URI,
    description="Your edits of the memory files that sync kept aside (they conflicted with "
    "the user's edit, whose version was kept, or the database refused them), newest first, "
    "with the uri of each. Read-only.",
    mime_type="application/json",
)
TEMPLATES = (
    ResourceTemplate(
        name="kept-aside edits, one page",
        uri_template=LISTING_TEMPLATE,
        description=f"file: user, soul or memory; offset; limit: 1 to {MAX_PAGE} "
        f"(default {DEFAULT_PAGE}). The answer's next_offset is the next page's offset.",
        mime_type="application/json",
    ),
    ResourceTemplate(
        name="kept-aside edit",
        uri_template=COPY_TEMPLATE,
        description=f"One kept-aside edit, whole; name as {LISTING_URI} lists it.",
        mime_type="text/markdown",
    ),
)


async def read_conflicts(caller: Caller, uri: str) -> ReadResourceResult:
    """The listing or the copy ``uri`` names (:func:`is_conflicts_uri` holds)."""
    if uri.startswith(COPY_PREFIX):
        contents = await _read_copy(caller, unquote(uri[len(COPY_PREFIX) :]))
    else:
        contents = await _read_listing(caller, uri)
    return ReadResourceResult(contents=[contents])


async def _read_listing(caller: Caller, uri: str) -> TextResourceContents:
    try:
        kind, offset, limit = page_parameters(uri.partition("?")[2])
    except MCPError as exc:
        log_event(
            logger,
            "mcp.resource",
            INPUT_REFUSED_LEVEL,
            method="resources/read",
            user_id=caller.user_id,
            error=exc.error.message,
        )
        raise
    mem = caller.mem
    page = await list_copies(
        mem.sandboxes, caller.user_id, kind=kind, offset=offset, limit=limit, db=mem.sync.db
    )
    body = ConflictList.of(page).model_dump(mode="json")
    body["conflicts"] = [{**c, "uri": copy_uri(c["name"])} for c in body["conflicts"]]
    return TextResourceContents(uri=uri, mime_type="application/json", text=json_text(body))


async def _read_copy(caller: Caller, name: str) -> TextResourceContents:
    mem = caller.mem
    with refusals_as(_failure):
        text = await read_copy(mem.sandboxes, caller.user_id, name, listing=LISTING)
    fields = ConflictContent.of(text).model_dump(mode="json", exclude={"content"})
    return TextResourceContents(
        uri=copy_uri(text.copy.name),
        mime_type="text/markdown",
        text=text.content,
        # No null in a _meta (memstrata.mcp.files.resource_meta says why).
        _meta={key: value for key, value in fields.items() if value is not None},
    )


def _failure(refusal: Refusal, message: str) -> ApiError:
    """A refusal of the service as the server's ``FailureAnswers`` answers a failure (module
    doc): ``-32602``, or ``-32603`` for the failed sandbox, with its status and code."""
    return ApiError(refusal.status, message, code=refusal.code)


def page_parameters(query: str) -> tuple[FileKind | None, int, int]:
    """``file``, ``offset`` and ``limit`` of the listing's query; a bad one is ``-32602``
    saying what is wrong (in the service's words where the service has the rule: the page
    bounds) and what the listing takes."""
    given = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(given) - set(_PARAMETERS))
    if unknown:
        raise _bad_query(f"unknown parameter(s) {_named(unknown)}")
    twice = [name for name, values in given.items() if len(values) > 1]
    if twice:
        raise _bad_query(f"{twice[0]} is given more than once")
    value = {name: values[0] for name, values in given.items()}
    kind = _file_kind(value["file"]) if "file" in value else None
    offset = _whole("offset", value.get("offset"), 0)
    limit = _whole("limit", value.get("limit"), DEFAULT_PAGE)
    try:
        check_page(offset, limit)
    except ValueError as exc:
        raise _bad_query(str(exc)) from exc
    return kind, offset, limit


def _named(names: list[str]) -> str:
    """Parameter names as the values are shown, quoted and cut (a name is the client's text:
    a newline or a megabyte of it is not echoed into the error and the log), the first
    ``_NAMES_SHOWN`` of them."""
    shown = ", ".join(repr(name[:_SHOWN_CHARS]) for name in names[:_NAMES_SHOWN])
    more = len(names) - _NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _file_kind(raw: str) -> FileKind:
    try:
        return api_kind(raw)
    except InvalidFileTypeError as exc:
        raise _bad_query(f"{INVALID_FILE_NAME_MESSAGE} (file={raw[:_SHOWN_CHARS]!r})") from exc


def _whole(name: str, raw: str | None, default: int) -> int:
    """The number ``raw`` spells (its range is checked after); one longer than any number
    in range is refused here (``_MAX_CHARS``)."""
    if raw is None:
        return default
    if _INTEGER.fullmatch(raw) is None:
        raise _bad_query(f"{name} must be a whole number, got {raw[:_SHOWN_CHARS]!r}")
    if len(raw) > _MAX_CHARS:
        raise _bad_query(f"{name} is out of range, got a number of {len(raw)} characters")
    return int(raw)


def _bad_query(problem: str) -> MCPError:
    return MCPError(INVALID_PARAMS, f"{problem}; {_TAKES}")
