"""The markup a model types that the tools write themselves (``agent.model_markup``), and
which entry a ``replaces`` names (``agent.entries.inner_item``): pure functions."""

from __future__ import annotations

from datetime import date

import pytest

from memstrata.agent import entries, markdown_doc
from memstrata.agent.model_markup import (
    entry_date,
    entry_text,
    list_items,
    new_entries,
    plain_key,
    plain_value,
)

DAY = date(2026, 12, 6)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("Prefers dark mode", (None, "Prefers dark mode")),
        ("- Prefers dark mode", (None, "Prefers dark mode")),
        ("* Prefers dark mode", (None, "Prefers dark mode")),
        ("1. Prefers dark mode", (None, "Prefers dark mode")),
        ("2026-12-06: Uses vim", (DAY, "Uses vim")),
        ("- 2026-12-06: Uses vim", (DAY, "Uses vim")),
        ("- 2025-01-31:Started the job", (date(2025, 1, 31), "Started the job")),
        # No calendar day: text, though its marker goes.
        ("- 2026-13-01: odd", (None, "2026-13-01: odd")),
        # Later lines stay as they are; only the first line's markup is the entry's.
        ("- Plan:\n  - 2026-12-07: ship\n", (None, "Plan:\n  - 2026-12-07: ship")),
        ("**Important**: allergic to peanuts", (None, "**Important**: allergic to peanuts")),
        ("---", (None, "---")),
        ("Uses 2026-12-06: dates", (None, "Uses 2026-12-06: dates")),
    ],
)
def test_entry_text_takes_off_the_marker_and_the_date(
    content: str, expected: tuple[date | None, str]
) -> None:
    assert entry_text(content) == expected


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        (None, (DAY, "Met Ana", None)),
        (date(2026, 12, 5), (date(2026, 12, 5), "Met Ana", None)),
        (date(2026, 11, 5), (date(2026, 11, 5), "Met Ana", None)),  # 31 days ago
        (date(2026, 12, 7), (date(2026, 12, 7), "Met Ana", None)),  # UTC+14's today
        (
            date(2026, 11, 4),
            (DAY, "2026-11-04: Met Ana", "2026-11-04 (more than 31 days ago)"),
        ),
        (date(2026, 12, 8), (DAY, "2026-12-08: Met Ana", "2026-12-08 (in the future)")),
    ],
)
def test_entry_date_takes_a_nearby_typed_date_and_sets_a_far_one_aside(
    typed: date | None, expected: tuple[date, str, str | None]
) -> None:
    assert entry_date(typed, "Met Ana", DAY) == expected


def test_a_date_set_aside_goes_before_the_first_line_with_text() -> None:
    text = entry_text("\n2024-05-01: Plan:\n  - ship")
    assert entry_date(text[0], text[1], DAY) == (
        DAY,
        "\n2024-05-01: Plan:\n  - ship",
        "2024-05-01 (more than 31 days ago)",
    )


def test_entry_text_keeps_the_line_numbers_of_the_content() -> None:
    # A refusal names lines as the model sent them: blank lines before the text stay.
    assert entry_text("\n\n- Run:\n  ```") == (None, "\n\nRun:\n  ```")


def test_entry_text_is_what_entries_compare() -> None:
    # One rule: the text written is the text the duplicate check reads.
    for content in ("- Prefers dark mode", "2026-12-06: Uses vim", "1. 2026-01-01: TEA"):
        assert entries.comparable(entry_text(content)[1]) == entries.comparable(content)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("- Likes A\n- Likes B\n- Likes C", ["- Likes A", "- Likes B", "- Likes C"]),
        ("- A\n  more on A\n- B", ["- A\n  more on A", "- B"]),
        ("- A\nlazy line of A\n\n* B", ["- A\nlazy line of A", "* B"]),
        ("1. one\n2. two", ["1. one", "2. two"]),
        ("- A\r\n- B\u2028- C", ["- A", "- B", "- C"]),
        # One item, however long, or text before or after the list: one entry.
        ("- A\n  - a1\n  - a2", ["- A\n  - a1\n  - a2"]),
        ("Plan:\n- step 1\n- step 2", ["Plan:\n- step 1\n- step 2"]),
        ("- A\n- B\n\nBoth from the call", ["- A\n- B\n\nBoth from the call"]),
        ("- A\n```\ncode\n```", ["- A\n```\ncode\n```"]),
        ("plain text", ["plain text"]),
    ],
)
def test_list_items_splits_a_list_and_nothing_else(content: str, expected: list[str]) -> None:
    assert list_items(content) == expected


def test_new_entries_leaves_out_items_with_no_text() -> None:
    assert new_entries("- Likes A\n- 2026-12-06:\n- 2026-12-05: Likes C") == [
        (None, "Likes A"),
        (date(2026, 12, 5), "Likes C"),
    ]
    assert new_entries("- ") == []


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("Name", "Name"),
        ("**Name**", "Name"),
        ("*Time zone*", "Time zone"),
        ("__Name__", "Name"),
        ("***Name***", "Name"),
        ("- **Name**", "Name"),
        ("** Name **", "** Name **"),  # no emphasis to CommonMark: kept
        ("**Name", "**Name"),
        ("C*", "C*"),
    ],
)
def test_plain_key(key: str, expected: str) -> None:
    assert plain_key(key) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Ivan", "Ivan"),
        ("- Ivan", "Ivan"),
        ("* Ivan", "Ivan"),
        ("1. FC Köln", "1. FC Köln"),  # a number is too often the value itself
        ("-", "-"),
        ("-5 °C", "-5 °C"),
        ("**Ivan**", "**Ivan**"),
    ],
)
def test_plain_value(value: str, expected: str) -> None:
    assert plain_value(value) == expected


# -- inner_item: a replaces that names a line nested in an entry, not the entry -------------

NESTED = "## Lessons\n- 2026-02-06: - Likes A\n  - Likes B\n  - Likes C\n- 2026-02-07: Plain\n"


@pytest.mark.parametrize(
    ("wanted", "expected"),
    [
        ("Likes B", "- Likes B"),
        ("- likes c", "- Likes C"),
        ("Likes A", None),  # the entry's own first line names the entry
        ("Likes", None),
        ("Likes A - Likes B", None),  # a quote across its lines names the entry
    ],
)
def test_inner_item(wanted: str, expected: str | None) -> None:
    doc = markdown_doc.parse(NESTED)
    entry = entries.entries(doc)[0]
    assert entry.lines == 3
    assert entries.inner_item(doc, entry, wanted) == expected


def test_inner_item_is_no_paragraph_line_nor_code() -> None:
    text = "- 2026-02-04: Contract 49.\n  It runs out in June.\n  ```\n  - in code\n  ```\n"
    doc = markdown_doc.parse(text)
    entry = entries.entries(doc)[0]
    assert entries.inner_item(doc, entry, "runs out in June") is None
    assert entries.inner_item(doc, entry, "in code") is None
