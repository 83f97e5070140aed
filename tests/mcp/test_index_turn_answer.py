"""``conversation_index_turn`` as a model reads it: a sentence that says what happened to
the turn, a replaced one above all (the earlier text is gone from search), rather than
indented JSON in which only ``"deleted": 1`` hinted at it; and a tool listing without
REST's path and the session-id rule's Unicode ranges. The REST body stays the
``structuredContent``. Through the SDK's in-process client on the real runtime."""

from __future__ import annotations

import json

import pytest

from memstrata.api.memory_schemas import TurnRequest
from memstrata.mcp.turn_tools import turn_answer
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.tokenize import count_tokens
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, text

pytestmark = pytest.mark.anyio

PASSPORT = {
    "session_id": "chat",
    "turn_index": 0,
    "user_message": "My passport number is X123 and expires in May",
    "assistant_reply": "Noted.",
}
WEATHER = {**PASSPORT, "user_message": "What's the weather?", "assistant_reply": "Sunny."}


async def test_a_replaced_turn_is_said_to_be_replaced(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("gina") as client:
        first = await ok(client, "conversation_index_turn", PASSPORT)
        again = await ok(client, "conversation_index_turn", PASSPORT)
        replaced = await ok(client, "conversation_index_turn", WEATHER)
    assert text(first) == "Indexed turn 0 of session 'chat'."
    assert text(again) == (
        "Turn 0 of session 'chat' was indexed with this text already; nothing changed."
    )
    assert text(replaced) == (
        "Indexed turn 0 of session 'chat': it replaced the earlier turn 0 of session 'chat', "
        "whose text memory_search no longer finds. To keep both, index a new round with "
        "the next turn_index."
    )
    assert mem.search.search("gina", "passport", top_k=5).hits == []
    # The REST body, for a client that wants the counts.
    data = replaced.structured_content
    assert data is not None
    assert (data["file_path"], data["inserted"], data["deleted"]) == ("sessions/chat/0", 1, 1)
    assert "embed_seconds" in data


def test_warnings_follow_as_notes() -> None:
    report = IndexReport(
        "sessions/s 1/2", chunks=2, inserted=2, embedding_failed=2, warnings=["embedding failed"]
    )
    assert turn_answer("s 1", 2, report) == (
        "Indexed turn 2 of session 's 1'.\nnote: embedding failed"
    )


async def test_the_listing_says_what_a_model_needs_and_no_more(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    tool = tools["conversation_index_turn"]
    listed = tool.model_dump(by_alias=True, exclude_none=True)
    properties = tool.input_schema["properties"]
    assert sorted(properties) == [
        "assistant_reply",
        "session_id",
        "timestamp",
        "turn_index",
        "user_message",
    ]
    assert list(properties)[:2] == tool.input_schema["required"] == ["session_id", "turn_index"]
    shown = json.dumps({k: v for k, v in listed.items() if k != "outputSchema"}, ensure_ascii=False)
    for rest_only in ("/api/", "POST", "U+202A", "percent", "Turn Index"):
        assert rest_only not in shown, rest_only
    assert "replaces" in properties["turn_index"]["description"]
    # 691 tokens before (1,665 characters): REST's path, the rule's every Unicode range;
    # 534 without them, 592 with the turn size limit (its rule and two maxLength), 595
    # with a timestamp's offset rule (none: UTC).
    assert count_tokens(shown) < 600, count_tokens(shown)


@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("2026-01-05", "2026-01-05T00:00:00+00:00"),
        ("2026-01-05T10:30:00", "2026-01-05T10:30:00+00:00"),
        ("2026-01-05T10:30:00+02:00", "2026-01-05T08:30:00+00:00"),
    ],
)
async def test_a_timestamp_without_an_offset_is_utc_as_the_listing_says(
    connect: ClientFactory, mem: Memstrata, sent: str, stored: str
) -> None:
    """The spec names no format for a turn's time; REST reads one without an offset as UTC,
    a date alone as 00:00 UTC, and the MCP tool does the same — and its listing says so,
    or a model in UTC+9 sends local times and its turns decay nine hours off."""
    async with connect("gina") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        await ok(client, "conversation_index_turn", {**PASSPORT, "timestamp": sent})
    described = tools["conversation_index_turn"].input_schema["properties"]["timestamp"]
    assert "no offset: UTC" in described["description"]
    rest = TurnRequest.model_json_schema()["properties"]["timestamp"]["description"]
    assert "without an offset: UTC, a date alone 00:00 UTC" in rest
    (hit,) = mem.search.search("gina", "passport", top_k=5).hits
    assert hit.created_at.isoformat() == stored
