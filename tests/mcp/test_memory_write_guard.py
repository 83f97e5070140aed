"""``memory_write`` as a model uses it: a blank text, or one that drops most of the file, is
refused unless ``replace_all`` says the model means it; a write that removes entries says
which; a retried write whose text is already stored is "No change", not a version
conflict. Through the SDK's in-process client on the real runtime (PostgreSQL, sandboxes);
each refusal is checked to have written nothing. A person's write path (REST PUT, the
settings page: ``sync.frontend_edit``) is not guarded."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client

from memstrata.memory.kinds import USER_FILE_KINDS, FileKind
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import ok, stored, text

pytestmark = pytest.mark.anyio


async def version(client: Client, name: str) -> int:
    read = (await ok(client, "memory_read", {"name": name})).structured_content
    assert read is not None
    return int(read["version"])


def everything(mem: Memstrata) -> dict[FileKind, Any]:
    return {kind: stored(mem, "alice", kind) for kind in USER_FILE_KINDS}


@pytest.mark.parametrize(
    ("name", "content", "file", "instead"),
    [
        ("memory", "", "MEMORY.md", "or use record_memory to add or correct one entry"),
        ("memory", "   \n", "MEMORY.md", "or use record_memory to add or correct one entry"),
        ("soul", "", "SOUL.md", "(memory_read gives the current text); to empty it"),
        ("user", "\n\t\n", "USER.md", "or use update_user to set one fact"),
    ],
)
async def test_a_blank_write_is_refused_and_says_how_to_proceed(
    connect: ClientFactory, mem: Memstrata, name: str, content: str, file: str, instead: str
) -> None:
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "The user's daughter is Mia"})
        current = await version(client, name)
        before = everything(mem)
        result = await client.call_tool(
            "memory_write", {"name": name, "content": content, "expected_version": current}
        )
        forced = await client.call_tool(
            "memory_write",
            {"name": name, "content": content, "expected_version": current, "replace_all": True},
        )
    assert result.is_error and forced.is_error
    said = text(result)
    assert said.startswith(f"error: content is empty, and memory_write replaces all of {file}")
    assert "nothing was written" in said and instead in said
    assert text(forced) == said  # replace_all does not make a blank file a rewrite
    assert result.structured_content == {"error": "empty_content"}
    assert everything(mem) == before


async def test_a_write_that_drops_most_of_the_profile_is_refused_with_what_it_would_remove(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """The walkthrough's USER.md "write" of one line, meant to add that line."""
    async with connect("alice") as client:
        for key, value in [("Name", "Robert"), ("Time zone", "Europe/Paris")]:
            await ok(client, "update_user", {"section": "Profile", "key": key, "content": value})
        current = await version(client, "user")
        before = everything(mem)
        line = {"name": "user", "content": "- 2026: user likes jazz", "expected_version": current}
        result = await client.call_tool("memory_write", line)
        assert everything(mem) == before
        forced = await ok(client, "memory_write", {**line, "replace_all": True})
    assert result.is_error
    assert text(result) == (
        "error: this would remove 2 of the 2 entries of USER.md ('Name: Robert', 'Time zone: "
        "Europe/Paris') and 3 of its 3 sections (Profile, Work, Preferences); nothing was "
        "written. memory_write replaces the whole file: send all of it with your change "
        "(memory_read gives the current text), use update_user to set one fact, or pass "
        "replace_all=true if you mean to remove them"
    )
    assert result.structured_content == {
        "error": "would_remove_most",
        "entries_removed": 2,
        "entries": 2,
        "sections_removed": 3,
        "sections": 3,
        "paragraphs_removed": 0,  # the template's paragraph under the title is no prose
    }
    # With replace_all the model says it means it: written, and the answer says what went.
    assert text(forced) == (
        f"Saved USER.md as version {current + 1}. Removed 2 entries ('Name: Robert', "
        "'Time zone: Europe/Paris') and 3 sections (Profile, Work, Preferences)."
    )
    assert stored(mem, "alice", FileKind.USER) == ("- 2026: user likes jazz", current + 1)


async def test_a_rewrite_that_removes_some_entries_is_written_and_says_which(
    connect: ClientFactory, mem: Memstrata
) -> None:
    async with connect("alice") as client:
        for entry in ["Chose PostgreSQL", "Uses vim", "Lives in Porto"]:
            await ok(client, "record_memory", {"content": entry, "section": "Decisions"})
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        old = str(read["content"])
        # The model drops one outdated entry and redates another: only the first is gone.
        new = "\n".join(
            line.replace(line[2:12], "2020-01-01") if "Uses vim" in line else line
            for line in old.split("\n")
            if "Lives in Porto" not in line
        )
        result = await ok(
            client,
            "memory_write",
            {"name": "memory", "content": new, "expected_version": read["version"]},
        )
    today = datetime.now(UTC).date().isoformat()
    assert text(result) == (
        f"Saved MEMORY.md as version {read['version'] + 1}. "
        f"Removed 1 entry ('{today}: Lives in Porto')."
    )
    assert stored(mem, "alice", FileKind.MEMORY) == (new, read["version"] + 1)


async def test_a_retried_write_changes_nothing_and_says_it_is_stored(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """memory_write is annotated idempotent: the walkthrough's retry (same content, same
    expected_version) changes nothing. By the spec's rule (a stale version is a conflict,
    MEMSTRATA_SAME_TEXT_STALE_VERSION=conflict) it is refused, its answer saying the text
    is stored and there is nothing to do; the same text on the current version is no
    change."""
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        current = int(read["version"])
        new = str(read["content"]) + "- 2026-01-05: Chose PostgreSQL\n"
        arguments = {"name": "memory", "content": new, "expected_version": current}
        first = await ok(client, "memory_write", arguments)
        again = await client.call_tool("memory_write", arguments)
        stale = await client.call_tool("memory_write", {**arguments, "expected_version": 0})
        same = await client.call_tool(
            "memory_write", {**arguments, "expected_version": current + 1}
        )
    assert text(first) == f"Saved MEMORY.md as version {current + 1}."
    for retry, expected in ((again, current), (stale, 0)):
        assert retry.is_error, text(retry)
        assert "which holds this text already: your write is stored" in text(retry)
        assert retry.structured_content == {
            "error": "version_conflict",
            "expected_version": expected,
            "current_version": current + 1,
            "same_content": True,
        }
    assert not same.is_error, text(same)
    assert text(same) == f"No change: MEMORY.md already holds this text (version {current + 1})."
    assert stored(mem, "alice", FileKind.MEMORY) == (new, current + 1)


async def test_a_person_s_write_path_is_not_guarded(connect: ClientFactory, mem: Memstrata) -> None:
    """The guard is the model's tool's: a person clearing a file (REST PUT, the settings
    page) is stored as written."""
    async with connect("alice") as client:
        current = await version(client, "memory")
    file = await mem.sync.frontend_edit("alice", FileKind.MEMORY, "", expected_version=current)
    assert (file.content, file.version) == ("", current + 1)


async def test_the_schema_states_replace_all(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    schema = tools["memory_write"].input_schema
    assert schema["properties"]["replace_all"]["type"] == "boolean"
    assert "replace_all" not in schema["required"]
    assert "replace_all" in (tools["memory_write"].description or "")


async def test_a_rewrite_may_drop_the_templates_paragraphs_but_not_a_persons(
    connect: ClientFactory, mem: Memstrata
) -> None:
    """The template's MEMORY.md opens with two paragraphs, scaffolding the indexer drops: a
    model rewriting the file as its entries alone is not refused for them (it was, the
    first time for every user). A paragraph a person wrote is refused with what would go
    and how to proceed; replace_all=true writes it."""
    async with connect("alice") as client:
        await ok(client, "record_memory", {"content": "Chose PostgreSQL", "section": "Decisions"})
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        old, current = str(read["content"]), int(read["version"])
        entries_only = "\n".join(line for line in old.split("\n") if line.startswith(("#", "- ")))
        write = {"name": "memory", "content": entries_only, "expected_version": current}
        scaffold_only = await ok(client, "memory_write", write)
        assert text(scaffold_only) == f"Saved MEMORY.md as version {current + 1}."

        own = "We agreed to migrate billing in Q1; Dana owns it."
        person = await mem.sync.frontend_edit("alice", FileKind.MEMORY, f"{old}\n{own}\n")
        before = everything(mem)
        write = {**write, "expected_version": person.version}
        result = await client.call_tool("memory_write", write)
        assert everything(mem) == before
        forced = await ok(client, "memory_write", {**write, "replace_all": True})
    assert result.is_error
    said = text(result)
    assert said.startswith(f"error: this would remove 1 paragraph of MEMORY.md ({own!r})")
    assert "Curated notes" not in said  # the template's paragraphs are not the person's
    assert said.endswith("or pass replace_all=true if you mean to remove them")
    assert result.structured_content == {
        "error": "would_remove_text",
        "entries_removed": 0,
        "entries": 1,
        "sections_removed": 0,
        "sections": 3,
        "paragraphs_removed": 1,
    }
    assert (
        text(forced)
        == f"Saved MEMORY.md as version {person.version + 1}. Removed 1 paragraph ({own!r})."
    )
    assert stored(mem, "alice", FileKind.MEMORY) == (entries_only, person.version + 1)
