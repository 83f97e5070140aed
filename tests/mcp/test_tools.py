"""Every MCP tool through the SDK's in-process client: results, conflicts, bad input.

The runtime is real (PostgreSQL, directory sandboxes, the local embedding server); each
check that a refused call wrote nothing reads the database afterwards.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult

from memstrata.agent.schemas import tool_schemas
from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.retrieval.session_ids import (
    MAX_SESSION_ID_LENGTH,
    SESSION_ID_HINT,
    InvalidSessionIdError,
    check_session_id,
)
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory

pytestmark = pytest.mark.anyio

ALL_TOOLS = [
    "memory_search",
    "memory_read",
    "memory_write",
    "record_memory",
    "update_long_term_memory",
    "update_user",
    "conversation_index_turn",
    "skills_list",
    "skill_set",
]


def text(result: CallToolResult) -> str:
    first = result.content[0]
    assert first.type == "text"
    return first.text


async def ok(client: Client, name: str, arguments: dict[str, Any]) -> CallToolResult:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text(result)
    return result


async def refused(client: Client, name: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(name, arguments)
    assert result.is_error, text(result)
    message = text(result)
    assert message.startswith("error: ") or message.startswith("Not saved")
    return message


def stored(mem: Memstrata, user: str, kind: FileKind) -> tuple[str, int] | None:
    file = mem.store.get_memory_file(user, kind)
    return None if file is None else (file.content, file.version)


# -- the catalogue ---------------------------------------------------------------------------


async def test_tools_are_listed_with_truthful_annotations(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert list(tools) == ALL_TOOLS
    hints = {
        name: (
            t.annotations.read_only_hint,
            t.annotations.destructive_hint,
            t.annotations.idempotent_hint,
            t.annotations.open_world_hint,
        )
        for name, t in tools.items()
        if t.annotations is not None
    }
    assert hints == {
        "memory_search": (True, None, True, False),
        "memory_read": (True, None, True, False),
        "memory_write": (False, True, True, False),
        "record_memory": (False, True, True, False),
        "update_long_term_memory": (False, True, True, False),
        "update_user": (False, True, True, False),
        "conversation_index_turn": (False, True, True, False),
        "skills_list": (True, None, True, False),
        "skill_set": (False, False, True, False),
    }


async def test_agent_tool_schemas_are_the_agent_definitions(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    for schema in tool_schemas(include_search=True):
        function = schema["function"]
        assert tools[function["name"]].input_schema == function["parameters"]
        assert (tools[function["name"]].description or "").startswith(function["description"])


async def test_every_tool_argument_is_described(connect: ClientFactory) -> None:
    """A model picks arguments by their descriptions: conversation_index_turn's turn_index,
    user_message and assistant_reply had none."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
    missing = [
        (tool.name, name)
        for tool in tools
        for name, prop in tool.input_schema.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert missing == []


async def test_unknown_tool_is_a_protocol_error_and_the_session_lives_on(
    connect: ClientFactory,
) -> None:
    for mode in ("auto", "legacy"):
        async with connect(mode=mode) as client:
            with pytest.raises(MCPError) as raised:
                await client.call_tool("memory_delete_everything", {})
            assert raised.value.code == INVALID_PARAMS
            assert "unknown tool 'memory_delete_everything'" in raised.value.message
            await ok(client, "skills_list", {})


# -- memory_search ---------------------------------------------------------------------------


async def test_memory_search_matches_the_rest_search(
    connect: ClientFactory, hybrid_mem: Memstrata
) -> None:
    mem = hybrid_mem
    async with connect("alice", runtime=mem) as client:
        await ok(
            client,
            "conversation_index_turn",
            {
                "session_id": "trip",
                "turn_index": 0,
                "user_message": "I am flying to Lisbon on Friday",
                "assistant_reply": "Have a good trip to Lisbon!",
                "timestamp": "2026-11-20T10:00:00Z",
            },
        )
        await ok(client, "record_memory", {"content": "Allergic to peanuts", "section": "Health"})
        result = await ok(client, "memory_search", {"query": "Lisbon flight", "top_k": 3})
    data = result.structured_content
    assert data is not None and set(data) == {"query", "mode", "hits", "timings_ms", "warnings"}
    assert data["mode"] == "hybrid" and data["warnings"] == []
    top = data["hits"][0]
    assert top["file_path"] == "sessions/trip/0" and top["source"] == "conversation"
    assert top["source_ids"] == ["trip:0"]
    assert set(top["explain"]) == {
        "bm25_rank",
        "vector_rank",
        "rrf_score",
        "decay_factor",
        "age_days",
        "resident",
        "context_chars",
    }
    assert top["explain"]["context_chars"] == 0  # the session's first round: no context
    rest = mem.search.search("alice", "Lisbon flight", top_k=3).to_dict()
    assert [(h["file_path"], h["text"]) for h in data["hits"]] == [
        (h["file_path"], h["text"])
        for h in rest["hits"]  # type: ignore[union-attr, index]
    ]


async def test_memory_search_sources_filter(connect: ClientFactory) -> None:
    async with connect() as client:
        await ok(client, "record_memory", {"content": "Prefers oolong tea"})
        await ok(
            client,
            "conversation_index_turn",
            {"session_id": "s", "turn_index": 0, "user_message": "oolong tea again?"},
        )
        result = await ok(client, "memory_search", {"query": "oolong", "sources": ["memory"]})
    hits = result.structured_content["hits"]  # type: ignore[index]
    assert hits and {h["source"] for h in hits} == {"memory"}


async def test_memory_search_without_embeddings_says_it_degraded(
    connect: ClientFactory,
) -> None:
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "Plays the cello on Sundays"})
        result = await ok(client, "memory_search", {"query": "cello"})
    data = result.structured_content
    assert data is not None and data["mode"] == "bm25"
    assert data["warnings"] == ["no embedding API is configured: searched with BM25 only"]
    assert "Plays the cello" in data["hits"][0]["text"]


# The search's own words (REST's), not a Python tuple.
BAD_SOURCES = "sources must be a non-empty list drawn from memory, conversation, notes; got"
MEMORY_SEARCH_BAD_INPUT_CASES: list[tuple[Any, ...]] = [
    ({}, "missing required argument(s): query"),
    ({"query": 5}, "query must be a JSON string"),
    ({"query": "  "}, "query is blank: send the words to search for"),
    ({"query": "x" * 4001}, "query is 4001 characters; the limit is 4000"),
    ({"query": "tea", "top_k": 21}, "top_k must be an integer from 1 to 20"),
    ({"query": "tea", "top_k": "3"}, "top_k must be a JSON integer"),
    (
        {"query": "tea", "sources": ["web"]},
        "sources must be a non-empty list drawn from memory, conversation, notes; got",
    ),
    (
        {"query": "tea", "sources": []},
        "sources must be a non-empty list drawn from memory, conversation, notes; got",
    ),
    ({"query": "tea", "limit": 3}, "unknown argument(s) limit"),
]


async def test_memory_search_bad_input(connect: ClientFactory) -> None:
    for arguments, message in MEMORY_SEARCH_BAD_INPUT_CASES:
        async with connect() as client:
            assert message in await refused(client, "memory_search", arguments)


# -- memory_read / memory_write --------------------------------------------------------------


async def test_read_provisions_a_new_user_and_agents_is_the_template(
    connect: ClientFactory, mem: Memstrata
) -> None:
    assert stored(mem, "newbie", FileKind.USER) is None
    async with connect("newbie") as client:
        user = (await ok(client, "memory_read", {"name": "user"})).structured_content
        agents = (await ok(client, "memory_read", {"name": "agents"})).structured_content
    assert user is not None and user["version"] == 1 and user["read_only"] is False
    assert stored(mem, "newbie", FileKind.USER) == (user["content"], 1)
    assert agents == {
        "name": "agents",
        "file_type": "agents_md",
        "content": mem.templates.agents_md(),
        "version": None,
        "read_only": True,
    }


async def test_write_goes_through_the_sync_path(
    connect: ClientFactory, hybrid_mem: Memstrata
) -> None:
    mem = hybrid_mem
    async with connect("alice", runtime=mem) as client:
        read = (await ok(client, "memory_read", {"name": "user"})).structured_content
        assert read is not None
        new = str(read["content"]).replace("- Name:", "- Name: Alice", 1)
        new += "- Hobby: restoring sailboats\n"
        result = await ok(
            client,
            "memory_write",
            {"name": "user", "content": new, "expected_version": read["version"]},
        )
        assert result.structured_content == {"name": "user", "file_type": "user_md", "version": 2}
        assert text(result) == "Saved USER.md as version 2."
        found = await ok(client, "memory_search", {"query": "sailboats", "top_k": 1})
    assert stored(mem, "alice", FileKind.USER) == (new, 2)  # DB first
    hit = found.structured_content["hits"][0]  # type: ignore[index]
    assert "sailboats" in hit["text"] and hit["explain"]["vector_rank"] == 1  # re-embedded
    sandbox = mem.sandboxes.for_user("alice", None)  # the user's sandbox, pushed
    assert await sandbox.read_text("USER.md") == new


async def test_stale_version_is_refused_with_the_current_version(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "memory"})
        first = {"name": "memory", "content": "# MEMORY.md\n- first\n", "expected_version": 1}
        await ok(client, "memory_write", {**first, "replace_all": True})
        stale = {"name": "memory", "content": "# MEMORY.md\n- stale\n", "expected_version": 1}
        result = await client.call_tool("memory_write", stale)
    assert result.is_error
    assert result.structured_content == {
        "error": "version_conflict",
        "expected_version": 1,
        "current_version": 2,
    }
    message = text(result)
    assert "expected version 1, found version 2" in message
    assert "memory_read" in message and "apply your change to the text it returns" in message
    assert stored(mem, "alice", FileKind.MEMORY) == ("# MEMORY.md\n- first\n", 2)


WRITE_BAD_INPUT_WRITES_NOTHING_CASES: list[tuple[Any, ...]] = [
    ({"name": "agents", "content": "x", "expected_version": 1}, "AGENTS.md is the platform"),
    ({"name": "USER.md", "content": "x", "expected_version": 1}, "would remove 3 of the 3"),
    ({"name": "diary", "content": "x", "expected_version": 1}, "no memory file is named 'diary'"),
    ({"name": "user", "content": " \n", "expected_version": 1}, "content is empty"),
    ({"name": "user", "content": "a\x00b", "expected_version": 1}, "must not contain NUL"),
    (
        {"name": "user", "content": "x" * (256 * 1024 + 1), "expected_version": 1},
        "content is 262145 bytes, over the limit of 262144 bytes",
    ),
    ({"name": "user", "content": "x"}, "missing required argument(s): expected_version"),
    ({"name": "user", "content": "x", "expected_version": -1}, "from 0 (the file must not"),
    ({"name": "user", "content": 42, "expected_version": 1}, "content must be a JSON string"),
    ({"name": "user", "content": "x", "expected_version": "1"}, 'send 1, not "1"'),
    ({"name": "user", "content": "x", "expected_version": 1, "force": True}, "force"),
]


async def test_write_bad_input_writes_nothing(connect: ClientFactory, mem: Memstrata) -> None:
    for arguments, message in WRITE_BAD_INPUT_WRITES_NOTHING_CASES:
        async with connect("alice") as client:
            await ok(client, "memory_read", {"name": "user"})
            before = {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS}
            assert message in await refused(client, "memory_write", arguments)
            await ok(client, "skills_list", {})  # the session is still fine
        assert {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS} == before


READ_BAD_INPUT_CASES: list[tuple[Any, ...]] = [
    ({"name": "todo"}, "no memory file is named 'todo'; name is one of soul (SOUL.md), user"),
    ({"name": 3}, "name must be a JSON string; got 3"),
    ({}, "missing required argument(s): name"),
]


async def test_read_bad_input(connect: ClientFactory) -> None:
    for arguments, message in READ_BAD_INPUT_CASES:
        async with connect() as client:
            assert message in await refused(client, "memory_read", arguments)


# -- the agent's tools -------------------------------------------------------------------------


async def test_agent_tools_answer_like_the_agent(connect: ClientFactory, mem: Memstrata) -> None:
    """The same calls through MemoryTools (user bob) and through MCP (user alice)."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("record_memory", {"content": "Chose PostgreSQL for the ledger", "section": "Decisions"}),
        ("update_user", {"section": "Profile", "key": "Time zone", "content": "Europe/Paris"}),
        ("update_long_term_memory", {"section": "Ongoing", "content": "- ledger migration"}),
        ("record_memory", {"content": "x" * 2001}),
        ("update_user", {"section": "Profile"}),
    ]
    await mem.sync.provision_user("bob")
    agent = MemoryTools(ToolContext.bind("bob", mem.sync, mem.sandboxes.for_user("bob", None)))
    expected = [await agent.call(name, arguments) for name, arguments in calls]
    async with connect("alice") as client:
        results = [await client.call_tool(name, arguments) for name, arguments in calls]
    assert [text(r) for r in results] == expected
    assert [r.is_error for r in results] == [False, False, False, True, True]
    memory_md, _ = stored(mem, "alice", FileKind.MEMORY) or ("", 0)
    today = datetime.now(UTC).date().isoformat()
    assert f"- {today}: Chose PostgreSQL for the ledger" in memory_md
    assert "- ledger migration" in memory_md
    user_md, _ = stored(mem, "alice", FileKind.USER) or ("", 0)
    assert "- Time zone: Europe/Paris" in user_md


AGENT_TOOLS_BAD_INPUT_WRITES_NOTHING_CASES: list[tuple[Any, ...]] = [
    ("record_memory", {}, "missing required argument(s): content"),
    ("record_memory", {"content": ["a"]}, "content must be a JSON string"),
    ("record_memory", {"content": "a", "tags": "x"}, "unknown argument(s) tags"),
    ("update_user", {"section": "Profile", "key": "a:b", "content": "x"}, "must not contain"),
    ("update_long_term_memory", {"content": "  "}, "must not be empty"),
]


async def test_agent_tools_bad_input_writes_nothing(connect: ClientFactory, mem: Memstrata) -> None:
    for name, arguments, message in AGENT_TOOLS_BAD_INPUT_WRITES_NOTHING_CASES:
        async with connect("alice") as client:
            await ok(client, "memory_read", {"name": "memory"})
            before = {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS}
            assert message in await refused(client, name, arguments)
        assert {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS} == before


# -- conversations ---------------------------------------------------------------------------


async def test_index_turn_is_the_rest_indexing(
    connect: ClientFactory, hybrid_mem: Memstrata
) -> None:
    turn = {
        "session_id": "s1",
        "turn_index": 0,
        "user_message": "我养了一只猫叫团子",
        "assistant_reply": "团子这个名字真可爱",
        "timestamp": "2026-01-01T12:00:00Z",
    }
    async with connect(runtime=hybrid_mem) as client:
        first = (await ok(client, "conversation_index_turn", turn)).structured_content
        again = (await ok(client, "conversation_index_turn", turn)).structured_content
    assert first is not None and again is not None
    assert set(first) == {
        "file_path",
        "chunks",
        "inserted",
        "deleted",
        "unchanged",
        "embedded",
        "embedding_failed",
        "deferred",
        "embed_seconds",
        "warnings",
    }
    assert (first["file_path"], first["inserted"], first["embedded"]) == ("sessions/s1/0", 1, 1)
    assert (again["inserted"], again["unchanged"]) == (0, 1)


async def test_index_turn_null_optional_arguments_count_as_absent(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """Clients fill unset fields with null; MCP.md says that counts as absent."""
    turn = {"session_id": "s", "turn_index": 0, "user_message": "zebra crossing"}
    async with connect() as client:
        await ok(client, "conversation_index_turn", {**turn, "assistant_reply": None})
        await ok(
            client,
            "conversation_index_turn",
            {**turn, "turn_index": 1, "user_message": None, "assistant_reply": "a zebra"},
        )
        assert "session_id" in await refused(
            client, "conversation_index_turn", {**turn, "session_id": None}
        )
    hits = mem.search.search("alice", "zebra", top_k=5).hits
    assert {h.file_path for h in hits} == {"sessions/s/0", "sessions/s/1"}


INDEX_TURN_BAD_INPUT_CASES: list[tuple[Any, ...]] = [
    ({"turn_index": 0, "user_message": "hi"}, "missing required argument(s): session_id"),
    ({"session_id": "", "turn_index": 0, "user_message": "hi"}, "session_id is empty"),
    ({"session_id": "s", "turn_index": -1, "user_message": "hi"}, "from 0 to 2147483647; got -1"),
    ({"session_id": "s", "turn_index": "0", "user_message": "hi"}, 'send 0, not "0"'),
    ({"session_id": "s", "turn_index": 0}, "a round needs user_message or assistant_reply"),
    ({"session_id": "s", "turn_index": 0, "user_message": "a\x00"}, "NUL"),
    ({"session_id": "s", "turn_index": 0, "user_message": "a", "timestamp": "soon"}, "date-time"),
]


async def test_index_turn_bad_input(connect: ClientFactory, mem: Memstrata) -> None:
    for arguments, message in INDEX_TURN_BAD_INPUT_CASES:
        async with connect() as client:
            assert message in await refused(client, "conversation_index_turn", arguments)
        assert mem.search.search("alice", "hi a", top_k=5).hits == []


@pytest.mark.parametrize(
    "session_id", ["s" * (MAX_SESSION_ID_LENGTH + 1), " ", "a/b", "caf\ufffd"]
)  # "" is "session_id is empty" (tests/mcp/test_library_messages.py)
async def test_index_turn_refuses_a_session_id_as_the_library_does(
    connect: ClientFactory, mem: Memstrata, session_id: str
) -> None:
    """One rule, one message: the library's (REST's), not a schema's of its own — but
    without its advice on URLs, which MCP's JSON string never is in."""
    turn = {"session_id": session_id, "turn_index": 0, "user_message": "hi"}
    with pytest.raises(InvalidSessionIdError) as library:
        check_session_id(session_id)
    assert str(library.value).startswith(f"invalid session_id {session_id[:60]!r}")
    async with connect() as client:
        said = await refused(client, "conversation_index_turn", turn)
        listed = (await client.list_tools()).tools
    (tool,) = [t for t in listed if t.name == "conversation_index_turn"]
    assert said.startswith(f"error: invalid session_id {session_id[:60]!r}")
    assert said == f"error: {library.value}"
    assert said.endswith(f"; {SESSION_ID_HINT}")
    for text_ in (said, tool.input_schema["properties"]["session_id"]["description"]):
        assert "percent" not in text_ and "URL" not in text_, text_
    assert mem.search.search("alice", "hi", top_k=5).hits == []


async def test_a_replacement_character_gets_mcps_advice(connect: ClientFactory) -> None:
    turn = {"session_id": "caf\ufffd", "turn_index": 0, "user_message": "hi"}
    async with connect() as client:
        said = await refused(client, "conversation_index_turn", turn)
    assert said.startswith(
        "error: invalid session_id 'caf\ufffd': character 4 is U+FFFD REPLACEMENT CHARACTER "
        "(it stands where text was not valid UTF-8; send the id's own characters); use 1–200"
    ), said


# -- skills ------------------------------------------------------------------------------------


async def test_skills_list_and_set(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        listed = (await ok(client, "skills_list", {})).structured_content
        assert listed is not None
        names = [s["name"] for s in listed["skills"]]
        assert "web_search" in names and all(s["enabled"] for s in listed["skills"])
        result = await ok(client, "skill_set", {"skill_name": "web_search", "enabled": False})
        assert result.structured_content == {"skill_name": "web_search", "enabled": False}
        after = (await ok(client, "skills_list", {})).structured_content
    assert after is not None
    assert {s["name"]: s["enabled"] for s in after["skills"]}["web_search"] is False
    # the same switch REST reads, and only alice's
    assert {s.name: s.enabled for s in mem.skills.list_for_user("alice")}["web_search"] is False
    assert {s.name: s.enabled for s in mem.skills.list_for_user("bob")}["web_search"] is True


SKILLS_BAD_INPUT_CASES: list[tuple[Any, ...]] = [
    ("skill_set", {"skill_name": "teleport", "enabled": True}, "no skill named 'teleport'"),
    ("skill_set", {"skill_name": "web_search", "enabled": "no"}, "a JSON boolean"),
    ("skill_set", {"skill_name": "web_search"}, "missing required argument(s): enabled"),
    ("skills_list", {"verbose": True}, "verbose"),
]


async def test_skills_bad_input(connect: ClientFactory, mem: Memstrata) -> None:
    for name, arguments, message in SKILLS_BAD_INPUT_CASES:
        async with connect("alice") as client:
            assert message in await refused(client, name, arguments)
        assert all(s.enabled for s in mem.skills.list_for_user("alice"))


# -- isolation -------------------------------------------------------------------------------


async def test_one_user_never_sees_another(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as alice:
        await ok(alice, "record_memory", {"content": "Alice's locker code is 4711"})
        await ok(
            alice,
            "conversation_index_turn",
            {"session_id": "a", "turn_index": 0, "user_message": "locker code 4711"},
        )
    async with connect("bob") as bob:
        found = (await ok(bob, "memory_search", {"query": "locker code 4711"})).structured_content
        read = (await ok(bob, "memory_read", {"name": "memory"})).structured_content
    assert found is not None
    assert all("4711" not in hit["text"] for hit in found["hits"])
    assert read is not None and "4711" not in read["content"]
    alice_memory = stored(mem, "alice", FileKind.MEMORY)
    assert alice_memory is not None and "4711" in alice_memory[0]


async def test_writes_evict_the_users_cached_agents(connect: ClientFactory, mem: Memstrata) -> None:
    async with connect("alice") as client:
        await ok(client, "memory_read", {"name": "memory"})
        for name, arguments in [
            ("record_memory", {"content": "Moved to Porto"}),
            (
                "memory_write",
                {
                    "name": "soul",
                    "content": "# SOUL.md\nCalm.\n",
                    "expected_version": 1,
                    "replace_all": True,
                },
            ),
        ]:
            mem.pool.get("alice", lambda: "a cached agent")
            mem.pool.get("bob", lambda: "bob's agent")
            refused_call = await client.call_tool(name, {**arguments, "bogus": 1})
            assert refused_call.is_error and "alice" in mem.pool  # nothing written, kept
            await ok(client, name, arguments)
            assert "alice" not in mem.pool and "bob" in mem.pool


async def test_an_agent_write_the_db_missed_is_an_error_over_mcp_and_the_retry_stores_it(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MCP has no round end to store an edit left in the sandbox copy later, so a write the
    database did not get must not be answered "it will be saved later" (the fault review
    found such an entry only in a conflict copy later): it is an error saying the change
    waits in the workspace copy, which the next call on the file stores."""
    from memstrata.sandbox.results import Outcome, SyncResult

    real = mem.sync.after_controlled_write

    async def database_down(_user: str, name: str, *_args: Any, **_kwargs: Any) -> SyncResult:
        return SyncResult(name, "sandbox->db", Outcome.DB_UNAVAILABLE, detail="connection refused")

    async with connect("gina") as client:
        await ok(client, "memory_read", {"name": "memory"})  # provisioned while the DB is up
        monkeypatch.setattr(mem.sync, "after_controlled_write", database_down)
        message = await refused(client, "record_memory", {"content": "Booked flight LH123"})
        assert "storage is unreachable" in message and "saved later" not in message
        assert "do not repeat it" in message
        monkeypatch.setattr(mem.sync, "after_controlled_write", real)
        await ok(client, "record_memory", {"content": "Hotel booked in Lisbon"})
    stored_now = stored(mem, "gina", FileKind.MEMORY)
    assert stored_now is not None
    assert stored_now[0].count("Booked flight LH123") == 1
    assert stored_now[0].count("Hotel booked in Lisbon") == 1


async def test_an_agent_edit_overlapping_the_users_is_an_error_over_mcp(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's overlapping edit wins and the agent's is not saved: the answer starts
    "Not saved:", not "error:", yet it is ``isError`` (the tool says it failed) and the
    user's cached agents are kept (nothing of the agent's was written)."""
    real = mem.sync.after_controlled_write
    syncs = 0
    section = {"section": "Ongoing", "replace_section": True}

    async def the_user_edits_first(user: str, name: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal syncs
        syncs += 1
        if syncs == 2:  # the tool's sandbox write is done; the user's edit lands first
            current = mem.store.get_memory_file(user, FileKind.MEMORY)
            assert current is not None
            human = current.content.replace("- ledger migration", "- ledger migration (done)")
            mem.store.upsert_memory_file(user, FileKind.MEMORY, human, current.version)
        return await real(user, name, *args, **kwargs)

    async with connect("gina") as client:
        await ok(client, "update_long_term_memory", {**section, "content": "- ledger migration"})
        mem.pool.get("gina", lambda: "a cached agent")
        monkeypatch.setattr(mem.sync, "after_controlled_write", the_user_edits_first)
        result = await client.call_tool(
            "update_long_term_memory", {**section, "content": "- ledger cut over"}
        )
    assert result.is_error
    assert text(result).startswith(
        "Not saved: the user edited MEMORY.md at the same time and the edits overlap."
    )
    assert "gina" in mem.pool
    stored_now = stored(mem, "gina", FileKind.MEMORY)
    assert stored_now is not None and "- ledger migration (done)" in stored_now[0]
    assert "ledger cut over" not in stored_now[0]


async def test_an_agent_edit_the_db_refused_is_an_error_over_mcp(
    connect: ClientFactory, mem: Memstrata, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``error:`` answer built from a sync result (not from bad arguments) is isError."""
    from memstrata.sandbox.results import Outcome, SyncResult

    async def refused_content(_user: str, name: str, *_args: Any, **_kwargs: Any) -> SyncResult:
        return SyncResult(name, "sandbox->db", Outcome.REJECTED, detail="content refused")

    async with connect("hana") as client:
        await ok(client, "memory_read", {"name": "memory"})
        mem.pool.get("hana", lambda: "a cached agent")
        monkeypatch.setattr(mem.sync, "after_controlled_write", refused_content)
        result = await client.call_tool("record_memory", {"content": "Booked flight LH123"})
    assert result.is_error
    assert text(result) == "error: MEMORY.md was not saved: content refused"
    assert "hana" in mem.pool
