"""Memory tools against a real DB and real sandbox directories: the schemas and argument
checks, update_long_term_memory and update_user, memory_search."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from memstrata.agent.schemas import check_arguments, tool_schemas
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.errors import ToolInputError
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.search_warnings import NO_EMBEDDING_API
from memstrata.sandbox.local import LocalDirectorySandbox, LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


# -- schemas ---------------------------------------------------------------------------------


def test_schemas_are_openai_function_definitions() -> None:
    schemas = tool_schemas(include_search=True)
    assert [s["function"]["name"] for s in schemas] == [
        "record_memory",
        "update_long_term_memory",
        "update_user",
        "memory_search",
    ]
    for schema in schemas:
        assert schema["type"] == "function"
        assert set(schema["function"]) == {"name", "description", "parameters"}
        parameters = schema["function"]["parameters"]
        assert parameters["type"] == "object"
        assert parameters["additionalProperties"] is False
        assert set(parameters["required"]) <= set(parameters["properties"])
        json.dumps(schema)  # plain JSON
    assert schemas[0]["function"]["parameters"]["required"] == ["content"]
    assert schemas[2]["function"]["parameters"]["required"] == ["section", "content"]
    sources = schemas[3]["function"]["parameters"]["properties"]["sources"]
    assert sources["items"]["enum"] == ["memory", "conversation", "notes"]
    assert [s["function"]["name"] for s in tool_schemas(include_search=False)] == [
        "record_memory",
        "update_long_term_memory",
        "update_user",
    ]


def test_schemas_are_fresh_copies() -> None:
    first = tool_schemas(include_search=False)
    first[0]["function"]["name"] = "changed"
    assert tool_schemas(include_search=False)[0]["function"]["name"] == "record_memory"


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("record_memory", "{not json", "arguments are not valid JSON (Expecting property name"),
        ("record_memory", "[1]", "arguments must be a JSON object"),
        ("record_memory", "null", "arguments must be a JSON object"),
        # Not JSON text but Python values an agent loop passed on: dict() took the list of
        # pairs as {"content": "x"} and raised ValueError/TypeError on the others.
        ("memory_search", ["billing"], "arguments must be a JSON object"),
        ("record_memory", [["content", "x"]], "arguments must be a JSON object"),
        ("record_memory", 5, "arguments must be a JSON object"),
        ("record_memory", {1: "x"}, "arguments must be a JSON object"),
        ("record_memory", {}, "missing required argument(s): content"),
        (
            "record_memory",
            {"content": "x", "when": "now"},
            "unknown argument(s) when; record_memory takes content, section",
        ),
        ("record_memory", {"content": 5}, "content must be a JSON string"),
        ("memory_search", {"query": "x", "top_k": True}, "top_k must be a JSON integer"),
        ("memory_search", {"query": "x", "sources": "memory"}, "sources must be a JSON array"),
    ],
)
def test_check_arguments_rejects_bad_calls(name: str, arguments: Any, error: str) -> None:
    with pytest.raises(ToolInputError) as info:
        check_arguments(name, arguments)
    assert str(info.value).startswith(error)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("memory_search", ["billing"]),
        ("record_memory", [["content", "x"]]),
        ("record_memory", 5),
        ("record_memory", '["x"]'),
        ([], {"content": "x"}),
    ],
)
async def test_a_call_with_arguments_that_are_no_object_is_an_error_answer(
    sync: SyncService,
    user_box: LocalDirectorySandbox,
    store: MemoryStore,
    name: Any,
    arguments: Any,
) -> None:
    await sync.start_session(USER)
    tools = MemoryTools(
        ToolContext.bind(USER, sync, user_box), searcher=_BrokenSearcher(), today=lambda: DAY
    )
    before = memory(store)

    answer = await tools.call(name, arguments)

    expected = "error: arguments must be a JSON object"
    if not isinstance(name, str):
        expected = "error: unknown tool []; available: "
    assert answer.startswith(expected)
    assert answer.failed
    assert memory(store) == before  # nothing recorded


async def test_an_answer_is_plain_text_with_whether_the_call_failed(tools: MemoryTools) -> None:
    """Frameworks get a str (it serialises as one); MCP reads ``failed`` instead of
    matching the text."""
    answer = await tools.call("record_memory", '{"content": "likes tea"}')
    assert isinstance(answer, str) and not answer.failed
    assert json.loads(json.dumps({"result": answer})) == {"result": str(answer)}
    tea = {"section": "Preferences", "key": "Drink", "content": "tea"}
    await tools.call("update_user", tea)
    unchanged = await tools.call("update_user", tea)
    assert unchanged.startswith("No change:") and not unchanged.failed
    assert (await tools.call("record_memory", "{}")).failed


# -- update_long_term_memory and update_user ---------------------------------------------------


async def test_update_long_term_memory_replaces_a_section_or_the_file(
    tools: MemoryTools, store: MemoryStore, templates: TemplateSet
) -> None:
    result = await tools.update_long_term_memory("- shipped v1\n- hired Bo", section="## Ongoing")
    assert result == "Replaced ## Ongoing in MEMORY.md (version 2)."
    expected = templates.load(FileKind.MEMORY).replace(
        "## Ongoing\n", "## Ongoing\n- shipped v1\n- hired Bo\n"
    )
    assert memory(store) == (expected, 2)

    assert await tools.update_long_term_memory("# Memory\n- only this", whole_file=True) == (
        "Replaced the whole of MEMORY.md (version 3). Removed 2 entries ('shipped v1', "
        "'hired Bo') and 3 sections (Decisions, Ongoing, Lessons)."
    )
    assert memory(store) == ("# Memory\n- only this\n", 3)
    assert (
        await tools.update_long_term_memory(" \n")
        == "error: content (the whole new MEMORY.md) must not be empty"
    )
    assert await tools.update_long_term_memory("# Memory\n- only this\n", whole_file=True) == (
        "No change: MEMORY.md already says that."
    )
    assert memory(store)[1] == 3


async def test_update_user_sets_a_key_or_replaces_a_section(
    tools: MemoryTools, store: MemoryStore, templates: TemplateSet
) -> None:
    result = await tools.update_user("Europe/Berlin", section="Profile", key="time zone")
    assert result == "Set Time zone under ## Profile in USER.md (version 2)."
    template = templates.load(FileKind.USER)
    expected = template.replace("- Time zone:\n", "- Time zone: Europe/Berlin\n")
    assert user_md(store) == (expected, 2)

    result = await tools.call("update_user", {"section": "Pets", "key": "Cat", "content": "Miso"})
    assert result == (
        "Set Cat under ## Pets in USER.md (version 3). New section: USER.md had no ## Pets "
        "(its sections: Profile, Work, Preferences)."
    )
    assert user_md(store)[0] == expected.rstrip("\n") + "\n\n## Pets\n- Cat: Miso\n"

    result = await tools.update_user("- Role: engineer", section="Work", replace_section=True)
    assert result == "Replaced ## Work in USER.md (version 4)."
    assert "## Work\n- Role: engineer\n\n## Preferences" in user_md(store)[0]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        (
            {"content": "x", "section": "Profile", "key": "a:b"},
            "error: key must not contain ':'; give the name alone (key='a') and the value in "
            "content",
        ),
        (
            {"content": "two\nlines", "section": "Profile", "key": "Name"},
            "error: content must be one line when a key is given; join the lines (e.g. with "
            "', '), or leave out key to replace the section's whole body",
        ),
        (
            {"content": "x" * 501, "section": "Profile", "key": "Name"},
            "error: content is 501 characters; the limit is 500",
        ),
        (
            {"content": "x", "section": ""},
            "error: section must be a non-empty string such as 'Decisions'",
        ),
        (
            {"content": "x", "section": "Profile", "key": " "},
            "error: key must be a non-empty string such as 'Time zone'",
        ),
    ],
)
async def test_update_user_validates(
    kwargs: dict[str, Any], error: str, tools: MemoryTools, store: MemoryStore
) -> None:
    assert await tools.update_user(**kwargs) == error
    assert user_md(store)[1] == 1


async def test_a_file_over_the_size_limit_is_refused(
    db: Database,
    templates: TemplateSet,
    provider: LocalSandboxProvider,
    user_box: LocalDirectorySandbox,
) -> None:
    small = MemoryStore(db.sessions, templates, max_content_bytes=1024)
    sync = SyncService(small, provider)
    await sync.start_session(USER)
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box))
    size = len((templates.load(FileKind.MEMORY) + "x").encode())
    result = await tools.update_long_term_memory("x" * 1000, section="Lessons")
    assert result.startswith("error: MEMORY.md would be ")
    assert result.endswith(
        "bytes, over the 1024-byte limit; remove outdated entries first: update_long_term_memory "
        "rewrites one section without them"
    )
    assert size < 1024  # the template itself fits
    assert result.failed


# -- memory_search -----------------------------------------------------------------------------


async def test_memory_search_finds_recorded_memories(
    sync: SyncService, db: Database, user_box: LocalDirectorySandbox
) -> None:
    await sync.start_session(USER)
    searcher = SearchService(IndexCache(db.sessions, 8))
    tools = MemoryTools(
        ToolContext.bind(USER, sync, user_box), searcher=searcher, today=lambda: DAY
    )
    assert "memory_search" in tools.callables()
    await tools.record_memory("The user's cat is called Miso", section="Decisions")

    result = await tools.call("memory_search", {"query": "cat Miso", "top_k": 1})

    today = datetime.now(UTC).date().isoformat()
    assert result.startswith(f"1. [MEMORY.md · {today} · score ")
    assert "- 2026-03-01: The user's cat is called Miso" in result
    # Exactly one hit, then the search's note: no embedding API here, BM25 only.
    hit, note = result.split("\n")
    assert note == f"note: {NO_EMBEDDING_API}" and "Miso" in hit
    assert await tools.memory_search("zzzz qqqq") == (
        f"No matching memories.\nnote: {NO_EMBEDDING_API}"
    )
    assert await tools.memory_search("x", top_k=0) == "error: top_k must be an integer from 1 to 20"
    assert await tools.memory_search("x", sources=["files"]) == (
        "error: sources must be a non-empty list drawn from memory, conversation, notes; "
        "got ['files']"
    )
    assert await tools.memory_search("") == "error: query is blank: send the words to search for"


class _BrokenSearcher:
    def search(self, user_id: str, query: str, *, top_k: int = 5, sources: Any = None) -> Any:
        raise RuntimeError("index exploded")


async def test_memory_search_failure_is_a_tool_error(
    sync: SyncService, user_box: LocalDirectorySandbox, logs: pytest.LogCaptureFixture
) -> None:
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box), searcher=_BrokenSearcher())
    result = await tools.memory_search("anything")
    assert result == "error: memory search failed; try again, or answer from what you know"
    assert any(r.getMessage() == "tools.search_failed" for r in logs.records)


async def test_memory_search_is_absent_without_a_searcher(tools: MemoryTools) -> None:
    assert "memory_search" not in tools.callables()
    assert [s["function"]["name"] for s in tools.schemas()][-1] == "update_user"
    assert await tools.call("memory_search", {"query": "x"}) == (
        "error: unknown tool 'memory_search'; available: record_memory, "
        "update_long_term_memory, update_user"
    )
    assert await tools.memory_search("x") == "error: memory_search is not available for this agent"


async def test_an_unexpected_failure_is_a_tool_error_not_an_exception(
    sync: SyncService, provider: LocalSandboxProvider, logs: pytest.LogCaptureFixture
) -> None:
    too_long = "u" * 101  # the store refuses it, after the sandbox write succeeded
    box = provider.for_user(USER)
    await box.write_text("MEMORY.md", "# Memory\n")
    tools = MemoryTools(ToolContext.bind(too_long, sync, box), today=lambda: DAY)
    result = await tools.record_memory("x")
    assert result == "error: MEMORY.md could not be saved (InvalidUserIdError); try again later"
    failed = [r for r in logs.records if r.getMessage() == "tools.write_failed"]
    assert len(failed) == 1


async def test_optional_arguments_sent_as_null_take_their_defaults(
    tools: MemoryTools, store: MemoryStore
) -> None:
    # MCP clients often send every field, unset ones as null.
    result = await tools.call("record_memory", {"content": "null section", "section": None})
    assert result == "Recorded in MEMORY.md under ## Notes (version 2)."
    assert "## Notes\n- 2026-03-01: null section\n" in memory(store)[0]
    assert check_arguments("update_user", {"content": "x", "section": "Profile", "key": None}) == {
        "content": "x",
        "section": "Profile",
    }
