"""The library's refusals as a model reads them over MCP (the SDK's in-process client on the
real runtime): the same words as the library and HTTP, in the reader's terms."""

from __future__ import annotations

import pytest

from memstrata.retrieval.session_ids import SESSION_ID_HINT
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import refused

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("version", [2**40, -1, 2**31])
async def test_an_expected_version_out_of_range_has_no_python_words_and_is_required(
    connect: ClientFactory, version: int
) -> None:
    """Either end of the range gets the library's rule (one check), not the generic words
    of an integer argument for one end and the library's for the other."""
    write = {"name": "user", "content": "x", "expected_version": version}
    async with connect("alice") as client:
        said = await refused(client, "memory_write", write)
    assert said == (
        "error: expected_version must be an integer from 0 (the file must not exist yet) to "
        f"2147483647; got {version}"
    )  # required here: never "or left out", as the library's optional one says


async def test_expected_version_states_its_range_in_the_tool_schema(
    connect: ClientFactory,
) -> None:
    async with connect("alice") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    spec = tools["memory_write"].input_schema["properties"]["expected_version"]
    assert (spec["type"], spec["minimum"]) == ("integer", 0)


async def test_an_unknown_skill_lists_the_installed_ones(connect: ClientFactory) -> None:
    async with connect("alice") as client:
        said = await refused(client, "skill_set", {"skill_name": "nosuch", "enabled": True})
    assert said.startswith(
        "error: no skill named 'nosuch'; installed skills: code_interpreter, file_manager, "
        "memory_search, web_search"
    ), said
    assert "GET /api" not in said


async def test_nul_in_content_is_worded_as_everywhere(connect: ClientFactory) -> None:
    write = {"name": "user", "content": "a\x00b", "expected_version": 1}
    async with connect("alice") as client:
        said = await refused(client, "memory_write", write)
    assert said == "error: content must not contain NUL characters ('\\x00' at character 2)"


@pytest.mark.parametrize(
    ("session_id", "said"),
    [
        ("a/b", "invalid session_id 'a/b': character 2 is '/' (a path separator)"),
        ("", "session_id is empty"),
    ],
)
async def test_a_refused_session_id_says_why_and_the_short_rule(
    connect: ClientFactory, mem: Memstrata, session_id: str, said: str
) -> None:
    turn = {"session_id": session_id, "turn_index": 0, "user_message": "hi"}
    async with connect("alice") as client:
        answer = await refused(client, "conversation_index_turn", turn)
    assert answer == f"error: {said}; {SESSION_ID_HINT}"
    assert mem.search.search("alice", "hi", top_k=5).hits == []
