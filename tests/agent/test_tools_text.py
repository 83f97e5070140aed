"""Memory tools on text that is not plain LF ASCII, against a real DB and real sandbox
directories: CR LF files, names spelled in other normalisations, line breaks other than LF
in a name, and search previews of NFD or full-width text."""

from __future__ import annotations

import unicodedata

import pytest

from memstrata.agent.tools import MemoryTools, ToolContext
from memstrata.db.database import Database
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.search_warnings import NO_EMBEDDING_API
from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import DAY
from tests.sandbox.support import USER

pytestmark = pytest.mark.anyio


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def all_crlf(text: str) -> bool:
    return "\r\n" in text and text.count("\n") == text.count("\r\n")


async def test_every_tool_keeps_a_crlf_file_all_crlf(
    sync: SyncService, store: MemoryStore, user_box: LocalDirectorySandbox, templates: TemplateSet
) -> None:
    await sync.start_session(USER)
    crlf_memory = templates.load(FileKind.MEMORY).replace("\n", "\r\n")
    crlf_user = templates.load(FileKind.USER).replace("\n", "\r\n")
    # An agent on Windows saved both files; the next session start stores them.
    await user_box.write_text("MEMORY.md", crlf_memory)
    await user_box.write_text("USER.md", crlf_user)
    await sync.start_session(USER)
    assert (memory(store)[0], user_md(store)[0]) == (crlf_memory, crlf_user)
    tracker = await sync.begin_round(USER)
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box, tracker=tracker), today=lambda: DAY)

    answers = [
        await tools.record_memory("first\nsecond", section="Decisions"),
        await tools.update_long_term_memory("- shipped v1\n- hired Bo", section="Ongoing"),
        await tools.update_user("Ann", section="Profile", key="name"),
        await tools.update_user("- Role: engineer", section="Work", replace_section=True),
    ]
    # The answers name the sections without the CR of their CR LF heading lines.
    assert answers[0].startswith("Recorded in MEMORY.md under ## Decisions (version")
    assert not [answer for answer in answers if "\r" in answer]

    expected_memory = crlf_memory.replace(
        "## Decisions\r\n", "## Decisions\r\n- 2026-03-01: first\r\n  second\r\n"
    ).replace("## Ongoing\r\n", "## Ongoing\r\n- shipped v1\r\n- hired Bo\r\n")
    expected_user = crlf_user.replace("- Name:\r\n", "- Name: Ann\r\n").replace(
        "- Role:\r\n- Current projects:\r\n", "- Role: engineer\r\n"
    )
    assert memory(store)[0] == expected_memory and all_crlf(expected_memory)
    assert user_md(store)[0] == expected_user and all_crlf(expected_user)
    assert await user_box.read_text("MEMORY.md") == expected_memory

    await tools.update_long_term_memory("# Memory\n- only this", whole_file=True)
    assert memory(store)[0] == "# Memory\r\n- only this\r\n"


async def test_a_name_in_another_spelling_finds_its_section(
    tools: MemoryTools, store: MemoryStore, templates: TemplateSet
) -> None:
    result = await tools.update_user("UTC+3", section="ＰＲＯＦＩＬＥ", key="TIME ZONE")
    # The answer names the section and key as the file spells them.
    assert result == "Set Time zone under ## Profile in USER.md (version 2)."
    expected = templates.load(FileKind.USER).replace("- Time zone:\n", "- Time zone: UTC+3\n")
    assert user_md(store)[0] == expected

    await tools.record_memory("one", section="İLETİŞİM")
    await tools.record_memory("two", section="iletişim")
    await tools.record_memory("three", section=nfd("Café"))
    await tools.record_memory("four", section="CAFÉ")
    content = memory(store)[0]
    assert content.endswith(
        "## İLETİŞİM\n- 2026-03-01: one\n- 2026-03-01: two\n\n"
        + nfd("## Café")
        + "\n- 2026-03-01: three\n- 2026-03-01: four\n"
    )


@pytest.mark.parametrize("brk", ["\r", "\x85", "\u2028", "\u2029", "\x0b"])
async def test_a_name_with_any_line_break_is_refused(
    brk: str, tools: MemoryTools, store: MemoryStore
) -> None:
    result = await tools.call("record_memory", {"content": "x", "section": f"Notes{brk}## D"})
    assert result == (
        f"error: section must be one line, but it has a line break ({brk!r}); give just the "
        "name, such as 'Decisions', and put anything more in content"
    )
    assert result.failed
    result = await tools.update_user("x", section="Profile", key=f"Name{brk}Evil")
    assert result == (
        f"error: key must be one line, but it has a line break ({brk!r}); give just the "
        "name, such as 'Time zone', and put anything more in content"
    )
    result = await tools.update_user(f"x{brk}y", section="Profile", key="Name")
    assert result.startswith("error: content must be one line when a key is given; join ")
    assert (memory(store)[1], user_md(store)[1]) == (1, 1)


@pytest.mark.parametrize(
    ("line", "query"),
    [
        (nfd("Amélie aime le café noir"), "café"),  # macOS-style NFD, NFC query
        ("模型是ＧＰＴ４ｏ，用于翻译", "GPT4o"),  # full width, half-width query
    ],
)
async def test_memory_search_previews_the_line_that_matched(
    line: str, query: str, sync: SyncService, db: Database, user_box: LocalDirectorySandbox
) -> None:
    await sync.start_session(USER)
    searcher = SearchService(IndexCache(db.sessions, 8))
    tools = MemoryTools(ToolContext.bind(USER, sync, user_box), searcher=searcher)
    filler = [f"- 2026-01-{day:02d}: routine note number {day}" for day in range(1, 25)]
    await tools.update_long_term_memory("\n".join([*filler, f"- 2026-02-01: {line}"]), "Lessons")

    result = await tools.memory_search(query, top_k=1)

    # One hit, the chunk holding the line; then the note of a search without embeddings.
    hit, note = result.split("\n")
    assert line in hit and note == f"note: {NO_EMBEDDING_API}"
