"""``agent.rewrite_guard``: MCP ``memory_write``'s guard as plain functions over the new
text and the stored file (the tool itself: ``tests/mcp/test_memory_write_guard.py``,
``test_memory_write_fences.py``, ``test_whole_file_removals.py``)."""

from __future__ import annotations

import pytest

from memstrata.agent.removals import Removal
from memstrata.agent.rewrite_guard import (
    EMPTY_CONTENT,
    UNCLOSED_BLOCK,
    NoChange,
    Refused,
    Store,
    rewrite_verdict,
    text_refusal,
)
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryFile

USER = (
    "# USER.md\n\n## Profile\n- Name: Robert\n- Time zone: Europe/Paris\n\n"
    "## Work\n- Role: welder\n"
)
SOUL = "# SOUL.md\n\n## Tone\n- calm\n- brief\n"


def stored(kind: FileKind, content: str, version: int = 3) -> MemoryFile:
    return MemoryFile("alice", kind, content, version, None)


@pytest.mark.parametrize(
    ("kind", "instead"),
    [
        (FileKind.MEMORY, "(memory_read gives the current text), or use record_memory to add"),
        (FileKind.USER, "(memory_read gives the current text), or use update_user to set"),
        (FileKind.SOUL, "(memory_read gives the current text); to empty it"),
    ],
)
def test_a_blank_text_is_refused_naming_the_files_own_tool(kind: FileKind, instead: str) -> None:
    refused = text_refusal(kind, " \n\t")
    assert isinstance(refused, Refused) and refused.data == {"error": EMPTY_CONTENT}
    assert refused.message.startswith(
        f"content is empty, and memory_write replaces all of {kind.filename} with it"
    )
    assert instead in refused.message


def test_a_fence_left_open_is_refused_and_a_closed_one_passes() -> None:
    refused = text_refusal(FileKind.MEMORY, "# MEMORY.md\n\n```py\nx = 1\n")
    assert refused == Refused(
        "content opens a ``` fence on line 3 that it never closes, so everything after it in "
        "MEMORY.md, later sections too, would read as code; close it with a line of ``` "
        "after the code, or remove it",
        {"error": UNCLOSED_BLOCK},
    )
    assert text_refusal(FileKind.MEMORY, "# MEMORY.md\n\n```py\nx = 1\n```\n") is None


def test_the_text_already_stored_is_no_change_on_the_current_version() -> None:
    verdict = rewrite_verdict(FileKind.USER, USER, stored(FileKind.USER, USER, 4), 4)
    assert verdict == NoChange(FileKind.USER, 4)
    assert verdict.answer == "No change: USER.md already holds this text (version 4)."


def test_the_text_already_stored_on_an_older_version_goes_to_the_stores_conflict() -> None:
    """By default a stale version is the spec's conflict even for the stored text: the
    write goes on, and the store refuses it saying the file holds the text already."""
    verdict = rewrite_verdict(FileKind.USER, USER, stored(FileKind.USER, USER, 4), 1)
    assert verdict == Store(FileKind.USER, None)


def test_with_the_unchanged_rule_the_stored_text_is_no_change_whatever_the_version() -> None:
    file = stored(FileKind.USER, USER, 4)
    verdict = rewrite_verdict(FileKind.USER, USER, file, 1, same_text="unchanged")
    assert verdict == NoChange(FileKind.USER, 4)


def test_removing_most_is_refused_with_counts_unless_replace_all() -> None:
    line = "- 2026: user likes jazz"
    verdict = rewrite_verdict(FileKind.USER, line, stored(FileKind.USER, USER), 3)
    assert verdict == Refused(
        "this would remove 3 of the 3 entries of USER.md ('Name: Robert', 'Time zone: "
        "Europe/Paris', 'Role: welder') and 2 of its 2 sections (Profile, Work); nothing was "
        "written. memory_write replaces the whole file: send all of it with your change "
        "(memory_read gives the current text), use update_user to set one fact, or pass "
        "replace_all=true if you mean to remove them",
        {
            "error": "would_remove_most",
            "entries_removed": 3,
            "entries": 3,
            "sections_removed": 2,
            "sections": 2,
            "paragraphs_removed": 0,  # a title is no paragraph
        },
    )
    forced = rewrite_verdict(FileKind.USER, line, stored(FileKind.USER, USER), 3, replace_all=True)
    assert isinstance(forced, Store) and forced.answer(4) == (
        "Saved USER.md as version 4. Removed 3 entries ('Name: Robert', 'Time zone: "
        "Europe/Paris', 'Role: welder') and 2 sections (Profile, Work)."
    )


def test_sections_alone_are_counted_of_the_file() -> None:
    new = "# SOUL.md\n"
    two = SOUL + "\n## Style\n"
    verdict = rewrite_verdict(
        FileKind.SOUL, new, stored(FileKind.SOUL, two.replace("- calm\n- brief\n", "")), 3
    )
    assert isinstance(verdict, Refused)
    assert verdict.message.startswith(
        "this would remove 2 of the 2 sections of SOUL.md (Tone, Style); nothing was written. "
        "memory_write replaces the whole file: send all of it with your change (memory_read "
        "gives the current text), or pass replace_all=true"
    )


def test_a_write_that_removes_few_is_stored_and_says_what_it_removed() -> None:
    new = USER.replace("- Role: welder\n", "- Role: engineer\n").replace("Robert", "Bob")
    kept = rewrite_verdict(FileKind.USER, new, stored(FileKind.USER, USER), 3)
    assert kept == Store(FileKind.USER, Removal((), (), 3, 2))
    assert kept.answer(4) == "Saved USER.md as version 4."
    dropped = USER.replace("- Time zone: Europe/Paris\n", "")
    verdict = rewrite_verdict(FileKind.USER, dropped, stored(FileKind.USER, USER), 3)
    assert isinstance(verdict, Store)
    assert (
        verdict.answer(4)
        == "Saved USER.md as version 4. Removed 1 entry ('Time zone: Europe/Paris')."
    )


@pytest.mark.parametrize("file", [None, stored(FileKind.USER, USER, 5)])
def test_without_the_version_written_from_nothing_is_weighed(file: MemoryFile | None) -> None:
    """No file yet, or another version (the write is refused as stale when stored)."""
    verdict = rewrite_verdict(FileKind.USER, "# USER.md\n", file, 3)
    assert verdict == Store(FileKind.USER, None)
    assert verdict.answer(1) == "Saved USER.md as version 1."
