"""merge3_parts: where merge3 gives up, the regions left to a person, exactly, with the rest
merged (the web page's per-region choice after a conflicting re-apply)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memstrata.sandbox.merge import Conflict, MergePart, merge3, merge3_parts

BASE = "# Memory\n- a\n- b\n- c\n- d\n- e\n- f\n- g\n"


def _resolved(parts: list[MergePart], pick: str) -> str:
    """The text with every conflict resolved as ``pick`` ("ours", "theirs")."""
    lines: list[str] = []
    for part in parts:
        if isinstance(part, Conflict):
            lines.extend(part.ours_lines if pick == "ours" else part.theirs_lines)
        else:
            lines.extend(part)
    return "\n".join(lines)


def test_one_line_changed_by_both_is_one_conflict_and_the_rest_is_merged() -> None:
    ours = BASE.replace("- b", "- b (mine)").replace("- g", "- g (mine)")
    theirs = BASE.replace("- b", "- b (theirs)").replace("- a\n", "- a\n- a2\n")
    assert merge3(BASE, ours, theirs) is None
    parts = merge3_parts(BASE, ours, theirs)
    # "- a2" was added next to "- b": one region, from "- a"'s end to "- b"'s
    assert parts == [
        ("# Memory", "- a"),
        Conflict(
            base=(2, 3),
            ours=(2, 3),
            theirs=(2, 4),
            ours_lines=("- b (mine)",),
            theirs_lines=("- a2", "- b (theirs)"),
        ),
        ("- c", "- d", "- e", "- f", "- g (mine)", ""),
    ]
    assert _resolved(parts, "ours") == ours
    assert _resolved(parts, "theirs") == theirs.replace("- g", "- g (mine)")


def test_each_conflict_names_its_lines_in_all_three_texts() -> None:
    # Lines added above the second conflict shift it differently in each text.
    ours = BASE.replace("- b", "- B1").replace("- f", "- F1")
    theirs = BASE.replace("- b", "- B2\n- B2 more").replace("- f", "- F2")
    parts = merge3_parts(BASE, ours, theirs)
    conflicts = [p for p in parts if isinstance(p, Conflict)]
    assert [(c.base, c.ours, c.theirs) for c in conflicts] == [
        ((2, 3), (2, 3), (2, 4)),
        ((6, 7), (6, 7), (7, 8)),
    ]
    for c in conflicts:
        assert ours.split("\n")[slice(*c.ours)] == list(c.ours_lines)
        assert theirs.split("\n")[slice(*c.theirs)] == list(c.theirs_lines)


def test_what_merge3_merges_has_no_conflict() -> None:
    pronouns = BASE.replace("- a", "- A")
    zone = BASE.replace("- b", "- B")  # neighbouring lines, each replaced by one side
    parts = merge3_parts(BASE, pronouns, zone)
    assert not [p for p in parts if isinstance(p, Conflict)]
    assert _resolved(parts, "ours") == merge3(BASE, pronouns, zone)


_lines = st.lists(st.sampled_from(["a", "b", "c", ""]), max_size=6).map("\n".join)


@given(_lines, _lines, _lines)
def test_parts_agree_with_merge3_and_with_each_text(base: str, ours: str, theirs: str) -> None:
    parts = merge3_parts(base, ours, theirs)
    conflicts = [p for p in parts if isinstance(p, Conflict)]
    for c in conflicts:
        assert ours.split("\n")[slice(*c.ours)] == list(c.ours_lines)
        assert theirs.split("\n")[slice(*c.theirs)] == list(c.theirs_lines)
        assert c.ours_lines != c.theirs_lines
    merged = merge3(base, ours, theirs)
    if merged is None:
        assert conflicts  # never "no conflict" where merge3 gives up
    if not conflicts:
        # ASCII without CR: merge3's retry in the base's form has nothing to change, and
        # with no region in conflict its append rule is never reached
        assert _resolved(parts, "ours") == merged
