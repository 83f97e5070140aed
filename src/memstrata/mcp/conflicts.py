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
context. The service's refusals are REST's answers (:func:`as_api_errors`), which the
server's ``FailureAnswers`` sends as JSON-RPC errors with the REST status and code.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, unquote

from mcp_types import ReadResourceResult, Resource, ResourceTemplate, TextResourceContents

from memstrata.api.conflict_schemas import ConflictContent, ConflictList
from memstrata.api.routers.conflicts import as_api_errors
from memstrata.mcp.base import Caller
from memstrata.mcp.tool_args import json_text
from memstrata.memory.conflicts import (
    DEFAULT_PAGE,
    MAX_PAGE,
    check_page,
    list_copies,
    read_copy,
)
from memstrata.memory.kinds import FileKind, api_kind

LISTING_URI = "memstrata://conflicts"
COPY_PREFIX = LISTING_URI + "/"
LISTING_TEMPLATE = LISTING_URI + "{?file,offset,limit}"
COPY_TEMPLATE = COPY_PREFIX + "{name}"
# What the service's refusals name as the list of copies.
LISTING = f"the resource {LISTING_URI}"
_PARAMETERS = ("file", "offset", "limit")
_EXAMPLE = f"{LISTING_URI}?file=memory&offset={DEFAULT_PAGE}"
_INTEGER = re.compile(r"-?[0-9]{1,18}")


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
    kind, offset, limit = page_parameters(uri.partition("?")[2])
    page = await list_copies(
        caller.mem.sandboxes, caller.user_id, kind=kind, offset=offset, limit=limit
    )
    body = ConflictList.of(page).model_dump(mode="json")
    body["conflicts"] = [{**c, "uri": copy_uri(c["name"])} for c in body["conflicts"]]
    return TextResourceContents(uri=uri, mime_type="application/json", text=json_text(body))


async def _read_copy(caller: Caller, name: str) -> TextResourceContents:
    mem = caller.mem
    with as_api_errors(mem.settings.sandbox_timeout_s):
        text = await read_copy(mem.sandboxes, caller.user_id, name, listing=LISTING)
    fields = ConflictContent.of(text).model_dump(mode="json", exclude={"content"})
    return TextResourceContents(
        uri=copy_uri(text.copy.name),
        mime_type="text/markdown",
        text=text.content,
        # No null in a _meta (memstrata.mcp.files.resource_meta says why).
        _meta={key: value for key, value in fields.items() if value is not None},
    )


def page_parameters(query: str) -> tuple[FileKind | None, int, int]:
    """``file``, ``offset`` and ``limit`` of the listing's query; a bad one is the
    ``ValueError`` (a 400) the REST API's mapping answers, in the service's words where
    the service has the rule (the file names, the page bounds)."""
    given = parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(given) - set(_PARAMETERS))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)}; {LISTING_URI} takes "
            f"{', '.join(_PARAMETERS)}, e.g. {_EXAMPLE}"
        )
    twice = [name for name, values in given.items() if len(values) > 1]
    if twice:
        raise ValueError(f"{twice[0]} is given more than once; give it once, e.g. {_EXAMPLE}")
    value = {name: values[0] for name, values in given.items()}
    kind = api_kind(value["file"]) if "file" in value else None
    offset = _whole("offset", value.get("offset"), 0)
    limit = _whole("limit", value.get("limit"), DEFAULT_PAGE)
    check_page(offset, limit)
    return kind, offset, limit


def _whole(name: str, raw: str | None, default: int) -> int:
    """The number ``raw`` spells (its range is the service's check); 18 digits at most, so
    that no string is too long for ``int``."""
    if raw is None:
        return default
    if _INTEGER.fullmatch(raw) is None:
        raise ValueError(f"{name} must be a whole number, e.g. {_EXAMPLE}; got {raw[:40]!r}")
    return int(raw)
