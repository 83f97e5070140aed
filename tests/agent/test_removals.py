"""What a whole-file rewrite removes (``memstrata.agent.removals``): facts by section and
key, other entries by their text as entries compare, sections by name; and when that is
most of the file."""

from __future__ import annotations

import pytest

from memstrata.agent.removals import Removal, removal

USER = """# USER.md

## Profile
- Name: Robert
- Time zone: Europe/Paris
- Pronouns:

## Work
- Role: welder
"""

MEMORY = """# MEMORY.md

## Decisions
- 2026-01-02: Chose PostgreSQL
- 2026-01-03: Uses vim

## Ongoing
- 2026-01-04: Ledger migration
"""


def test_a_new_value_keeps_a_fact_and_an_emptied_one_removes_it() -> None:
    new = USER.replace("Robert", "Bob").replace("welder", "")
    assert removal(USER, new) == Removal(("'Role: welder'",), (), 3, 2)


def test_a_fact_is_its_section_s() -> None:
    moved = USER.replace("- Role: welder", "").replace("## Profile", "## Profile\n- Role: welder")
    assert removal(USER, moved).entries == ("'Role: welder'",)


def test_a_key_without_a_value_is_no_fact() -> None:
    assert removal(USER, USER.replace("- Pronouns:\n", "")) == Removal((), (), 3, 2)


def test_entries_compare_without_date_case_or_spacing_and_may_move() -> None:
    new = (
        MEMORY.replace("2026-01-02: Chose PostgreSQL", "2026-03-01: chose  postgresql")
        .replace("- 2026-01-03: Uses vim\n", "")
        .replace("## Ongoing\n", "## Ongoing\n- 2026-01-03: Uses vim\n")
    )
    assert removal(MEMORY, new) == Removal((), (), 3, 2)


def test_sections_compare_by_name() -> None:
    new = MEMORY.replace("## Decisions", "## DECISIONS ##").replace("## Ongoing\n", "")
    assert removal(MEMORY, new) == Removal((), ("Ongoing",), 3, 2)


def test_entries_in_code_are_no_entries() -> None:
    old = "## Notes\n```\n- not an entry\n```\n- an entry\n"
    assert removal(old, "## Notes\n").entries == ("'an entry'",)
    assert removal(old, "## Notes\n").entry_count == 1


@pytest.mark.parametrize(
    ("removed", "total", "most"),
    [(0, 0, False), (1, 1, False), (1, 2, False), (2, 2, True), (2, 4, False), (3, 5, True)],
)
def test_most_is_more_than_half_and_at_least_two(removed: int, total: int, most: bool) -> None:
    entries = tuple(f"'e{i}'" for i in range(removed))
    assert Removal(entries, (), total, 0).most is most
    assert Removal((), tuple(f"s{i}" for i in range(removed)), 0, total).most is most


def test_the_walkthrough_s_one_line_profile() -> None:
    found = removal(USER, "- 2026: user likes jazz")
    assert found.entries == ("'Name: Robert'", "'Time zone: Europe/Paris'", "'Role: welder'")
    assert found.sections == ("Profile", "Work") and found.most


def test_a_crlf_file_reads_as_its_lf_twin() -> None:
    crlf = MEMORY.replace("\n", "\r\n")
    assert removal(crlf, MEMORY) == Removal((), (), 3, 2)
