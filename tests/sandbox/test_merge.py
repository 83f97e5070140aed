"""merge3: the line-based three-way merge used when an agent and a human edit one file."""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memstrata.sandbox import merge
from memstrata.sandbox.merge import merge3
from tests.agent.md_lines import free_lines, with_free

BASE = "# Memory\n\n## Decisions\n- a\n- b\n\n## Ongoing\n- c\n\n## Lessons\n- d\n"


def test_edits_on_distant_lines_merge_cleanly() -> None:
    ours = BASE.replace("- a\n", "- a (agent)\n")
    theirs = BASE.replace("- d\n", "- d (human)\n")
    assert merge3(BASE, ours, theirs) == BASE.replace("- a\n", "- a (agent)\n").replace(
        "- d\n", "- d (human)\n"
    )


def test_append_at_the_end_and_edit_at_the_top_merge() -> None:
    ours = BASE + "- e (agent)\n"
    theirs = BASE.replace("# Memory", "# My memory")
    assert merge3(BASE, ours, theirs) == "# My memory" + BASE[len("# Memory") :] + "- e (agent)\n"


def test_same_line_changed_differently_conflicts() -> None:
    assert merge3(BASE, BASE.replace("- b", "- b1"), BASE.replace("- b", "- b2")) is None


def test_neighbouring_lines_each_replaced_by_one_side_go_in_place() -> None:
    # Each side replaced a line of its own: no order to guess (two people filling in
    # neighbouring fields of USER.md), so both stay where they were made.
    merged = merge3(BASE, BASE.replace("- a", "- A"), BASE.replace("- b", "- B"))
    assert merged == BASE.replace("- a", "- A").replace("- b", "- B")
    template = "## Profile\n- Name:\n- Pronouns:\n- Time zone:\n"
    pronouns = template.replace("Pronouns:", "Pronouns: she/her")
    zone = template.replace("Time zone:", "Time zone: Europe/Paris")
    both = "## Profile\n- Name:\n- Pronouns: she/her\n- Time zone: Europe/Paris\n"
    assert merge3(template, pronouns, zone) == merge3(template, zone, pronouns) == both
    # A removed line beside the other side's edit is a replacement too.
    assert merge3(BASE, BASE.replace("- a\n", ""), BASE.replace("- b", "- B")) == (
        BASE.replace("- a\n", "").replace("- b", "- B")
    )


def test_a_line_inserted_next_to_the_other_sides_edit_conflicts() -> None:
    # Which goes first is a guess: a line added under "- a" while the other side rewrote
    # "- b" may belong to either, and guessing an order is how merges garble text.
    ours = BASE.replace("- a\n", "- a\n- a2\n")
    assert merge3(BASE, ours, BASE.replace("- b", "- B")) is None
    assert merge3(BASE, BASE.replace("- b", "- B"), ours) is None
    # And a line changed by both sides, beside lines changed by one.
    ab = BASE.replace("- a", "- A").replace("- b", "- B1")
    assert merge3(BASE, ab, BASE.replace("- b", "- B2")) is None


def test_insertions_at_the_same_place_conflict() -> None:
    ours = BASE.replace("- c\n", "- c\n- x\n")
    theirs = BASE.replace("- c\n", "- c\n- y\n")
    assert merge3(BASE, ours, theirs) is None


def test_appends_at_the_end_keep_both_the_stored_side_first() -> None:
    # A memory file grows by appending: two new entries are both kept, never one of them
    # moved into a conflict copy.
    assert merge3(BASE, BASE + "- agent\n", BASE + "- human\n") == BASE + "- human\n- agent\n"
    # ...with or without final newlines, and a new section after the last line.
    assert merge3(BASE, BASE + "- agent", BASE + "- human\n") == BASE + "- human\n- agent\n"
    assert merge3(BASE, BASE + "- agent", BASE + "- human") == BASE + "- human\n- agent"
    assert merge3("a\nb", "a\nb\nc", "a\nb\nd") == "a\nb\nd\nc"
    sectioned = BASE + "\n## New\n- agent\n"
    assert merge3(BASE, sectioned, BASE + "- human\n") == BASE + "- human\n\n## New\n- agent\n"


def test_an_append_that_holds_the_other_sides_append_is_taken_alone() -> None:
    both = BASE + "- human\n- agent\n"
    assert merge3(BASE, both, BASE + "- human\n") == both
    assert merge3(BASE, BASE + "- agent\n", BASE + "- agent\n- human\n") == (
        BASE + "- agent\n- human\n"
    )


def test_blank_lines_appended_on_both_sides_keep_the_longer_run() -> None:
    # Found by Hypothesis: with no entry on either side, both blocks stripped to nothing,
    # and the merge lost the base's own blank lines too ("a\n", and "" for a blank file).
    assert merge3("a\n\n", "a\n\n\n", "a\n\n\n\n") == "a\n\n\n\n"
    assert merge3("a\n\n", "a\n\n\n\n", "a\n\n\n") == "a\n\n\n\n"
    assert merge3("\n", "\n\n", "\n\n\n") == "\n\n\n"


def test_an_append_next_to_an_edit_of_the_last_line_still_conflicts() -> None:
    edited_last = BASE.replace("- d\n", "- D\n")
    assert merge3(BASE, edited_last + "- agent\n", BASE + "- human\n") is None
    assert merge3(BASE, BASE + "- agent\n", edited_last) is None


def test_identical_change_on_both_sides_is_clean() -> None:
    both = BASE.replace("- c", "- c!")
    assert merge3(BASE, both, both) == both
    # ...also when one side made more changes elsewhere.
    more = both.replace("- a\n", "- a+\n")
    assert merge3(BASE, more, both) == more


def test_unchanged_side_takes_the_other() -> None:
    edited = BASE + "tail"
    assert merge3(BASE, BASE, edited) == edited
    assert merge3(BASE, edited, BASE) == edited


def test_missing_final_newline_does_not_conflict_with_the_line_before() -> None:
    base = "a\nb"
    assert merge3(base, "A\nb", "a\nb\nc") == "A\nb\nc"


def test_deletion_and_distant_edit_merge() -> None:
    ours = BASE.replace("- b\n", "")
    theirs = BASE.replace("- d\n", "- D\n")
    assert merge3(BASE, ours, theirs) == BASE.replace("- b\n", "").replace("- d\n", "- D\n")


# A file with accented words: NFD spells each of their lines differently.
ACCENTED = "# Memory\n\n## Notes\n- Café au lait\n- line three\n- Amélie\n- last\n"
AGENT_APPEND = ACCENTED + "- agent appended\n"
HUMAN_EDIT = ACCENTED.replace("line three", "line three (human)")
BOTH_EDITS = HUMAN_EDIT + "- agent appended\n"


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def crlf(text: str) -> str:
    return text.replace("\n", "\r\n")


@pytest.mark.parametrize(
    "resave", [crlf, nfd, lambda t: crlf(nfd(t))], ids=["crlf", "nfd", "crlf-nfd"]
)
def test_a_side_resaved_with_crlf_or_nfd_still_merges_in_the_bases_form(
    resave: Callable[[str], str],
) -> None:
    # Re-saving changed every line (or every accented one, both next to the human's edit)
    # without changing a word: the exact merge conflicts, the merge in the base's form
    # keeps both edits, in the base's LF and NFC.
    assert merge3(ACCENTED, resave(AGENT_APPEND), HUMAN_EDIT) == BOTH_EDITS
    # The same from the other side (the page's merge: the stored copy is the agent's).
    assert merge3(ACCENTED, HUMAN_EDIT, resave(AGENT_APPEND)) == BOTH_EDITS


def test_a_crlf_base_keeps_its_crlf() -> None:
    base = crlf(ACCENTED)
    assert merge3(base, AGENT_APPEND, crlf(HUMAN_EDIT)) == crlf(BOTH_EDITS)


def test_the_retry_never_merges_a_real_conflict() -> None:
    ours = crlf(ACCENTED.replace("line three", "line three (agent)"))
    assert merge3(ACCENTED, ours, HUMAN_EDIT) is None
    assert merge3(ACCENTED, nfd(ours), HUMAN_EDIT) is None


def test_a_base_with_no_single_form_is_merged_exactly_only() -> None:
    # Mixed line breaks have no style to follow; an NFD base is not made NFC.
    mixed = ACCENTED.replace("- last\n", "- last\r\n")
    assert merge3(mixed, crlf(AGENT_APPEND), HUMAN_EDIT) is None
    decomposed = nfd(ACCENTED)
    # The NFC side's re-saved lines and the human's edit are neighbouring lines each side
    # replaced: merged as they are, each side's lines in its own form, never made NFC.
    assert merge3(decomposed, AGENT_APPEND, nfd(HUMAN_EDIT)) == BOTH_EDITS
    assert merge3(decomposed, nfd(AGENT_APPEND), nfd(HUMAN_EDIT)) == nfd(BOTH_EDITS)


def test_a_blank_base_merges_disjoint_edits_in_place_before_the_append_rule() -> None:
    # Found by Hypothesis. Every line of a blank base is after its last non-blank line, so
    # the append rule took the exact merge's conflict (the CR LF side changed every line)
    # for two appends: theirs then ours, in both line breaks. Merged in the base's form,
    # the two edits are on lines apart and stay where they were made.
    assert merge3("\n\n", "OURS\r\n\r\n", "\n\nTHEIRS") == "OURS\n\nTHEIRS"
    # Two real appends to a blank file are still both kept, the stored side's first.
    assert merge3("\n", "- agent\n", "- human\n") == "- human\n- agent\n"


def test_a_clean_exact_merge_keeps_each_sides_form() -> None:
    # The retry only runs on a conflict: a CRLF side merged cleanly stays as it is.
    ours = ACCENTED.replace("- Café au lait\n", "- Café au lait\r\n")
    theirs = ACCENTED.replace("- last", "- last (human)")
    assert merge3(ACCENTED, ours, theirs) == ours.replace("- last", "- last (human)")


# And short free-form Markdown lines (``md_lines``): short, so that they repeat, as the
# blank and "- …" lines of a memory file do. Without a CR: a line that ends in one ends in
# a CR LF line break, which the retry in the base's form rewrites (module doc), so its line
# is no longer the side's as written.
lines = st.lists(
    with_free(
        st.sampled_from(["a", "b", "c", "", "- x"]), free_lines(cr=False, max_size=2, lead=False)
    ),
    max_size=8,
)


@given(lines, lines, lines)
def test_appends_to_both_sides_lose_no_line(
    base: list[str], ours: list[str], theirs: list[str]
) -> None:
    b = "\n".join(base) + "\n"
    merged = merge3(b, b + "\n".join(ours), b + "\n".join(theirs))
    assert merged is not None and merged.startswith(b)
    added = merged[len(b) :].split("\n")
    for block in (ours, theirs):
        while block and not block[-1]:  # blank lines at the very end are not an entry
            block = block[:-1]
        assert any(added[i : i + len(block)] == block for i in range(len(added) + 1))


@given(lines, lines)
def test_merging_with_an_unchanged_side_is_exact(base: list[str], other: list[str]) -> None:
    b, o = "\n".join(base), "\n".join(other)
    assert merge3(b, o, b) == o
    assert merge3(b, b, o) == o


@given(lines, st.integers(0, 7), st.integers(0, 7))
@example(["c", "c", "c"], 0, 2)  # repeated lines once aligned one off and conflicted
def test_two_disjoint_single_line_edits_contain_both(base: list[str], i: int, j: int) -> None:
    if len(base) < 2:
        return
    i, j = sorted((i % len(base), j % len(base)))
    if j == i:  # the same line changed differently conflicts by design
        return
    ours = [*base]
    ours[i] = "OURS"
    theirs = [*base]
    theirs[j] = "THEIRS"
    merged = merge3("\n".join(base), "\n".join(ours), "\n".join(theirs))
    expected = [*base]
    expected[i], expected[j] = "OURS", "THEIRS"
    assert merged == "\n".join(expected)


def test_repetitive_text_merges_in_bounded_time() -> None:
    """difflib's matcher took 35 s on 2,000 alternating one-letter lines (4 KB): anyone who
    could write a file, or post to the page's merge route, could stall a worker thread."""
    n = 30_000
    base = "\n".join("a" if i % 2 else "b" for i in range(n))
    ours = "\n".join("a" if i % 3 else "b" for i in range(n))
    theirs = "\n".join("b" if i % 2 else "a" for i in range(n))
    started = time.monotonic()
    merge3(base, ours, theirs)  # merged or a conflict: a coarser diff may give either
    assert time.monotonic() - started < 5.0


def test_more_distinct_lines_than_characters_is_one_coarse_region(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each distinct line is coded as one character: past Unicode's ~1.1 M a merge raised
    ValueError (chr() out of range), which turned a stored frontend write into a 400."""
    huge = "\n".join(str(i) for i in range(1_120_000))
    assert merge3("a\nb", huge, "a\nb\nx") is None  # both changed the one region
    assert merge3("a\nb", huge, "a\nb") == huge
    # The same fallback, at a small limit: a coarse region, never a wrong merge.
    base, ours, theirs = "a\nb\nc\nd\ne\nf\ng", "A\nb\nc\nd\ne\nf\nG", "a\nb\nc\nD\ne\nf\ng"
    assert merge3(base, ours, theirs) == "A\nb\nc\nD\ne\nf\nG"
    monkeypatch.setattr(merge, "MAX_DISTINCT_LINES", 3)
    assert merge3(base, ours, theirs) is None  # ours is one region now: it holds d
    assert merge3(base, ours, base) == ours


# Free-form lines without a CR: one in the base mixes its line breaks, and a base with no
# single form is merged exactly only (module doc), so a re-saved side conflicts.
words = st.lists(
    with_free(
        st.sampled_from(["a", "Café", "- Amélie", "", "- x", "naïve"]),
        free_lines(cr=False, max_size=2, lead=False),
    ),
    min_size=2,
    max_size=8,
)


@given(words, st.integers(0, 7), st.integers(0, 7), st.sampled_from([crlf, nfd]))
def test_two_disjoint_edits_merge_whatever_form_one_side_was_saved_in(
    base: list[str], i: int, j: int, resave: Callable[[str], str]
) -> None:
    i, j = sorted((i % len(base), j % len(base)))
    if j == i:  # the same line changed differently conflicts by design
        return
    ours, theirs, expected = [*base], [*base], [*base]
    ours[i] = expected[i] = "OURS"
    theirs[j] = expected[j] = "THEIRS"
    merged = merge3("\n".join(base), resave("\n".join(ours)), "\n".join(theirs))
    # Lines the exact merge could take from the re-saved side keep its form; the words are
    # both sides', whichever merge found them.
    assert merged is not None
    assert unicodedata.normalize("NFC", merged.replace("\r\n", "\n")) == "\n".join(expected)
