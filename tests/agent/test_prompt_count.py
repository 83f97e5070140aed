"""The prompt's cut counts memstrata's own token estimate by parts, each counted once.

``count_tokens`` adds over line breaks (``agent.prompt_count``): checked here on alphabets
made of what its patterns look at around a line break. With it the cut sums the counts of
a file's pieces instead of counting the whole prompt again per cut tried, and gives the
prompt the generic path gives; any other counter takes the generic path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from memstrata.agent.prompt import PromptResult, build_system_prompt
from memstrata.agent.prompt_body import MemoryBody
from memstrata.agent.prompt_count import LineCounts, MemoryCounts, adds_over_lines, likely_cut
from memstrata.retrieval.tokenize import count_tokens

from .test_prompt_cut_once import FENCED, REPRESENTATIVE

# Around a line break the counter's patterns read: spaces and tabs (the lookaheads of
# ``_SPACES``), digits (a space before one costs 1), letter runs cut at 4, 2 or 3, other
# whitespace (CR, U+2028, NBSP, form feed), combining marks and joiners (surcharged, never
# pieces of their own), variation selectors, emoji, CJK, the half-token scripts and one
# code point from every surcharge class; and the line break itself.
_ADVERSARIAL = (
    " \t\r\n\x0b\x0c\u0085\u00a0\u2028\u2029\u3000"
    "0123456789aZ_-.<>`~#*"
    "éßжÀ\u0301\u0308\u200d\u200c\ufe0f\ufe0e"
    "中文ｱ가\U00020000"
    "😀👍\U0001f3fb→\u2b50"
    "क्षংமൽਪઅతಕසລཀမაＡ１"
    "ଓሀԱ\u0710\u0780ᚠ"
    "αאبไ"
    "\ud7ff\U000e0001"
)
_TEXT = st.text(alphabet=_ADVERSARIAL, max_size=40)
_ANY_TEXT = st.text(max_size=40)  # every code point Hypothesis draws


def _adds(a: str, b: str) -> None:
    assert count_tokens(f"{a}\n{b}") == count_tokens(a) + count_tokens("\n") + count_tokens(b)
    assert count_tokens("\n") == 0


@pytest.mark.parametrize("run_seed", [0, 1, 20261205])
def test_count_tokens_adds_over_a_line_break(run_seed: int) -> None:
    @seed(run_seed)
    @settings(max_examples=5000, deadline=None)
    @given(_TEXT, _TEXT)
    def adversarial(a: str, b: str) -> None:
        _adds(a, b)

    @seed(run_seed)
    @settings(max_examples=1000, deadline=None)
    @given(_ANY_TEXT, _ANY_TEXT)
    def anything(a: str, b: str) -> None:
        _adds(a, b)

    adversarial()
    anything()


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x  ", "1"),  # spaces at a line's end, a digit after the break
        ("x\t", "\ty"),
        ("x \r", " 1"),  # CR then the break: a Windows line end
        ("abc", "de"),  # a letter run the break cuts: 1 + 1, not ceil(5 / 4)
        ("é", "é"),  # half-token run
        ("क", "\u094d\u0937"),  # a virama starting a line
        ("x", "\u0301y"),  # a combining mark starting a line
        ("👨", "\u200d👩"),  # a joiner starting a line
        ("x\u2028", "\u2028y"),
        ("", ""),
    ],
)
def test_the_edges_of_a_line_add(a: str, b: str) -> None:
    _adds(a, b)


@pytest.mark.parametrize("text", REPRESENTATIVE)
def test_every_cut_of_memory_counts_the_sum_of_its_pieces(text: str) -> None:
    body = MemoryBody(text)
    by_piece = MemoryCounts.by_piece(body, count_tokens)
    by_line = LineCounts(body.shown(0), count_tokens).memory(body)
    for dropped in range(len(body.order)):
        assert by_piece.shown(dropped) == by_line.shown(dropped)
        assert by_piece.shown(dropped) == count_tokens(body.shown(dropped))


def _wrapped(text: str) -> int:
    """``count_tokens`` behind another function: the same counts, by the generic path."""
    return count_tokens(text)


def _build(
    count: Callable[[str], int], token_limit: int, memory: str, user: str = ""
) -> PromptResult:
    return build_system_prompt(
        agents_md="Rules.\n  Be brief.",
        soul="",
        user=user,
        memory=memory,
        token_limit=token_limit,
        count=count,
    )


def test_only_count_tokens_itself_adds_over_lines() -> None:
    assert adds_over_lines(count_tokens)
    assert not adds_over_lines(_wrapped)
    assert not adds_over_lines(len)


# Chinese counts a token a character: cut while shorter than four characters a token of
# the budget, so counted whole first and then by piece.
_CJK = "## 人物\n" + "\n".join(f"- 小王{i}：喜欢简短的回答，不要表情😀" for i in range(60))
_USER = "\n".join(f"- key {i}: value  {i}\r" for i in range(40)) + "\n名字：小王 😀\u200d"


@pytest.mark.parametrize("memory", [*REPRESENTATIVE, _CJK, "- one entry only " * 50])
@pytest.mark.parametrize("token_limit", [1, 60, 200, 500, 1000, 3000, 10_000, 100_000])
def test_parts_and_whole_give_the_same_prompt(memory: str, token_limit: int) -> None:
    # Newest entries, the end of the newest, a single entry cut from the end, USER.md cut
    # by prefix, sections dropped and everything whole, across these limits.
    for user in ("", _USER):
        assert _build(count_tokens, token_limit, memory, user) == _build(
            _wrapped, token_limit, memory, user
        )


@contextmanager
def _counted() -> Iterator[list[int]]:
    """The length of each text ``count_tokens`` is called on meanwhile (a profile hook,
    which watches calls without replacing the function the cut recognises)."""
    lengths: list[int] = []
    code = count_tokens.__code__

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code is code:
            lengths.append(len(frame.f_locals["text"]))

    sys.setprofile(hook)
    try:
        yield lengths
    finally:
        sys.setprofile(None)


def test_a_large_file_is_counted_once_per_build() -> None:
    large = FENCED * 8  # ~120 KB, 480 entries: about nine cuts tried
    with _counted() as lengths:
        result = _build(count_tokens, 16_000, large)
    assert result.truncated == ("MEMORY.md",)
    # Its lines are counted once, for the fit check and every cut; each cut tried counts
    # only its marker, the chosen one its body for the marker. Counting the prompt per
    # cut tried read the file's length four times over.
    assert sum(lengths) < 1.2 * len(large)
    assert result == _build(_wrapped, 16_000, large)


def test_a_file_cut_though_short_is_counted_whole_then_by_piece() -> None:
    memory = _CJK
    assert not likely_cut(memory, 450)
    with _counted() as lengths:
        result = _build(count_tokens, 3000, memory)
    assert result.truncated == ("MEMORY.md",)
    # The body whole once (the fit check and the marker's total); then pieces, markers and
    # the section chosen (under half the file), where the prompt was counted per cut tried.
    assert [n for n in lengths if n > len(memory) // 2] == [len(memory)]
    assert result == _build(_wrapped, 3000, memory)


def _line_breaks_cost(text: str) -> int:
    """A counter that does not add over line breaks: each costs a token, as a tokenizer
    that spends one on every ``\\n`` would."""
    return count_tokens(text) + text.count("\n")


@pytest.mark.parametrize("token_limit", [1000, 3000, 8000])
def test_a_counter_that_does_not_add_is_counted_whole(token_limit: int) -> None:
    result = _build(_line_breaks_cost, token_limit, FENCED, _USER)
    assert result.truncated
    # Summed by parts, its count would leave out the breaks between them and overrun.
    assert result.tokens == _line_breaks_cost(result.text) <= result.budget


@pytest.mark.parametrize("fraction", [0.2, 0.9])
def test_a_one_line_file_is_counted_about_once_per_build(fraction: float) -> None:
    line = "Some words of prose here, and more. " * 7000  # 252 KB on one line
    token_limit = int(count_tokens(line) * fraction / 0.15)
    with _counted() as lengths:
        result = build_system_prompt(
            agents_md="", soul=line, user="", memory="", token_limit=token_limit, count=count_tokens
        )
    assert result.truncated == ("SOUL.md",)
    # The line once, in stretches between checkpoints, for the fit and every prefix tried,
    # each counted from the last checkpoint before its end (``line_prefix``); then the
    # section kept, for the prompt's count. Each prefix tried counted from the line's start
    # read the line's length 5 (a fifth kept) to 18 times (nine tenths) over.
    assert sum(lengths) < (1.1 + fraction) * len(line), sum(lengths) / len(line)
    assert result == _build_soul(_wrapped, token_limit, line)


def _build_soul(count: Callable[[str], int], token_limit: int, soul: str) -> PromptResult:
    return build_system_prompt(
        agents_md="", soul=soul, user="", memory="", token_limit=token_limit, count=count
    )


@pytest.mark.parametrize("fraction", [0.2, 0.9])
def test_a_long_line_cut_inside_an_open_fence_stays_within_the_budget(fraction: float) -> None:
    """The cut closes the fence after the part of the line it keeps: that closing line is
    counted with the part, from the line's checkpoints, like the rest of the prompt."""
    soul = "Notes:\n```\n" + "some words of code here; " * 800  # 20 KB on one line
    token_limit = int(count_tokens(soul) * fraction / 0.15)
    result = _build_soul(count_tokens, token_limit, soul)
    assert result.truncated == ("SOUL.md",) and result.text.count("```") == 2
    assert result.tokens == count_tokens(result.text) <= result.budget
    assert result == _build_soul(_wrapped, token_limit, soul)


def test_line_counts_count_every_line_with_the_counter_given() -> None:
    """Only ``count_tokens``' long lines are counted from its checkpoints; another counter
    that adds over line breaks counts them itself."""

    def words(text: str) -> int:
        return len(text.split())

    body = "short line\n" + "eight ch " * 2000 + "\nend"  # an 18 KB line
    lines = LineCounts(body, words)
    assert lines.lines == [2, 4000, 1] and lines.whole == words(body)
