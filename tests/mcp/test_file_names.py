"""The file names a model naturally writes: ``MEMORY.md``, ``memory.md``, ``/MEMORY.md``,
``SOUL``, ``Memory`` name the file over MCP (tools and resources); anything else is
refused in English with the names to use and the closest one. HTTP keeps the spec's
exact names and its ``无效的文件名`` (``api_kind``). Through the SDK's in-process client on
the real runtime."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from memstrata.errors import InvalidFileTypeError
from memstrata.memory.kinds import FileKind, api_kind, model_kind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, stored, text

pytestmark = pytest.mark.anyio

ALIASES = [
    ("MEMORY.md", FileKind.MEMORY),
    ("memory.md", FileKind.MEMORY),
    ("/MEMORY.md", FileKind.MEMORY),
    ("Memory", FileKind.MEMORY),
    ("memory_md", FileKind.MEMORY),
    ("SOUL", FileKind.SOUL),
    ("/user", FileKind.USER),
    ("User.MD", FileKind.USER),
    ("AGENTS.md", FileKind.AGENTS),
    ("memory", FileKind.MEMORY),
]


@pytest.mark.parametrize(("name", "kind"), ALIASES)
def test_the_alias_rule(name: str, kind: FileKind) -> None:
    assert model_kind(name) is kind


@pytest.mark.parametrize(
    "name", ["diary", "", "/", "memory.txt", "memory ", "//memory", "MEMORY.md.md", "soul_md.md"]
)
def test_anything_else_is_no_file(name: str) -> None:
    assert model_kind(name) is None


def test_http_keeps_the_spec_s_exact_names() -> None:
    with pytest.raises(InvalidFileTypeError, match=r"invalid file name: 'MEMORY\.md'"):
        api_kind("MEMORY.md")


async def test_memory_read_takes_the_aliases(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        for name, kind in ALIASES:
            read = (await ok(client, "memory_read", {"name": name})).structured_content
            assert read is not None and read["name"] == kind.api_name, name


async def test_memory_write_takes_an_alias(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "SOUL.md"})).structured_content
        assert read is not None
        content = str(read["content"]) + "- Likes puns.\n"
        arguments = {"name": "/SOUL.md", "content": content, "expected_version": read["version"]}
        result = await ok(client, "memory_write", arguments)
    assert text(result) == f"Saved SOUL.md as version {read['version'] + 1}."
    assert stored(mem, "alice", FileKind.SOUL) == (content, read["version"] + 1)


@pytest.mark.parametrize(
    ("tool", "name", "message"),
    [
        (
            "memory_read",
            "memroy",
            "error: no memory file is named 'memroy'; did you mean 'memory'? name is one of "
            "soul (SOUL.md), user (USER.md), memory (MEMORY.md), agents (AGENTS.md, read-only)",
        ),
        (
            "memory_read",
            "diary",
            "error: no memory file is named 'diary'; name is one of soul (SOUL.md), user "
            "(USER.md), memory (MEMORY.md), agents (AGENTS.md, read-only)",
        ),
        (
            "memory_write",
            "users.md",
            "error: no memory file is named 'users.md'; did you mean 'user'? name is one of "
            "soul (SOUL.md), user (USER.md), memory (MEMORY.md)",
        ),
        (
            "memory_write",
            "AGENTS.md",
            "error: AGENTS.md is the platform template and is read-only; name is one of "
            "soul (SOUL.md), user (USER.md), memory (MEMORY.md)",
        ),
    ],
)
async def test_other_names_are_refused_in_english_with_the_closest(
    connect: ClientFactory, mem: Memstrata, tool: str, name: str, message: str
) -> None:
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "memory"})
        before = stored(mem, "alice", FileKind.MEMORY)
        arguments = {"name": name, "content": "x", "expected_version": 1}
        result = await client.call_tool(
            tool, arguments if tool == "memory_write" else {"name": name}
        )
    assert result.is_error and text(result) == message
    assert result.structured_content == {"error": "invalid_file_name"}
    assert stored(mem, "alice", FileKind.MEMORY) == before


async def test_the_file_resources_take_the_aliases(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        canonical = await client.read_resource("memstrata://files/memory")
        for name in ("MEMORY.md", "memory.md", "Memory"):
            read = await client.read_resource(f"memstrata://files/{name}")
            assert read.contents == canonical.contents, name
        with pytest.raises(MCPError) as raised:
            await client.read_resource("memstrata://files/memroy")
    assert raised.value.code == INVALID_PARAMS
    assert raised.value.message == (
        "unknown resource 'memstrata://files/memroy': no memory file is named 'memroy'; "
        "did you mean 'memory'? name is one of soul (SOUL.md), user (USER.md), memory "
        "(MEMORY.md), agents (AGENTS.md, read-only)"
    )
