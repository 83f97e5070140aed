"""The MCP tools: schema, annotations and a thin handler each, over the existing services.

=========================  =============================================================
tool                       calls (the same as)
=========================  =============================================================
memory_search              ``SearchService.search`` with the agent tool's schema and limits
                           (``memstrata.agent``); result = REST ``POST /api/memory/search``,
                           text = the agent tool's hit lines (``search_text``)
memory_read                REST ``GET /api/config/agent-files/{name}`` (+ AGENTS template)
memory_write               REST ``PUT /api/config/agent-files/{name}`` (:func:`write_file`)
record_memory,             ``memstrata.agent.tools.MemoryTools``: schemas, checks, text
update_long_term_memory,
update_user
conversation_index_turn    REST ``POST /api/memory/conversations/{session_id}/turns``
skills_list, skill_set     ``SkillService`` (REST ``/api/config/skills``)
=========================  =============================================================

Bad arguments, stale versions and unknown skills are ``ToolError`` (an ``isError``
result); nothing is written on any error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from mcp_types import Tool, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from memstrata.agent.answers import search_text
from memstrata.agent.arguments import search_arguments
from memstrata.agent.schemas import check_arguments, tool_schemas, without_null_optionals
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.api.errors import validation_error
from memstrata.api.schemas import IndexReportBody, SearchResults, SkillList, TurnRequest
from memstrata.errors import (
    InvalidContentError,
    InvalidFileTypeError,
    ToolInputError,
    UnknownSkillError,
)
from memstrata.mcp.base import Caller, ToolError, ToolOutput
from memstrata.mcp.files import READABLE_NAMES, WRITABLE_NAMES, read_file, write_file
from memstrata.memory.kinds import FileKind, api_kind
from memstrata.retrieval.session_ids import MAX_SESSION_ID_LENGTH, SESSION_ID_RULE
from memstrata.sandbox.results import open_sandbox

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Caller, dict[str, Any]], Awaitable[ToolOutput]]

# The agent tools that MCP exposes as they are (memory_search gets a structured result).
AGENT_WRITE_TOOLS = ("record_memory", "update_long_term_memory", "update_user")


@dataclass(frozen=True)
class McpTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: ToolAnnotations
    handler: Handler
    # The shape of the structured result, for clients that validate it (the SDK's does);
    # None for the agent write tools, which answer in text only.
    output_schema: dict[str, Any] | None = None

    def describe(self) -> Tool:
        return Tool(
            name=self.name,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=self.annotations,
        )


def _hints(*, read_only: bool, destructive: bool = False, idempotent: bool) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=None if read_only else destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,  # only this user's memory, never the outside world
    )


def _agent_function(name: str) -> dict[str, Any]:
    return next(
        s["function"] for s in tool_schemas(include_search=True) if s["function"]["name"] == name
    )


# How to fix an argument whose REST-style message ("expected_version: Field required")
# says only what is wrong.
_FIXES = {
    "expected_version": "call memory_read first and pass the version it returns as "
    "expected_version (0 for a file that does not exist yet)",
    "timestamp": "timestamp is ISO 8601, e.g. 2026-12-05T10:00:00Z; leave it out for now",
}


def _parse(model: type[M], arguments: dict[str, Any]) -> M:
    optional = {name for name, f in model.model_fields.items() if not f.is_required()}
    try:
        return model.model_validate(without_null_optionals(arguments, optional))
    except ValidationError as exc:
        wrong = {str(e["loc"][0]) for e in exc.errors() if e["loc"]}
        fixes = [fix for name, fix in _FIXES.items() if name in wrong]
        detail = str(validation_error(exc.errors()).body["detail"])
        raise ToolError("; ".join([detail, *fixes])) from exc


def _json(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1)


# -- memory_search ---------------------------------------------------------------------------


async def memory_search(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    try:
        query, top_k, sources = search_arguments(**check_arguments("memory_search", arguments))
    except ToolInputError as exc:
        raise ToolError(str(exc)) from exc
    search = partial(caller.mem.search.search, caller.user_id, query, top_k=top_k, sources=sources)
    try:
        result = await anyio.to_thread.run_sync(search)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    # The model reads the agent tool's compact lines (indented JSON cost up to twice the
    # hits' own text in tokens); a client that wants the fields reads structuredContent.
    text = search_text(result.hits, query, result.warnings)
    return ToolOutput(text, result.to_dict())


# -- memory files ------------------------------------------------------------------------------


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(
        description="Which file: soul (SOUL.md), user (USER.md), memory (MEMORY.md) or agents "
        "(AGENTS.md, the platform template, read-only).",
        json_schema_extra={"enum": list(READABLE_NAMES)},
    )


class _WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(
        description="soul, user or memory (AGENTS.md is read-only).",
        json_schema_extra={"enum": list(WRITABLE_NAMES)},
    )
    content: StrictStr = Field(description="The file's complete new text (Markdown).")
    expected_version: Annotated[StrictInt, Field(ge=0)] = Field(
        description="The version memory_read returned; the write is refused if the file has "
        "changed since (0: only if the file does not exist yet)."
    )


class _FileRead(BaseModel):
    name: str = Field(description="soul, user, memory or agents.")
    file_type: str = Field(examples=["user_md"])
    content: str
    version: int | None = Field(description="Pass it to memory_write; null for AGENTS.md.")
    read_only: bool = Field(description="true for AGENTS.md, the platform template.")


class _FileWritten(BaseModel):
    name: str
    file_type: str
    version: int = Field(description="The file's new version.")


async def memory_read(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = _parse(_ReadArgs, arguments)
    try:
        kind = api_kind(args.name, agents=True)
    except InvalidFileTypeError as exc:
        raise ToolError(str(exc)) from exc
    view = await read_file(caller, kind)
    data = view.to_dict()
    head = (
        f"{view.filename} (read-only platform template)"
        if view.read_only
        else (f"{view.filename}, version {view.version}")
    )
    return ToolOutput(f"{head}:\n\n{view.content}", data)


async def memory_write(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = _parse(_WriteArgs, arguments)
    try:
        kind = api_kind(args.name)
    except InvalidFileTypeError as exc:
        raise ToolError(str(exc)) from exc
    file = await write_file(caller, kind, args.content, args.expected_version)
    data = {"name": kind.api_name, "file_type": kind.file_type, "version": file.version}
    return ToolOutput(f"Saved {kind.filename} as version {file.version}.", data)


# -- the agent's write tools ---------------------------------------------------------------


def _agent_tool(name: str) -> Handler:
    async def run(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
        mem, user_id = caller.mem, caller.user_id
        # A brand-new user starts from the templates, as an agent session would.
        await read_file(caller, FileKind.MEMORY)
        sandbox = open_sandbox(mem.sandboxes, user_id, None)  # a failing provider: DB only
        context = ToolContext.bind(user_id, mem.sync, sandbox, rounds=False)  # no round ends
        tools = MemoryTools(context, searcher=mem.search)
        answer = await tools.call(name, arguments)
        if not answer.failed:
            # Platform agents cached for this user were built on the old files.
            await mem.sync.invalidate(user_id)
        return ToolOutput(str(answer), is_error=answer.failed)

    return run


# -- conversations ---------------------------------------------------------------------------


class _TurnArgs(TurnRequest):
    # The rule is checked by the indexer (``retrieval.session_ids.check_session_id``, as for
    # REST); the schema only documents it.
    session_id: StrictStr = Field(
        description="The conversation's id (as in POST /api/memory/conversations/{id}/turns): "
        + SESSION_ID_RULE,
        json_schema_extra={"minLength": 1, "maxLength": MAX_SESSION_ID_LENGTH},
    )


async def conversation_index_turn(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = _parse(_TurnArgs, arguments)
    index = partial(
        caller.mem.indexer.index_turn,
        caller.user_id,
        args.session_id,
        args.turn_index,
        args.user_message,
        args.assistant_reply,
        timestamp=args.timestamp,
    )
    try:
        report = await anyio.to_thread.run_sync(index)
    except (InvalidContentError, ValueError) as exc:
        raise ToolError(str(exc)) from exc
    data = report.to_dict()
    return ToolOutput(_json(data), data)


# -- skills ------------------------------------------------------------------------------------


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _SkillArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skill_name: Annotated[StrictStr, Field(min_length=1)] = Field(
        description="A name from skills_list."
    )
    enabled: StrictBool = Field(description="true to turn the skill on, false to turn it off.")


class _SkillSet(BaseModel):
    skill_name: str
    enabled: bool


async def skills_list(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    _parse(_NoArgs, arguments)
    skills = await anyio.to_thread.run_sync(caller.mem.skills.list_for_user, caller.user_id)
    data = {
        "skills": [
            {
                "name": s.name,
                "description": s.description,
                "category": s.category,
                "enabled": s.enabled,
            }
            for s in skills
        ]
    }
    return ToolOutput(_json(data), data)


async def skill_set(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = _parse(_SkillArgs, arguments)
    toggle = partial(caller.mem.skills.set_enabled, caller.user_id, args.skill_name, args.enabled)
    try:
        skill = await anyio.to_thread.run_sync(toggle)
    except UnknownSkillError as exc:
        raise ToolError(f"{exc} (over MCP: skills_list)") from exc
    data = {"skill_name": skill.name, "enabled": skill.enabled}
    state = "on" if skill.enabled else "off"
    return ToolOutput(f"Skill {skill.name} is {state}.", data)


# -- the catalogue -------------------------------------------------------------------------


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    return schema


def _output(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(mode="serialization")
    schema.pop("title", None)
    return schema


def _catalogue() -> list[McpTool]:
    search = _agent_function("memory_search")
    tools = [
        McpTool(
            "memory_search",
            search["description"]
            + " Returns hits with file path or session, source ids, score and per-stage ranks.",
            search["parameters"],
            _hints(read_only=True, idempotent=True),
            memory_search,
            _output(SearchResults),
        ),
        McpTool(
            "memory_read",
            "Read one memory file (SOUL.md, USER.md, MEMORY.md) with its version, or AGENTS.md "
            "(the platform's rules, read-only). Pass the version to memory_write.",
            _schema(_ReadArgs),
            _hints(read_only=True, idempotent=True),
            memory_read,
            _output(_FileRead),
        ),
        McpTool(
            "memory_write",
            "Replace a whole memory file (soul, user or memory), guarded by the version you "
            "read: a stale expected_version is refused with the current version.",
            _schema(_WriteArgs),
            _hints(read_only=False, destructive=True, idempotent=True),
            memory_write,
            _output(_FileWritten),
        ),
    ]
    # All three may remove text (record_memory the entry its 'replaces' names), and none
    # changes more when repeated (record_memory stores no entry twice).
    agent_hints = {
        "record_memory": _hints(read_only=False, destructive=True, idempotent=True),
        "update_long_term_memory": _hints(read_only=False, destructive=True, idempotent=True),
        "update_user": _hints(read_only=False, destructive=True, idempotent=True),
    }
    for name in AGENT_WRITE_TOOLS:
        function = _agent_function(name)
        tools.append(
            McpTool(
                name,
                function["description"],
                function["parameters"],
                agent_hints[name],
                _agent_tool(name),
            )
        )
    tools += [
        McpTool(
            "conversation_index_turn",
            "Index one conversation round (user message + assistant reply) so memory_search "
            "finds it. Re-sending the same turn_index with the same text changes nothing; "
            "with new text it replaces that turn.",
            _schema(_TurnArgs),
            _hints(read_only=False, destructive=True, idempotent=True),
            conversation_index_turn,
            _output(IndexReportBody),
        ),
        McpTool(
            "skills_list",
            "List the installed skills and whether each is on for this user.",
            _schema(_NoArgs),
            _hints(read_only=True, idempotent=True),
            skills_list,
            _output(SkillList),
        ),
        McpTool(
            "skill_set",
            "Turn one skill on or off for this user.",
            _schema(_SkillArgs),
            _hints(read_only=False, destructive=False, idempotent=True),
            skill_set,
            _output(_SkillSet),
        ),
    ]
    return tools


TOOLS: tuple[McpTool, ...] = tuple(_catalogue())
