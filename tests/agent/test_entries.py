"""The pure parts of the tool guards: MEMORY.md entries, close section names, a lone
``Key: value`` line and a section body's headings."""

from __future__ import annotations

import pytest

from memstrata.agent import entries, sections
from memstrata.agent.markdown_doc import parse

TEXT = """\ufeff# MEMORY.md
- 2026-01-01: before any section

## Decisions
- 2026-02-01: Chose PostgreSQL 15.
  Because of pgvector.
* undated, star bullet
```
- 2026-02-02: in a code block
```

## Ongoing ##
- 2026-02-03: Ｍｉｇｒａｔｉｎｇ   billing\r
"""


def test_entries_are_bullets_with_their_indented_lines_outside_code() -> None:
    found = entries.entries(parse(TEXT))
    assert [(e.start, e.end, e.date, e.text, e.section) for e in found] == [
        (1, 2, "2026-01-01", "before any section", None),
        (4, 6, "2026-02-01", "Chose PostgreSQL 15. Because of pgvector.", "Decisions"),
        (6, 7, None, "undated, star bullet", "Decisions"),
        (12, 13, "2026-02-03", "Ｍｉｇｒａｔｉｎｇ   billing", "Ongoing"),
    ]
    assert found[1].first_line == "2026-02-01: Chose PostgreSQL 15."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- 2026-02-03: Migrating  Billing.", "migrating billing."),
        ("2026-02-03:Ｍｉｇｒａｔｉｎｇ\tbilling.", "migrating billing."),
        ("* STRASSE", "strasse"),
        ("Migrating billing: 2026-02-03", "migrating billing: 2026-02-03"),
        # A typed date kept in the text follows the entry's own (model_markup.entry_date).
        ("- 2026-03-01: 2024-05-01: Started the job", "started the job"),
    ],
)
def test_comparable_text_ignores_case_width_spacing_bullet_and_date(
    text: str, expected: str
) -> None:
    assert entries.comparable(text) == expected


@pytest.mark.parametrize(
    "line", ["- 2026-03-01: 2024-05-01: Started", "2026-03-01: Started", "- Started", "Started"]
)
def test_an_entrys_text_without_its_date_compares_as_its_whole_line(line: str) -> None:
    # Entry.text has its date taken off; a replaces quote may still carry it.
    found = entries.entries(parse(f"- {line}"))
    assert found[0].key == entries.comparable(line) == "started"
    assert entries.matching(found, line) == found


def test_matching_prefers_an_equal_entry_to_entries_containing_the_text() -> None:
    found = entries.entries(parse("- 2026-01-01: tea\n- 2026-01-02: green tea\n- 2026-01-03: tea"))
    assert [e.start for e in entries.matching(found, "- 2026-05-05: TEA")] == [0, 2]
    assert [e.start for e in entries.matching(found, "green")] == [1]
    assert [e.start for e in entries.matching(found, "te")] == [0, 1, 2]
    assert entries.matching(found, "coffee") == []
    assert [e.start for e in entries.near(found, "green coffee")] == [1]


def test_an_entry_is_the_same_dates_aside_only_within_its_section() -> None:
    doc = parse(TEXT)
    found = entries.entries(doc)
    decisions = sections.find_section(doc, "decisions")
    ongoing = sections.find_section(doc, "ongoing")
    bullet = "- 2026-09-09: chose postgresql 15.\n  because of PGVECTOR."
    same = entries.same_entry(found, decisions, bullet)
    assert same is not None and same.start == 4
    assert entries.same_entry(found, ongoing, bullet) is None
    assert entries.same_entry(found, None, bullet) is None
    assert entries.without(doc.lines, [found[1]])[3:5] == ["## Decisions", "* undated, star bullet"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Decision", ["Decisions"]),
        ("decisons", ["Decisions"]),
        ("User Profile", ["Profile"]),
        ("Lessons learned", ["Lessons"]),
        ("Ideas", []),
        ("Pro", []),  # a word of three letters is no evidence
    ],
)
def test_close_names(name: str, expected: list[str]) -> None:
    titles = ["Decisions", "Profile", "Lessons", "Ongoing"]
    assert sections.close_names(name, titles) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Pronouns: she/her", ("Pronouns", "she/her")),
        ("\n- **Time zone**:  UTC+2 \n", ("Time zone", "UTC+2")),
        ("Languages:", ("Languages", "")),
        ("https://example.com", None),
        ("- 2026-03-01: a dated entry", None),
        ("Name: Ann\nPronouns: she/her", None),
        ("no colon here", None),
    ],
)
def test_keyed_line(text: str, expected: tuple[str, str] | None) -> None:
    assert sections.keyed_line(text) == expected


def test_a_body_loses_its_own_heading_and_shows_any_other() -> None:
    assert sections.without_own_heading("\n## decisions ##\n- a", "Decisions") == "- a"
    assert sections.without_own_heading("# DECISIONS\n- a", "decisions") == "- a"
    assert sections.without_own_heading("### Decisions\n- a", "Decisions") == "### Decisions\n- a"
    assert sections.without_own_heading("- a\n## Decisions", "Decisions") == "- a\n## Decisions"
    assert sections.section_heading_in("- a\n## Decisions") == "## Decisions"
    assert sections.section_heading_in("~~~\n# code\n~~~\n### Sub") is None
