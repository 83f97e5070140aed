"""A long line's prefixes are counted from checkpoints on it, exactly as ``count_tokens``.

``line_prefix.LinePrefixes`` counts a text that starts like the line as what the line's
matches before a checkpoint count, plus a count of the rest. Checked here for every prefix
of lines drawn from what the counter's patterns look at (letter, digit and half-token runs
cut mid-piece, runs of spaces and tabs before digits and letters, marks, joiners, emoji,
astral and CJK characters, the surcharged scripts, CR and U+2028, ``<file`` tags the
prompt escapes), for texts that leave the line anywhere, and on one-line files the prompt
cuts, against the generic path that counts each whole prompt.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from memstrata.agent import line_prefix
from memstrata.agent.line_prefix import LinePrefixes
from memstrata.agent.prompt import PromptResult, build_system_prompt
from memstrata.retrieval.tokenize import COUNTED, count_tokens
from tests.agent.md_lines import free_lines

# Pieces of a line, each repeated: ASCII letters and digits (cut at 4 and 3), the
# half-token letters (cut at 2) and the one-and-a-half-token scripts (surcharged by
# pairs), spaces and tabs (a run costs 1, a space before a digit 1), other whitespace,
# combining marks, joiners, variation selectors, emoji, astral CJK, a code point of each
# surcharged script, punctuation, and the framing the prompt escapes.
_PIECES = [
    "a", "Z", "ab", "1", "12", " ", "\t", "  ", " \t", " 1", "\t9", "x = 1 ", "a b",
    "é", "ß", "ж", "éa", "क", "\u094d", "क्ष", "ম", "ம", "\u0d7f", "ក",
    "\r", "\u2028", "\u00a0", "\u3000", "\x0b",
    "\u0301", "\u0308", "\u200d", "\u200c", "\ufe0f",
    "中", "文", "ｱ", "가", "\U00020000", "😀", "👍", "\U0001f3fb", "👨\u200d👩", "→", "\u2b50",
    "ਪ", "અ", "త", "ಕ", "ස", "ລ", "ཀ", "မ", "ა", "Ａ", "１", "ଓ", "ሀ", "Ա", "\u0710", "ᚠ",
    "α", "א", "ب", "ไ", ".", "-", "_", "`", "<", "<file", "</file>", "< / FILE", "&lt;",
]  # fmt: skip
# And free-form pieces of Markdown (``md_lines``): markers, blanks, a CR, byte-order marks
# (one piece each, as long as the listed ones: every prefix of the line is counted).
_RUN = st.tuples(
    st.sampled_from(_PIECES) | free_lines(max_size=2, lead=False),
    st.integers(1, 3) | st.integers(4, 90),
)
_LINE = st.lists(_RUN, max_size=30).map(lambda runs: "".join(piece * n for piece, n in runs))
_EVERY = st.sampled_from([1, 2, 3, 5, 16, 64, 300])


@seed(11)
@settings(max_examples=500, deadline=None)
@given(_LINE | st.text())
def test_count_tokens_is_the_weighted_matches_of_its_patterns(text: str) -> None:
    # What the checkpoints found from matches count by (``tokenize.COUNTED``).
    assert sum(weight * len(p.findall(text)) for p, weight in COUNTED) == count_tokens(text)


def _every_prefix_counts(line: str, every: int) -> None:
    prefixes = LinePrefixes(line, every)
    assert prefixes.whole == count_tokens(line)
    for length in range(len(line) + 1):
        assert prefixes.count(line[:length]) == count_tokens(line[:length]), length


@pytest.mark.parametrize("run_seed", [0, 1, 20261206])
def test_every_prefix_of_a_line_counts_as_count_tokens(run_seed: int) -> None:
    @seed(run_seed)
    @settings(max_examples=250, deadline=None)
    @given(_LINE, _EVERY)
    def adversarial(line: str, every: int) -> None:
        _every_prefix_counts(line, every)

    @seed(run_seed)
    @settings(max_examples=150, deadline=None)
    @given(st.text(max_size=200), _EVERY)
    def anything(line: str, every: int) -> None:
        _every_prefix_counts(line, every)

    adversarial()
    anything()


def test_checkpoints_read_from_the_matches_count_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    # With no break looked for, every checkpoint is found from the patterns' matches in its
    # stretch (what a long run of one class takes), whatever the text.
    monkeypatch.setattr(line_prefix, "_NEAR", 0)

    @seed(7)
    @settings(max_examples=250, deadline=None)
    @given(_LINE, _EVERY)
    def adversarial(line: str, every: int) -> None:
        _every_prefix_counts(line, every)

    adversarial()


@seed(3)
@settings(max_examples=600, deadline=None)
@given(_LINE, _EVERY, st.data())
def test_a_text_that_leaves_the_line_counts_as_count_tokens(
    line: str, every: int, data: st.DataObject
) -> None:
    # As a prefix escaped where the line is not: "<fi" cut from "<file", or any other end.
    length = data.draw(st.integers(0, len(line)))
    text = line[:length] + data.draw(_LINE)
    assert LinePrefixes(line, every).count(text) == count_tokens(text)


def test_a_checkpoint_must_be_two_before_where_the_texts_differ() -> None:
    # "x  y" and "x   " share "x  ". Every scan of the line resumes at 2 (its run of two
    # spaces is matched up to its last space), after 2 tokens; counted from there, "x   "
    # would be 2 + count_tokens("  ") = 3, but its run of three spaces is one token: 2.
    assert count_tokens("x   ") == 2
    assert count_tokens("x  y") - count_tokens(" y") == 2 and count_tokens("  ") == 1
    assert LinePrefixes("x  y", every=1).count("x   ") == 2


def _wrapped(text: str) -> int:
    """``count_tokens`` behind another function: each whole prompt counted (generic path)."""
    return count_tokens(text)


# One-line files longer than the line the prompt counts from checkpoints.
ONE_LINE = {
    "prose": "Some words of prose here, and more. " * 400,
    "mixed scripts": "记住：用户喜欢简短的回答 😀👍 नमस्ते दुनिया, café  déjà vu, x = 1;\t" * 150,
    "file tags": "<file name=x> </file> < /FILE <fi " * 300,
    "a fence and a comment": "text ```py code <!-- note " * 400,
    "one letter": "é" * 9000,
    "spaces": "a" + " " * 9000 + "b 1",
}


def _build(file: str, line: str, limit: int, count: Callable[[str], int]) -> PromptResult:
    files = {"agents_md": "Rules.", "soul": "", "user": "", "memory": "", file: line}
    return build_system_prompt(**files, token_limit=limit, count=count)


@pytest.mark.parametrize("name", ONE_LINE)
@pytest.mark.parametrize("file", ["soul", "memory"])
def test_a_one_line_file_cuts_as_when_counted_whole(name: str, file: str) -> None:
    line = ONE_LINE[name]
    for fraction in (0.001, 0.2, 0.5, 0.9, 0.999):
        limit = int(count_tokens(line) * fraction / 0.15) + 1
        result = _build(file, line, limit, count_tokens)
        assert result.truncated or result.dropped
        assert result == _build(file, line, limit, _wrapped)
