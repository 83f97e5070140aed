"""``memory_search``'s text content is the agent tool's compact lines, with the lines of
each hit that matched; its ``structuredContent`` stays the REST search body (the agent
review's L6: the indented JSON text cost 30-56 % more tokens than the hits' own text)."""

from __future__ import annotations

import json

import pytest
from mcp_types import CallToolResult

from memstrata.agent.answers import format_hit
from memstrata.retrieval.search_warnings import NOTHING_INDEXED
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio

NAMES = ["Carla", "Giulia", "Sven", "Bob", "Noor", "Rosa", "Viktor", "Ines", "Mei", "Wen"]
CITIES = ["Riga", "Lima", "Osaka", "Porto", "Seoul", "Quito", "Warsaw", "Paris"]
BULLETS = "\n".join(
    f"- The user's colleague {NAMES[i % 10]}{i} lives in {CITIES[i % 8]}." for i in range(25)
)
BM25_ONLY = "no embedding API is configured: searched with BM25 only"


def text_of(result: CallToolResult) -> str:
    assert not result.is_error and len(result.content) == 1
    block = result.content[0]
    assert block.type == "text"
    return block.text


async def test_the_text_is_one_compact_line_per_hit_with_the_matching_line(
    connect: ClientFactory, mem: Memstrata
) -> None:
    query = "Where does Wen19 live?"
    async with connect("alice") as client:
        saved = await client.call_tool(
            "update_long_term_memory", {"content": BULLETS, "section": "Ongoing"}
        )
        assert not saved.is_error, saved.content
        result = await client.call_tool("memory_search", {"query": query, "top_k": 5})
    text = text_of(result)
    data = result.structured_content
    assert data is not None
    # The structured content is the REST search body, as before (the SDK's client has
    # checked it against the tool's outputSchema).
    assert set(data) == {"query", "mode", "hits", "timings_ms", "warnings"}
    rest = mem.search.search("alice", query, top_k=5)
    kept = ("text", "file_path", "chunk_index", "source", "created_at", "source_ids")
    assert [{k: h[k] for k in kept} for h in data["hits"]] == [
        {k: h[k] for k in kept}
        for h in rest.to_dict()["hits"]  # type: ignore[attr-defined]
    ]
    assert (data["query"], data["mode"], data["warnings"]) == (query, "bm25", [BM25_ONLY])
    # The text: the agent tool's line per hit, then the warning; no JSON.
    assert text.split("\n") == [
        *(format_hit(i, hit, query) for i, hit in enumerate(rest.hits, start=1)),
        f"note: {BM25_ONLY}",
    ]
    assert text.startswith("1. [MEMORY.md · ") and "{" not in text
    assert "- The user's colleague Wen19 lives in Porto. …" in text.split("\n")[0]
    assert "Carla0" not in text  # the chunk's other bullets are left out
    assert len(text) < len(json.dumps(data, ensure_ascii=False)) / 3


async def test_no_hit_says_so(connect: ClientFactory) -> None:
    async with connect("bob") as client:
        result = await client.call_tool("memory_search", {"query": "zeppelin"})
    assert text_of(result) == f"No matching memories.\nnote: {NOTHING_INDEXED}\nnote: {BM25_ONLY}"
    assert result.structured_content is not None
    assert result.structured_content["hits"] == []


async def test_a_hits_leading_context_is_marked_as_the_previous_turns(
    connect: ClientFactory,
) -> None:
    """A round's first chunk starts with the previous round's tail (for retrieval); its
    line shows that part as ``(before: …)``, so a model does not read the previous turn's
    words as this turn's. The structured hit keeps its text and says how much is context."""
    earlier = {"user_message": "Where do the spare keys go?", "assistant_reply": "Under the pot."}
    later = {"user_message": "And the lock code?", "assistant_reply": "It is 4711."}
    async with connect("alice") as client:
        for turn, said in enumerate((earlier, later)):
            await client.call_tool(
                "conversation_index_turn", {"session_id": "s", "turn_index": turn, **said}
            )
        result = await client.call_tool(
            "memory_search", {"query": "lock code 4711", "sources": ["conversation"]}
        )
    data = result.structured_content
    assert data is not None
    hit = next(h for h in data["hits"] if h["file_path"] == "sessions/s/1")
    chars = hit["explain"]["context_chars"]
    assert hit["text"][chars:] == "User: And the lock code?\nAssistant: It is 4711."
    line = next(li for li in text_of(result).split("\n") if "[sessions/s/1 " in li)
    assert line.endswith(
        "] (before: User: Where do the spare keys go? Assistant: Under the pot.) "
        "User: And the lock code? Assistant: It is 4711."
    ), line
