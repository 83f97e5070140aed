"""``memory_read`` and ``memory_write``: the memory files as REST's
``/api/config/agent-files/{name}`` reads and writes them (:mod:`memstrata.mcp.files`).

``memory_write`` stores through a person's write path, but a model writes the text (the
server's instructions tell it to), so it refuses text that would leave a code fence open,
or an HTML block only its end ends (``<!--`` without ``-->``), as the agent tools'
whole-file write does (:func:`~memstrata.agent.arguments.check_open_blocks`): everything after
it, later sections too, would read as code or as part of the block to the agent tools and
the prompt's cut. A person's edit (REST, the settings page) is stored as written.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from memstrata.agent.arguments import check_open_blocks, numbered_lines
from memstrata.errors import InvalidFileTypeError, ToolInputError
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.files import READABLE_NAMES, WRITABLE_NAMES, read_file, write_file
from memstrata.mcp.tool_args import args_schema, parse_arguments, result_schema
from memstrata.memory.kinds import api_kind

# structuredContent's ``error`` for content that leaves a code fence or an HTML block open.
UNCLOSED_BLOCK = "unclosed_block"


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
    args = parse_arguments(_ReadArgs, arguments)
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
    args = parse_arguments(_WriteArgs, arguments)
    try:
        kind = api_kind(args.name)
    except InvalidFileTypeError as exc:
        raise ToolError(str(exc)) from exc
    # On a worker thread: the check reads the whole text as Markdown, up to 0.5 s of
    # CPU for 256 KB that would hold up every other request on the event loop.
    text, name = args.content, kind.filename
    try:
        await anyio.to_thread.run_sync(lambda: check_open_blocks(numbered_lines(text), name))
    except ToolInputError as exc:
        # A code as the other content refusals have, so a client can tell it from them.
        raise ToolError(str(exc), {"error": UNCLOSED_BLOCK}) from exc
    file = await write_file(caller, kind, args.content, args.expected_version)
    data = {"name": kind.api_name, "file_type": kind.file_type, "version": file.version}
    return ToolOutput(f"Saved {kind.filename} as version {file.version}.", data)


FILE_TOOLS = (
    McpTool(
        "memory_read",
        "Read one memory file (SOUL.md, USER.md, MEMORY.md) with its version, or AGENTS.md "
        "(the platform's rules, read-only). Pass the version to memory_write.",
        args_schema(_ReadArgs),
        hints(read_only=True, idempotent=True),
        memory_read,
        result_schema(_FileRead),
    ),
    McpTool(
        "memory_write",
        "Replace a whole memory file (soul, user or memory), guarded by the version you "
        "read: a stale expected_version is refused with the current version, and so is "
        "content that leaves a code fence open.",
        args_schema(_WriteArgs),
        hints(read_only=False, destructive=True, idempotent=True),
        memory_write,
        result_schema(_FileWritten),
    ),
)
