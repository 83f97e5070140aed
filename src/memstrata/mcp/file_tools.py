"""``memory_read`` and ``memory_write``: the memory files as REST's
``/api/config/agent-files/{name}`` reads and writes them (:mod:`memstrata.mcp.files`).

``memory_write`` stores through a person's write path, but a model writes the text, so it
is guarded: a blank text, one that leaves a code fence or an HTML block open, and one that
removes most of the file, or any of its paragraphs but the template's, without
``replace_all`` are refused, and a write whose text is stored is "No change" on the current
version; on an older one it is the store's conflict, saying the file holds this text
already, unless ``MEMSTRATA_SAME_TEXT_STALE_VERSION=unchanged`` makes it "No change" too
(one rule with REST's PUT). The guard is the agent layer's
(:mod:`memstrata.agent.rewrite_guard`); this transport reads the stored file, writes, and
maps its verdict to an answer.

``memory_read`` with ``section``, ``start_line`` or ``line_count`` returns that part of the
file (:mod:`memstrata.agent.file_part`) with the file's length, size and version; a part it
refuses has its code in ``structuredContent``, as a refused write has. A section name is
read as the file may spell it: what the write tools refuse in a name (an invisible or
control character, more than 80 characters) is no refusal here.
"""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

import anyio.to_thread
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)

from memstrata.agent.file_part import FilePart, PartRefused, file_part
from memstrata.agent.removals import template_paragraphs
from memstrata.agent.rewrite_guard import (
    NoChange,
    Refused,
    Verdict,
    rewrite_verdict,
    text_refusal,
)
from memstrata.agent.schemas import FILE_LIMIT_RULE
from memstrata.db.integers import MAX_INT
from memstrata.mcp.base import Caller, McpTool, ToolError, ToolOutput, hints
from memstrata.mcp.files import (
    check_content,
    check_version,
    read_file,
    stored_file,
    tool_kind,
    write_file,
)
from memstrata.mcp.tool_args import args_schema, parse_arguments, result_schema
from memstrata.memory.kinds import FileKind

# memory_read's optional arguments as its schema states them: a string, an integer of at
# least 1 (file_part checks it), no "anyOf" with null (the integer rule reads "type", and
# a model need not read it) — null is taken as absent all the same.
_TEXT = WithJsonSchema({"type": "string"})
_LINE_NUMBER = WithJsonSchema({"type": "integer", "minimum": 1})
# No enum of names: the tools take each file's name as a model writes it (``tool_kind``:
# MEMORY.md, Memory, /memory.md …), which a validating client would refuse against an
# enum of soul/user/memory, and no JSON Schema pattern says "any case" short of spelling
# out every letter. A name the server does not take gets its refusal with the closest one.
_NAME_SPELLINGS = "The file name (MEMORY.md) in any case works too."


class _ReadArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(
        description="Which file: soul (SOUL.md), user (USER.md), memory (MEMORY.md) or agents "
        f"(AGENTS.md, the platform template, read-only). {_NAME_SPELLINGS}"
    )
    section: Annotated[StrictStr | None, _TEXT] = Field(
        default=None, description="Read only this '## ' section, e.g. 'Decisions'."
    )
    start_line: Annotated[StrictInt | None, _LINE_NUMBER] = Field(
        default=None, description="Read from this line (1: the first)."
    )
    line_count: Annotated[StrictInt | None, _LINE_NUMBER] = Field(
        default=None, description="Read this many lines (default: to the end)."
    )


class _WriteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: StrictStr = Field(
        description=f"soul, user or memory (AGENTS.md is read-only). {_NAME_SPELLINGS}"
    )
    content: StrictStr = Field(
        description=f"The file's complete new text (Markdown), {FILE_LIMIT_RULE}."
    )
    # The range is stated, not checked here: the store's rule (``check_version``) refuses
    # a version below 0 as it does one above the largest, in one wording.
    expected_version: StrictInt = Field(
        description="The version memory_read returned; the write is refused if the file has "
        "changed since (0: only if the file does not exist yet).",
        json_schema_extra={"minimum": 0, "maximum": MAX_INT},
    )
    replace_all: StrictBool = Field(
        default=False,
        description="true: you mean to remove most of the file's entries or sections, or "
        "any of its paragraphs (a write that would is refused without it).",
    )


class _FileRead(BaseModel):
    name: str = Field(description="soul, user, memory or agents.")
    file_type: str = Field(examples=["user_md"])
    content: str = Field(description="The file, or the part asked for.")
    version: int | None = Field(description="Pass it to memory_write; null for AGENTS.md.")
    read_only: bool = Field(description="true for AGENTS.md, the platform template.")
    # Only for a part (section, start_line or line_count given).
    section: str | None = Field(default=None, description="The section read, as spelled.")
    start_line: int | None = Field(default=None, description="The part's first line.")
    end_line: int | None = Field(default=None, description="The part's last line.")
    total_lines: int | None = Field(default=None, description="The whole file's lines.")
    total_bytes: int | None = Field(default=None, description="The whole file's size.")


class _FileWritten(BaseModel):
    name: str
    file_type: str
    version: int = Field(description="The file's new version.")


async def memory_read(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    args = parse_arguments(_ReadArgs, arguments, "memory_read")
    kind = tool_kind(args.name, agents=True)
    view = await read_file(caller, kind)
    data = view.to_dict()
    head = (
        f"{view.filename} (read-only platform template)"
        if view.read_only
        else (f"{view.filename}, version {view.version}")
    )
    find = partial(
        file_part,
        view.content,
        view.filename,
        section=args.section,
        start_line=args.start_line,
        line_count=args.line_count,
    )
    try:
        # On a worker thread: a section is found by reading the whole file as Markdown.
        part = await anyio.to_thread.run_sync(find)
    except PartRefused as exc:
        raise ToolError(str(exc), exc.data) from exc
    if part is None:
        return ToolOutput(f"{head}:\n\n{view.content}", data)
    return _part_read(head, part, data)


def _part_read(head: str, part: FilePart, data: dict[str, Any]) -> ToolOutput:
    """A part's answer: which lines of how many (and section), the lines, how to read the
    rest; its data is the whole read's with the part for ``content``."""
    data = data | {
        "content": part.text,
        "section": part.section,
        "start_line": part.start,
        "end_line": part.end,
        "total_lines": part.total_lines,
        "total_bytes": part.total_bytes,
    }
    title = f", ## {part.section}" if part.section is not None else ""
    head += f"{title}: {part.lines} of {part.total_lines} ({part.total_bytes} bytes in all)"
    rest = part.rest()
    return ToolOutput(f"{head}:\n\n{part.text}" + (f"\n\n{rest}" if rest else ""), data)


async def memory_write(caller: Caller, arguments: dict[str, Any]) -> ToolOutput:
    name = arguments.get("name")
    if isinstance(name, str):
        # The file first: a model told to add expected_version to a write of AGENTS.md
        # (read-only) or of no memory file would be refused again for that.
        tool_kind(name, agents=False)
    args = parse_arguments(_WriteArgs, arguments, "memory_write")
    kind = tool_kind(args.name, agents=False)
    text = args.content
    check_content(caller, text)
    check_version(args.expected_version)
    # On worker threads: the guard reads the whole text as Markdown, up to 0.5 s of CPU
    # for 256 KB that would hold up every other request on the event loop.
    refused = await anyio.to_thread.run_sync(text_refusal, kind, text)
    if refused is not None:
        raise ToolError(refused.message, refused.data)
    current = await stored_file(caller, kind)

    def judge() -> Verdict:
        # The template paragraphs too are read here, off the loop: they may go unnamed.
        scaffold = template_paragraphs(caller.mem.store, kind)
        return rewrite_verdict(
            kind,
            text,
            current,
            args.expected_version,
            replace_all=args.replace_all,
            scaffold=scaffold,
            same_text=caller.mem.store.same_text_stale_version,
        )

    verdict = await anyio.to_thread.run_sync(judge)
    if isinstance(verdict, Refused):
        raise ToolError(verdict.message, verdict.data)
    if isinstance(verdict, NoChange):
        return ToolOutput(verdict.answer, _written(kind, verdict.version))
    file = await write_file(caller, kind, text, args.expected_version)
    if not file.changed:  # the same text landed since it was read, and the rule allows it
        return ToolOutput(NoChange(kind, file.version).answer, _written(kind, file.version))
    return ToolOutput(verdict.answer(file.version), _written(kind, file.version))


def _written(kind: FileKind, version: int) -> dict[str, Any]:
    return {"name": kind.api_name, "file_type": kind.file_type, "version": version}


def _read_schema() -> dict[str, Any]:
    """memory_read's arguments without what tells a model nothing: the generator's titles
    ("Start Line") and the optional ones' ``default: null`` (a third of the schema's
    tokens)."""
    schema = args_schema(_ReadArgs)
    for spec in schema["properties"].values():
        spec.pop("title", None)
        if spec.get("default", 0) is None:
            del spec["default"]
    return schema


FILE_TOOLS = (
    McpTool(
        "memory_read",
        "Read one memory file (SOUL.md, USER.md, MEMORY.md) with its version, or AGENTS.md "
        "(the platform's rules, read-only). Pass the version to memory_write. section or "
        "start_line/line_count: read part of it.",
        _read_schema(),
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
        "open, and content that removes most of the file's entries or sections, or any "
        "paragraph but the template's, unless replace_all=true. The answer lists the entries a "
        "write removed.",
        args_schema(_WriteArgs),
        hints(read_only=False, destructive=True, idempotent=True),
        memory_write,
        result_schema(_FileWritten),
    ),
)
