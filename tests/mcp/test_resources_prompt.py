"""The ``memstrata://files/{name}`` resources and the ``memory_context`` prompt."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, TextResourceContents

from memstrata.agent.session import build_memory_prompt
from memstrata.mcp.prompt_guide import MCP_GUIDE
from memstrata.retrieval.tokenize import count_tokens
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio


async def test_resources_are_the_four_files_and_the_kept_aside_edits(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """The kept-aside edits' resources are tests/mcp/test_conflicts_mcp.py's."""
    async with connect("alice") as client:
        listed = (await client.list_resources()).resources
        templates = (await client.list_resource_templates()).resource_templates
        assert [(r.uri, r.name) for r in listed] == [
            ("memstrata://files/soul", "SOUL.md"),
            ("memstrata://files/user", "USER.md"),
            ("memstrata://files/memory", "MEMORY.md"),
            ("memstrata://files/agents", "AGENTS.md"),
            ("memstrata://conflicts", "kept-aside edits"),
        ]
        assert [t.uri_template for t in templates] == [
            "memstrata://files/{name}",
            "memstrata://conflicts{?file,offset,limit}",
            "memstrata://conflicts/{name}",
        ]
        await client.call_tool(
            "memory_write",
            {"name": "soul", "content": "# SOUL.md\nDry humour.\n", "expected_version": 0},
        )
        contents = {}
        for resource in listed[:4]:
            read = await client.read_resource(resource.uri)
            (item,) = read.contents
            assert isinstance(item, TextResourceContents)
            assert (item.uri, item.mime_type) == (resource.uri, "text/markdown")
            contents[resource.name] = (item.text, (item.meta or {}).get("version"))
    assert contents["SOUL.md"] == ("# SOUL.md\nDry humour.\n", 1)
    user = mem.store.get_memory_file("alice", "user")
    assert user is not None and contents["USER.md"] == (user.content, user.version)
    assert contents["AGENTS.md"] == (mem.templates.agents_md(), None)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_resources_meta_is_the_same_in_both_protocol_eras(
    connect: ClientFactory, mode: str
) -> None:
    """The SDK sends a 2026-07-28 result without the null values of its ``_meta`` and a
    handshake-era one with them: AGENTS.md's ``version: null`` was there in one era and
    missing in the other. ``_meta`` now holds no null, so it reads the same in both."""
    async with connect(f"meta-{mode}", mode=mode) as client:
        metas = {}
        for name in ("soul", "user", "memory", "agents"):
            read = await client.read_resource(f"memstrata://files/{name}")
            (item,) = read.contents
            metas[name] = item.meta
    written = {"version": 1, "read_only": False}
    assert metas == {
        "soul": written,
        "user": written,
        "memory": written,
        "agents": {"read_only": True},
    }


async def test_unknown_resource_is_a_protocol_error(connect: ClientFactory) -> None:
    async with connect() as client:
        for uri in ("memstrata://files/diary", "memstrata://files/", "file:///etc/passwd"):
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            assert raised.value.code == INVALID_PARAMS
            assert "unknown resource" in raised.value.message
        assert (await client.list_resources()).resources  # the session lives on


async def test_memory_context_is_the_agent_prompt_led_by_the_mcp_guide(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """The library's prompt for the same user, with the guide to this server's tools in
    place of the platform's AGENTS.md (the rules of its workspace agents)."""
    async with connect("alice") as client:
        await client.call_tool(
            "update_user", {"section": "Profile", "key": "Name", "content": "Alice"}
        )
        listed = (await client.list_prompts()).prompts
        assert [(p.name, [a.name for a in p.arguments or []]) for p in listed] == [
            ("memory_context", ["token_limit"])
        ]
        prompt = await client.get_prompt("memory_context", {"token_limit": "32000"})
        small = await client.get_prompt("memory_context", {"token_limit": "2000"})
    expected = await build_memory_prompt(
        mem.store, "alice", token_limit=32000, ratio=0.15, guide=MCP_GUIDE
    )
    (message,) = prompt.messages
    assert message.role == "user" and message.content.type == "text"
    assert message.content.text == expected.text
    assert expected.text.startswith(MCP_GUIDE + '\n\n<file name="SOUL.md">')
    assert '<file name="AGENTS.md">' not in expected.text
    order = [expected.text.index(f'<file name="{n}">') for n in ("SOUL.md", "USER.md")]
    assert order == sorted(order) and "- Name: Alice" in expected.text
    assert (prompt.meta or {})["budget"] == 4800
    cut = await build_memory_prompt(
        mem.store, "alice", token_limit=2000, ratio=0.15, guide=MCP_GUIDE
    )
    assert small.messages[0].content.text == cut.text  # type: ignore[union-attr]
    assert (small.meta or {})["budget"] == 300 and (small.meta or {})["truncated"] == ["SOUL.md"]
    assert (small.meta or {})["dropped"] == ["USER.md", "MEMORY.md"]
    assert count_tokens(cut.text) == (small.meta or {})["tokens"] <= 300
    assert cut.text.startswith(MCP_GUIDE) and cut.text.endswith(
        "use memory_search or read the files]"
    )


async def test_the_guide_names_only_this_servers_tools(connect: ClientFactory) -> None:
    """Every tool the guide names is one of this server's, and it names no tool of a
    workspace agent's: the model has nothing else to call."""
    async with connect("alice") as client:
        tools = {t.name for t in (await client.list_tools()).tools}
    named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", MCP_GUIDE))
    assert named and named <= tools, named - tools
    for workspace_only in ("write_file", "edit_file", "workspace root", "at the start of"):
        assert workspace_only not in MCP_GUIDE
    # docs/MCP.md quotes it whole.
    assert MCP_GUIDE in (Path(__file__).parents[2] / "docs" / "MCP.md").read_text()


async def test_a_budget_that_holds_no_file_names_them_within_it(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """token_limit 200: a 30-token budget holds no file, nor the guide. The text names
    the files left out in brief, within the budget (the note in full does not fit); an
    empty message told the agent nothing, and the 74-token note it got instead broke the
    budget. token_limit 100 (15 tokens) holds not even that."""
    async with connect("alice") as client:
        prompt = await client.get_prompt("memory_context", {"token_limit": "200"})
        tiny = await client.get_prompt("memory_context", {"token_limit": "100"})
    library = await build_memory_prompt(
        mem.store, "alice", token_limit=200, ratio=0.15, guide=MCP_GUIDE
    )
    (message,) = prompt.messages
    assert message.content.type == "text"
    assert (
        message.content.text
        == library.text
        == ("[left out for lack of room: SOUL.md, USER.md, MEMORY.md]")
    )
    assert prompt.meta is not None
    assert (prompt.meta["tokens"], prompt.meta["budget"]) == (count_tokens(library.text), 30)
    assert prompt.meta["tokens"] <= 30
    assert prompt.meta["dropped"] == ["SOUL.md", "USER.md", "MEMORY.md"]
    assert tiny.messages[0].content.text == ""  # type: ignore[union-attr]
    assert (tiny.meta or {})["dropped"] == ["SOUL.md", "USER.md", "MEMORY.md"]


async def test_memory_context_bad_arguments(connect: ClientFactory) -> None:
    cases = [
        ("memory_context", {}, "memory_context needs token_limit"),
        ("memory_context", {"token_limit": "lots"}, "token_limit must be a whole number"),
        ("memory_context", {"token_limit": "0"}, "token_limit must be a whole number"),
        ("memory_context", {"token_limit": "99999999999"}, "token_limit must be a whole number"),
        ("system_prompt", {"token_limit": "100"}, "unknown prompt 'system_prompt'"),
    ]
    async with connect() as client:
        for name, arguments, message in cases:
            with pytest.raises(MCPError) as raised:
                await client.get_prompt(name, arguments)
            assert raised.value.code == INVALID_PARAMS
            assert message in raised.value.message
