"""What the MCP listing declares of an argument is what the call does with it: sources needs
one item, expected_version stops at the database's integer maximum, update_user's value
for a key is not empty, and memory_context's token_limit is ASCII digits — each refusal
says how to fix the call, and a refused call writes nothing."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError

from memstrata.agent.arguments import check_value
from memstrata.agent.schemas import tool_schemas
from memstrata.db.integers import MAX_INT
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_prompt_args import get_prompt_raw
from tests.mcp.test_tool_arguments import refused

pytestmark = pytest.mark.anyio

EMPTY_VALUE = (
    "content must not be empty (nor a dash alone) when key is given: send the value, e.g. "
    "'Europe/Berlin'; to remove the fact, replace the section's body without its line "
    "(update_user without key, replace_section=true)"
)


def test_the_openai_schema_of_sources_needs_one_item() -> None:
    (search,) = [
        s for s in tool_schemas(include_search=True) if s["function"]["name"] == "memory_search"
    ]
    assert search["function"]["parameters"]["properties"]["sources"]["minItems"] == 1


@pytest.mark.parametrize("value", ["", "  ", "\t"])
def test_an_empty_value_for_a_key_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(ToolInputError) as refusal:
        check_value(value)
    assert str(refusal.value) == EMPTY_VALUE


async def test_the_listing_states_the_limits_the_calls_keep(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t.input_schema["properties"] for t in (await client.list_tools()).tools}
        no_sources = await refused(client, "memory_search", {"query": "tea", "sources": []})
        too_new = await refused(
            client,
            "memory_write",
            {"name": "user", "content": "# USER.md\n", "expected_version": MAX_INT + 1},
        )
    assert tools["memory_search"]["sources"]["minItems"] == 1
    assert "sources" in no_sources
    assert tools["memory_write"]["expected_version"]["maximum"] == MAX_INT
    assert tools["memory_write"]["expected_version"]["minimum"] == 0
    assert (
        f"expected_version must be an integer from 0 (the file must not exist yet) to {MAX_INT}"
        in too_new
    )


async def test_update_user_with_a_key_and_no_value_writes_nothing(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        before = await client.call_tool("memory_read", {"name": "user"})
        said = await refused(
            client, "update_user", {"section": "Profile", "key": "Empty", "content": ""}
        )
    assert said == f"error: {EMPTY_VALUE}"
    stored = mem.store.get_memory_file("alice", FileKind.USER)
    assert stored is None or "Empty" not in stored.content
    assert not before.is_error


@pytest.mark.parametrize(
    "token_limit", ["32_000", "\uff13\uff12\uff10\uff10\uff10", "+32000", "٣٢٠٠٠", "3.2e4"]
)
async def test_token_limit_is_ascii_digits_only(connect: ClientFactory, token_limit: str) -> None:
    async with connect("alice") as client:
        with pytest.raises(MCPError) as raised:
            await get_prompt_raw(client, "memory_context", {"token_limit": token_limit})
        good = await get_prompt_raw(client, "memory_context", {"token_limit": "32000"})
    assert raised.value.code == -32602
    assert raised.value.message == (
        'token_limit must be a whole number in ASCII digits (0-9), e.g. "32000"; got '
        f"{token_limit!r}"
    )
    assert good.messages


@pytest.mark.parametrize(
    ("timestamp", "stored"),
    [
        ("2026-12-01", "2026-12-01T00:00:00+00:00"),
        ("2026-12-01T10:00", "2026-12-01T10:00:00+00:00"),
    ],
)
async def test_a_date_alone_is_midnight_utc_and_no_offset_is_utc(
    connect: ClientFactory, mem: Memstrata, timestamp: str, stored: str
) -> None:
    turn = {"session_id": "s1", "turn_index": 0, "user_message": "tea", "timestamp": timestamp}
    async with connect("alice") as client:
        result = await client.call_tool("conversation_index_turn", turn)
    assert not result.is_error
    (hit,) = mem.search.search("alice", "tea", top_k=5, sources=["conversation"]).hits
    assert hit.created_at.isoformat() == stored


@pytest.mark.parametrize("value", ["-", " - ", "--", "- -", "—", "– \t-", "\u2212"])
def test_a_value_of_dashes_alone_is_refused_as_an_empty_one(value: str) -> None:
    """A model writes "-" for "none": stored, it was the list item "- Key: -", a fact that
    says nothing, as an empty value would be (refused with the same fix)."""
    with pytest.raises(ToolInputError) as refusal:
        check_value(value)
    assert str(refusal.value) == EMPTY_VALUE


@pytest.mark.parametrize("value", ["-5", "e-mail", "- Ivan", "n/a", "—Ivan"])
def test_a_value_with_more_than_dashes_is_kept(value: str) -> None:
    assert check_value(value) == value.removeprefix("- ")


async def test_update_user_with_a_dash_for_a_value_writes_nothing(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        said = await refused(
            client, "update_user", {"section": "Profile", "key": "Pronouns", "content": " - "}
        )
    assert said == f"error: {EMPTY_VALUE}"
    stored = mem.store.get_memory_file("alice", FileKind.USER)
    assert stored is None or "Pronouns: -" not in stored.content
