"""Section edits (pure): a file keeps its line breaks, and a section or key is found however
its name is spelled (NFD, full width, any case, behind a byte-order mark)."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from datetime import date

import pytest

from memstrata.agent.markdown_doc import parse
from memstrata.agent.sections import (
    append_to_section,
    dated_bullet,
    find_section,
    line_break,
    replace_file,
    replace_section,
    set_key,
)

CRLF_MEMORY = "# MEMORY\r\n\r\n## Notes\r\n- 2026-01-01: a\r\n\r\n## Decisions\r\n- x\r\n"
CRLF_USER = "# USER\r\n\r\n## Profile\r\n- Name: old\r\n- Time zone:\r\n\r\n## Work\r\n- Role:\r\n"


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "\n"),
        ("one line", "\n"),
        ("a\nb\n", "\n"),
        ("a\r\nb\r\n", "\r\n"),
        ("a\r\nb\n", "\n"),  # mixed: the web editor saves it with LF too
        ("a\r\r\nb", "\r\n"),  # a lone CR is no line break of its own here
    ],
)
def test_line_break_is_crlf_only_when_every_break_is(text: str, expected: str) -> None:
    assert line_break(text) == expected


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: append_to_section(t, "Notes", "- 2026-02-02: b\n  more"),
            "# MEMORY\r\n\r\n## Notes\r\n- 2026-01-01: a\r\n- 2026-02-02: b\r\n  more\r\n\r\n"
            "## Decisions\r\n- x\r\n",
        ),
        (
            lambda t: append_to_section(t, "Lessons", "- b"),
            CRLF_MEMORY + "\r\n## Lessons\r\n- b\r\n",
        ),
        (
            lambda t: replace_section(t, "Decisions", "- y\n- z"),
            "# MEMORY\r\n\r\n## Notes\r\n- 2026-01-01: a\r\n\r\n## Decisions\r\n- y\r\n- z\r\n",
        ),
        (
            lambda t: replace_section(t, "Notes", "- y\r\n- z\r\n"),  # CR LF from the agent
            "# MEMORY\r\n\r\n## Notes\r\n- y\r\n- z\r\n\r\n## Decisions\r\n- x\r\n",
        ),
        (
            lambda t: replace_section(t, "Notes", ""),
            "# MEMORY\r\n\r\n## Notes\r\n\r\n## Decisions\r\n- x\r\n",
        ),
        (lambda t: replace_file(t, "# M\n- only"), "# M\r\n- only\r\n"),
    ],
)
def test_a_crlf_memory_file_stays_all_crlf(edit: Callable[[str], str], expected: str) -> None:
    assert edit(CRLF_MEMORY) == expected


def test_set_key_keeps_the_cr_of_the_line_it_replaces() -> None:
    assert set_key(CRLF_USER, "Profile", "name", "Ann") == CRLF_USER.replace(
        "- Name: old\r\n", "- Name: Ann\r\n"
    )
    assert set_key(CRLF_USER, "Work", "Team", "Core") == CRLF_USER + "- Team: Core\r\n"


def test_a_lone_cr_in_a_crlf_file_survives_an_edit() -> None:
    text = "## Notes\r\n- a\rb\r\r\n"
    assert append_to_section(text, "Notes", "- c") == "## Notes\r\n- a\rb\r\r\n- c\r\n"


@pytest.mark.parametrize("brk", ["\r", "\u2028", "\u2029", "\x85", "\x0b", "\r\n"])
def test_an_entry_breaks_at_every_line_break_and_indents_what_follows(brk: str) -> None:
    entry = dated_bullet(f"first{brk}second{brk}{brk}third", date(2026, 3, 1))
    assert entry == "- 2026-03-01: first\n  second\n  third"


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: replace_section(t, "Notes", "- y\r\n- z"),
        lambda t: append_to_section(t, "Notes", "- y\r\n  z"),
        lambda t: replace_file(t, "# M\r\n- only\r\n"),
    ],
)
def test_an_lf_file_stays_lf_when_the_agent_sends_crlf(edit: Callable[[str], str]) -> None:
    assert "\r" not in edit("# MEMORY\n\n## Notes\n- a\n")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (nfd("## Préférences\n- a\n"), "Préférences"),  # macOS-style NFD heading
        ("## Préférences\n- a\n", nfd("préférences")),
        ("## Ｎｏｔｅｓ\n- a\n", "Notes"),  # full width
        ("## Notes\n- a\n", "ＮＯＴＥＳ"),
        ("## İLETİŞİM\n- a\n", "iletişim"),  # Turkish dotted capital I
        ("## STRASSE\n- a\n", "Straße"),
        ("\ufeff## Notes\n- a\n", "Notes"),  # a byte-order mark before the first heading
    ],
)
def test_a_section_is_found_however_its_name_is_spelled(text: str, name: str) -> None:
    assert find_section(parse(text), name) is not None
    assert append_to_section(text, name, "- b") == text.replace("- a\n", "- a\n- b\n")


def test_only_a_bom_at_the_very_start_is_skipped() -> None:
    text = "# T\n\ufeff## Notes\n"  # a U+FEFF inside the file is text, not a mark
    assert find_section(parse(text), "Notes") is None


@pytest.mark.parametrize(
    ("line", "key"),
    [
        (nfd("- Café: oui"), "Café"),
        ("- Café: oui", nfd("CAFÉ")),
        ("- Ｎａｍｅ: oui", "name"),
        ("- **İSİM**: oui", "isim"),
        ("- Straße: oui", "STRASSE"),
    ],
)
def test_set_key_finds_the_key_however_it_is_spelled(line: str, key: str) -> None:
    text = f"## Profile\n{line}\n"
    prefix = line.removesuffix(" oui")
    assert set_key(text, "profile", key, "non") == f"## Profile\n{prefix} non\n"


def test_set_key_finds_an_nfd_section_and_key_without_duplicating_them() -> None:
    text = nfd("## Préférences\n- Café: oui\n")
    assert set_key(text, "Préférences", "Café", "non") == nfd("## Préférences\n- Café:") + " non\n"
