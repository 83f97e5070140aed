"""The MCP server (the SDK's low-level ``Server``) over one runtime's services.

``build_server(runtime, user)`` is transport-free: stdio binds ``user`` to ``--user``,
streamable HTTP to the bearer token's user (:mod:`memstrata.mcp.http`), tests to a fixed
id. ``runtime`` is called per request, so the HTTP app can attach its runtime in its
lifespan. Tool failures are ``isError`` results; unknown tools, resources and prompts and
bad prompt arguments are JSON-RPC errors (``-32602``; arguments of the wrong type or name
are refused by :mod:`memstrata.mcp.prompt_args` before the SDK's validation would refuse
them without saying which); nothing escapes as a crash.

Any other failure — the database unavailable, the runtime starting or stopping, one of
memstrata's own errors — gets the REST API's answer
(:func:`memstrata.api.errors.map_exception`): its message, in a tool's ``isError`` result
or, for resources and prompts, a JSON-RPC error (:class:`FailureAnswers`), where the SDK
would send the exception's own text (the database driver's, naming its host and port) or
"Internal server error". The exception goes to the log only, as a WARNING with the user;
one the mapping does not know is a bug, logged with its traceback and answered
``internal server error`` (all of it in :mod:`memstrata.mcp.failure_answers`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    Prompt,
    PromptArgument,
    PromptMessage,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextContent,
    TextResourceContents,
)

from memstrata import package_version
from memstrata.agent.prompt import check_token_limit
from memstrata.agent.session import build_memory_prompt
from memstrata.errors import InvalidContentError
from memstrata.mcp.base import Caller, RuntimeSource, UserSource
from memstrata.mcp.call_args import CallShapeCheck
from memstrata.mcp.conflicts import (
    LISTING_RESOURCE,
    LISTING_URI,
    TEMPLATES,
    is_conflicts_uri,
    read_conflicts,
)
from memstrata.mcp.failure_answers import FailureAnswers, run_tool
from memstrata.mcp.files import (
    MIME_TYPE,
    READABLE_NAMES,
    URI_TEMPLATE,
    kind_from_uri,
    read_file,
    resource_meta,
    uri,
)
from memstrata.mcp.prompt_args import PromptArgumentCheck, unknown_prompt
from memstrata.mcp.prompt_guide import MCP_GUIDE
from memstrata.mcp.tools import TOOLS, McpTool
from memstrata.memory.kinds import FileKind, api_kind

PROMPT_NAME = "memory_context"
INSTRUCTIONS = (
    "memstrata is this user's long-term memory. Call memory_search before answering questions "
    "about the past. To remember, use record_memory (one entry; replaces= the old entry's "
    "text to correct one) and update_user (one fact about the user): they change only what "
    "you name. memory_write is for a whole-file rewrite only: memory_read the file, then "
    "send all of it with your change and the version read (a write that would remove most "
    "of the file, or a paragraph other than the template's, needs replace_all=true). The "
    "memory_context prompt is the memory "
    f"part of a system prompt. The resource {LISTING_URI} lists your edits that were not "
    "stored (they conflicted with the user's, or were refused)."
)
MEMORY_CONTEXT = Prompt(
    name=PROMPT_NAME,
    description="The memory part of a system prompt: how this server's tools reach memory, "
    "then SOUL > USER > MEMORY, fitted into the configured share (15 %) of token_limit.",
    arguments=[
        PromptArgument(
            name="token_limit",
            description="The model's context size in tokens, e.g. 32000.",
            required=True,
        )
    ],
)


def build_server(runtime: RuntimeSource, user: UserSource) -> Server[Any]:
    """The memstrata MCP server (module doc)."""
    by_name: dict[str, McpTool] = {tool.name: tool for tool in TOOLS}

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=[tool.describe() for tool in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult:
        tool = by_name.get(params.name)
        if tool is None:
            raise MCPError(
                INVALID_PARAMS,
                f"unknown tool {params.name[:100]!r}; available: {', '.join(by_name)}",
            )
        arguments = dict(params.arguments or {})
        return await run_tool(tool, runtime, user(ctx), arguments, ctx.request)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        files = [_resource(name) for name in READABLE_NAMES]
        return ListResourcesResult(resources=[*files, LISTING_RESOURCE])

    async def list_templates(
        _ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        template = ResourceTemplate(
            name="memory file",
            uri_template=URI_TEMPLATE,
            description=f"One memory file; name is one of {', '.join(READABLE_NAMES)}.",
            mime_type=MIME_TYPE,
        )
        return ListResourceTemplatesResult(resource_templates=[template, *TEMPLATES])

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        if is_conflicts_uri(str(params.uri)):
            return await read_conflicts(_caller(runtime, user, ctx), str(params.uri))
        kind = kind_from_uri(str(params.uri))
        if kind is None:
            raise MCPError(
                INVALID_PARAMS,
                f"unknown resource {str(params.uri)[:200]!r}; use {URI_TEMPLATE} with name "
                f"one of {', '.join(READABLE_NAMES)}, or {LISTING_URI}",
            )
        view = await read_file(_caller(runtime, user, ctx), kind)
        contents = TextResourceContents(
            uri=uri(kind),
            mime_type=MIME_TYPE,
            text=view.content,
            _meta=resource_meta(view),
        )
        return ReadResourceResult(contents=[contents])

    async def list_prompts(
        _ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        return ListPromptsResult(prompts=[MEMORY_CONTEXT])

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        if params.name != PROMPT_NAME:
            raise unknown_prompt(params.name, [PROMPT_NAME])
        limit = prompt_token_limit(params.arguments)
        caller = _caller(runtime, user, ctx)
        await read_file(caller, FileKind.MEMORY)  # a new user is provisioned first
        mem = caller.mem
        # Led by the guide to this server's tools, not the platform's AGENTS.md: the rules
        # of its workspace agents, whose workspace and file tools an MCP client has not.
        result = await build_memory_prompt(
            mem.store,
            caller.user_id,
            token_limit=limit,
            ratio=mem.settings.prompt_budget_ratio,
            guide=MCP_GUIDE,
            floor_share=mem.settings.prompt_floor_share,
        )
        notes = [f"{result.tokens} of {result.budget} tokens"]
        notes += [f"truncated: {', '.join(result.truncated)}"] if result.truncated else []
        notes += [f"dropped: {', '.join(result.dropped)}"] if result.dropped else []
        # The text names the files left out itself, within the budget (agent.prompt).
        text = TextContent(type="text", text=result.text)
        return GetPromptResult(
            description=f"memstrata memory ({'; '.join(notes)})",
            messages=[PromptMessage(role="user", content=text)],
            _meta={
                "tokens": result.tokens,
                "budget": result.budget,
                "truncated": list(result.truncated),
                "dropped": list(result.dropped),
            },
        )

    server: Server[Any] = Server(
        "memstrata",
        version=package_version(),
        instructions=INSTRUCTIONS,
        get_tool_input_schema=lambda name: by_name[name].input_schema if name in by_name else None,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    # Innermost, so the SDK's own middleware (tracing) sees these answers too. The
    # failures first: a prompt's failure reaches it past the argument check, which logs
    # only its own refusals.
    server.middleware.append(FailureAnswers(user))
    server.middleware.append(
        PromptArgumentCheck([MEMORY_CONTEXT], examples={"token_limit": "32000"}, user=user)
    )
    server.middleware.append(CallShapeCheck(user))
    return server


def _caller(
    runtime: RuntimeSource, user: UserSource, ctx: ServerRequestContext[Any, Any]
) -> Caller:
    # The runtime's 503 while it starts or stops is answered by FailureAnswers.
    return Caller(runtime(), user(ctx), ctx.request)


def _resource(name: str) -> Resource:
    kind = api_kind(name, agents=True)
    note = " (the platform template, read-only)" if kind is FileKind.AGENTS else ""
    return Resource(
        name=kind.filename,
        uri=uri(kind),
        description=f"{kind.filename}{note}.",
        mime_type=MIME_TYPE,
    )


def prompt_token_limit(arguments: Mapping[str, str] | None) -> int:
    """``memory_context``'s ``token_limit``, checked by the library's rule
    (:func:`~memstrata.agent.prompt.check_token_limit`); a bad one is ``-32602``."""
    raw = (arguments or {}).get("token_limit")
    if raw is None:
        raise MCPError(INVALID_PARAMS, 'memory_context needs token_limit, e.g. "32000"')
    try:
        return check_token_limit(_whole_number(str(raw)))
    except InvalidContentError as exc:
        raise MCPError(INVALID_PARAMS, str(exc)) from exc


def _whole_number(raw: str) -> int | str:
    """``raw`` as an int when it spells one (prompt arguments are strings in MCP), else
    ``raw`` cut to 40 characters: the refusal echoes it."""
    try:
        return int(raw.strip())
    except ValueError:
        return raw[:40]
