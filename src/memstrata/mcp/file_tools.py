"""``memory_read`` and ``memory_write``: the memory files as REST's
``/api/config/agent-files/{name}`` reads and writes them (:mod:`memstrata.mcp.files`).

``memory_write`` stores through a person's write path, but a model writes the text (the
server's instructions tell it to), so it refuses what a person may mean but a model most
likely does by mistake (a person's edit — REST, the settings page — is stored as written):

* text that would leave a code fence open, or an HTML block only its end ends (``<!--``
  without ``-->``), as the agent tools' whole-file write does
  (:func:`~memstrata.agent.arguments.check_open_blocks`): everything after it, later
  sections too, would read as code or as part of the block to the agent tools and the
  prompt's cut;
* a blank text, which would wipe the file (a model's empty argument, not a wish: the
  entry tools refuse empty content too), and a text that removes most of the file's
  entries or sections (:mod:`memstrata.agent.removals`) unless ``replace_all`` says the
  model means it — like ``update_user``'s ``replace_section`` and
  ``update_long_term_memory``'s ``whole_file``. A model that meant to add a line and
  sent that line alone would otherwise replace the file with it, and no history undoes
  that. A write that removes fewer is stored, and its answer says what it removed.

A retried write whose text the file already holds answers "No change", whatever its
``expected_version`` (the tool is idempotent: the first call landed).
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from memstrata.agent.arguments import check_open_blocks, numbered_lines
from memstrata.agent.removals import Removal, removal, said
from memstrata.agent.wording import counted, listed
from memstrata.errors import ToolInputError
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.files import (
    READABLE_NAMES,
    WRITABLE_NAMES,
    check_content,
    read_file,
    stored_file,
    tool_kind,
    write_file,
)
from memstrata.mcp.tool_args import args_schema, parse_arguments, result_schema
from memstrata.memory.kinds import FileKind

# structuredContent's ``error`` for content that leaves a code fence or an HTML block open,
# for a blank content, and for one that would remove most of the file.
UNCLOSED_BLOCK = "unclosed_block"
EMPTY_CONTENT = "empty_content"
WOULD_REMOVE_MOST = "would_remove_most"

# The targeted tools for each file, as a refusal names them (SOUL.md has none).
_TARGETED = {
    FileKind.MEMORY: "record_memory to add or correct one entry (replaces= names the old one)",
    FileKind.USER: "update_user to set one fact",
    FileKind.SOUL: None,
}


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
    replace_all: StrictBool = Field(
        default=False,
        description="true: you mean to remove most of the file's entries or sections (a "
        "write that would is refused without it).",
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
    kind = tool_kind(args.name, agents=True)
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
    kind = tool_kind(args.name, agents=False)
    text, name = args.content, kind.filename
    check_content(caller, text)
    if not text.strip():
        raise ToolError(_empty(kind), {"error": EMPTY_CONTENT})
    # On a worker thread: the check reads the whole text as Markdown, up to 0.5 s of
    # CPU for 256 KB that would hold up every other request on the event loop.
    try:
        await anyio.to_thread.run_sync(lambda: check_open_blocks(numbered_lines(text), name))
    except ToolInputError as exc:
        # A code as the other content refusals have, so a client can tell it from them.
        raise ToolError(str(exc), {"error": UNCLOSED_BLOCK}) from exc
    current = await stored_file(caller, kind)
    if current is not None and current.content == text:
        data = {"name": kind.api_name, "file_type": kind.file_type, "version": current.version}
        reply = f"No change: {name} already holds this text (version {current.version})."
        return ToolOutput(reply, data)
    removed = None
    # Compared only with the version the write is based on: with another, the write is
    # refused as stale anyway, and the model re-reads before it writes again.
    if current is not None and current.version == args.expected_version:
        old = current.content
        removed = await anyio.to_thread.run_sync(lambda: removal(old, text))
        if removed.most and not args.replace_all:
            raise ToolError(_most_removed(kind, removed), _counts(removed))
    file = await write_file(caller, kind, text, args.expected_version)
    data = {"name": kind.api_name, "file_type": kind.file_type, "version": file.version}
    said = _removed(removed) if removed is not None else ""
    return ToolOutput(f"Saved {name} as version {file.version}.{said}", data)


def _empty(kind: FileKind) -> str:
    targeted = _TARGETED[kind]
    return (
        f"content is empty, and memory_write replaces all of {kind.filename} with it; nothing "
        "was written. Send all of the file with your change (memory_read gives the current "
        f"text){f', or use {targeted}' if targeted else ''}; to empty it, send its title "
        "line alone with replace_all=true."
    )


def _most_removed(kind: FileKind, removed: Removal) -> str:
    file, targeted = kind.filename, _TARGETED[kind]
    parts = []
    if removed.entries:
        total = counted(removed.entry_count, "entry", "entries")
        parts.append(f"{len(removed.entries)} of the {total} of {file} ({_quotes(removed)})")
    if removed.sections:
        whose = "its" if parts else "the"
        total = counted(removed.section_count, "section", "sections")
        where = "" if parts else f" of {file}"
        parts.append(f"{len(removed.sections)} of {whose} {total}{where} ({_titles(removed)})")
    return (
        f"this would remove {' and '.join(parts)}; nothing was written. memory_write replaces "
        "the whole file: send all of it with your change (memory_read gives the current "
        f"text), {f'use {targeted}, ' if targeted else ''}or pass replace_all=true if you "
        "mean to remove them"
    )


def _counts(removed: Removal) -> dict[str, Any]:
    return {
        "error": WOULD_REMOVE_MOST,
        "entries_removed": len(removed.entries),
        "entries": removed.entry_count,
        "sections_removed": len(removed.sections),
        "sections": removed.section_count,
    }


def _removed(removed: Removal) -> str:
    """What a stored rewrite removed, for its answer ('' if nothing): the words
    ``update_long_term_memory``'s whole-file write answers with too."""
    text = said(removed)
    return f" {text}" if text else ""


def _quotes(removed: Removal) -> str:
    return listed(removed.entries)


def _titles(removed: Removal) -> str:
    return listed(removed.sections)


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
        "Replace a whole memory file (soul, user or memory) with content, guarded by the "
        "version you read: a stale expected_version is refused with the current version. "
        "For a whole-file rewrite; to add or correct one entry or fact, record_memory and "
        "update_user are safer. Refused: empty content, content that leaves a code fence "
        "open, and content that removes most of the file's entries or sections unless "
        "replace_all=true. The answer lists the entries a write removed.",
        args_schema(_WriteArgs),
        hints(read_only=False, destructive=True, idempotent=True),
        memory_write,
        result_schema(_FileWritten),
    ),
)
