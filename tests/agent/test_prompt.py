"""System-prompt builder: exact layouts, priority, truncation and the budget invariant."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from memstrata.agent.prompt import (
    MAX_TOKEN_LIMIT,
    MIN_TOKEN_LIMIT,
    PromptResult,
    build_system_prompt,
    check_token_limit,
    largest_fitting,
    prompt_budget,
)
from memstrata.agent.prompt_body import close_fence, shown_content
from memstrata.agent.prompt_room import floor_tokens
from memstrata.errors import InvalidContentError
from memstrata.mcp.server import prompt_token_limit
from memstrata.retrieval.tokenize import count_tokens
from tests.agent.md_lines import free_lines

_WORD_OR_HANZI = re.compile(r"[\u4e00-\u9fff]|[^\s\u4e00-\u9fff]+")


def words(text: str) -> int:
    """Test counter: one token per whitespace-separated word and per Chinese character."""
    return len(_WORD_OR_HANZI.findall(text))


def real_counter() -> Callable[[str], int] | None:
    try:
        from memstrata.retrieval.tokenize import count_tokens
    except ImportError:
        return None
    return count_tokens


COUNTERS = [words] + ([c] if (c := real_counter()) else [])


def section(name: str, body: str) -> str:
    return f'<file name="{name}">\n{body}\n</file>'


def marker(name: str, shown: int, total: int, left_out: str = "the end") -> str:
    rest = (
        "for the rest use memory_search or read the whole file"
        if name in ("USER.md", "MEMORY.md")
        else "read the whole file for the rest"
    )
    return f"…[truncated: {name}, {left_out} left out, {shown} of {total} tokens shown; {rest}]"


def build(
    agents: str = "",
    soul: str = "",
    user: str = "",
    memory: str = "",
    *,
    limit: int,
    count: Callable[[str], int] = words,
    ratio: float = 0.15,
    floor_share: float = 0.0,
) -> PromptResult:
    return build_system_prompt(
        agents_md=agents,
        soul=soul,
        user=user,
        memory=memory,
        token_limit=limit,
        count=count,
        ratio=ratio,
        floor_share=floor_share,
    )


def test_everything_fits() -> None:
    result = build("Rules.", "Be kind.", "Name: Ann", "Likes tea.", limit=1000)
    assert result == PromptResult(
        text='<file name="AGENTS.md">\nRules.\n</file>\n\n'
        '<file name="SOUL.md">\nBe kind.\n</file>\n\n'
        '<file name="USER.md">\nName: Ann\n</file>\n\n'
        '<file name="MEMORY.md">\nLikes tea.\n</file>',
        tokens=19,
        budget=150,
        truncated=(),
        dropped=(),
    )


def test_empty_sections_are_left_out_and_content_is_stripped() -> None:
    result = build("\n  Rules.\n\n", "", " \n\t", "Likes tea.", limit=1000)
    assert result.text == section("AGENTS.md", "Rules.") + "\n\n" + section(
        "MEMORY.md", "Likes tea."
    )
    assert (result.truncated, result.dropped) == ((), ())


def test_user_truncated_at_a_line_and_memory_dropped() -> None:
    user = "name Ann\nlikes 绿茶 and jazz\n" + " ".join(f"w{i}" for i in range(30))
    result = build(
        "Be brief.",
        "",
        user,
        "met 2024",
        # budget 47: AGENTS 5 + header 3 + marker 21 + 2 words (a line is 5) + the note 16
        limit=314,
    )
    assert result == PromptResult(
        text='<file name="AGENTS.md">\nBe brief.\n</file>\n\n'
        '<file name="USER.md">\nname Ann\n'
        "…[truncated: USER.md, the end left out, 2 of 37 tokens shown; "
        "for the rest use memory_search or read the whole file]\n</file>\n\n"
        "[left out for lack of room: MEMORY.md (2 tokens); "
        "use memory_search or read the whole file]",
        tokens=47,
        budget=47,
        truncated=("USER.md",),
        dropped=("MEMORY.md",),
    )


def test_cut_moves_back_to_a_close_line_break() -> None:
    user = "l1a l1b l1c\n" + " ".join(f"w{i}" for i in range(30))
    result = build(user=user, limit=194)  # budget 29: room for 5 words, cut back to 3
    assert result.text == section("USER.md", "l1a l1b l1c\n" + marker("USER.md", 3, 33))
    assert result.tokens == 27  # header 3 + marker 21 + 3 words


def test_cut_mid_line_when_the_last_line_break_is_far_back() -> None:
    user = "intro\n" + " ".join(f"w{i}" for i in range(40))
    result = build(user=user, limit=194)  # budget 29: header 3 + marker 21 + 5 words
    body = "intro\nw0 w1 w2 w3\n" + marker("USER.md", 5, 41)
    assert result.text == section("USER.md", body)
    assert result.tokens == 29


def test_priority_agents_over_soul_over_user_over_memory() -> None:
    agents, soul, user = "a1 a2", "s1 s2", "u1 u2"
    memory = " ".join(f"m{i}" for i in range(30))
    # Each small whole section costs 5 tokens; a marker at least 18; the note on MEMORY.md
    # left out 16.
    assert build(agents, soul, user, "m1 m2", limit=200).truncated == ()
    result = build(agents, soul, user, memory, limit=207)  # budget 31
    assert result.text == "\n\n".join(
        [
            section("AGENTS.md", agents),
            section("SOUL.md", soul),
            section("USER.md", user),
            "[left out for lack of room: MEMORY.md (30 tokens); "
            "use memory_search or read the whole file]",
        ]
    )
    assert (result.tokens, result.truncated, result.dropped) == (31, (), ("MEMORY.md",))
    # Budget 30: USER cannot show a word beside the note that now names it too.
    result = build(agents, soul, user, memory, limit=200)
    assert result.text == "\n\n".join(
        [
            section("AGENTS.md", agents),
            section("SOUL.md", soul),
            "[left out for lack of room: USER.md (2 tokens), MEMORY.md (30 tokens); "
            "use memory_search or read the files]",
        ]
    )
    assert (result.truncated, result.dropped) == ((), ("USER.md", "MEMORY.md"))


def test_a_smaller_lower_section_never_jumps_the_queue() -> None:
    result = build("a1", "s " * 500, "u1", "m1", limit=400)  # budget 60, no floors
    assert result.truncated == ("SOUL.md",)
    assert result.dropped == ("USER.md", "MEMORY.md")
    assert "u1" not in result.text and "m1" not in result.text
    assert result.text.endswith(
        "[left out for lack of room: USER.md (1 token), MEMORY.md (1 token); "
        "use memory_search or read the files]"
    )


def test_even_agents_is_truncated_when_the_budget_is_tiny() -> None:
    agents = " ".join(f"rule{i}" for i in range(100))
    # budget 39: header 3 + marker 18 + 5 words + the note on SOUL.md 13
    result = build(agents, "soul", limit=260)
    assert result.text == (
        section("AGENTS.md", "rule0 rule1 rule2 rule3 rule4\n" + marker("AGENTS.md", 5, 100))
        + "\n\n[left out for lack of room: SOUL.md (1 token); read the whole file]"
    )
    assert result.truncated == ("AGENTS.md",)
    assert result.dropped == ("SOUL.md",)


@pytest.mark.parametrize("limit", [1, 5, 10, 33])
def test_tiny_budgets_never_raise(limit: int) -> None:
    result = build("rules " * 50, "soul " * 50, "用户" * 50, "memory " * 50, limit=limit)
    # Room for no file, nor for the note in brief (10 tokens), up to a budget of 4.
    assert result.text == ""
    assert result.tokens == 0
    assert result.dropped == ("AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md")


def test_budget_is_floor_of_ratio_times_limit() -> None:
    assert prompt_budget(20) == 3  # 0.15 × 20 as floats is 2.9999…
    assert prompt_budget(100, 0.29) == 29
    assert prompt_budget(199) == 29
    assert prompt_budget(1) == 0
    assert prompt_budget(1000, 1.0) == 1000
    assert build(limit=1000, ratio=0.5).budget == 500
    for bad_limit, bad_ratio in [
        (-1, 0.15),
        (0, 0.15),
        (100, 1.5),
        (100, -0.1),
        (100, float("nan")),
    ]:
        with pytest.raises(ValueError):
            prompt_budget(bad_limit, bad_ratio)


@pytest.mark.parametrize("count", COUNTERS, ids=lambda c: c.__name__)
def test_binary_search_prefix_is_maximal(count: Callable[[str], int]) -> None:
    # One long line, so the line-break preference cannot shorten the cut.
    user = " ".join(f"word{i} 记忆{i}" for i in range(400))
    agents = "Follow the rules."
    result = build(agents, "", user, "", limit=2000, count=count)
    assert result.truncated == ("USER.md",)
    assert result.tokens == count(result.text) <= result.budget
    shown = result.text.split('<file name="USER.md">\n', 1)[1].split("\n…[truncated", 1)[0]
    assert user.startswith(shown)
    total = count(user)
    assert result.text.endswith(marker("USER.md", count(shown), total) + "\n</file>")

    # The next prefix that renders differently (one more visible character) must not fit.
    longer = len(shown) + 1
    while not user[len(shown) : longer].strip():
        longer += 1
    bigger = user[:longer].rstrip()
    over = section("AGENTS.md", agents) + "\n\n"
    over += section("USER.md", bigger + "\n" + marker("USER.md", count(bigger), total))
    assert count(over) > result.budget


def test_binary_search_uses_logarithmically_many_counts() -> None:
    calls = 0

    def counting(text: str) -> int:
        nonlocal calls
        calls += 1
        return words(text)

    build(user="x " * 50_000, limit=20_000, count=counting)
    # 17 halvings of 100,000 positions, two counts each, plus a handful of fixed calls.
    assert calls <= 2 * 17 + 8


def test_largest_fitting() -> None:
    assert largest_fitting(10, lambda k: k <= 7) == 7
    assert largest_fitting(10, lambda k: True) == 10
    assert largest_fitting(10, lambda k: False) == 0
    assert largest_fitting(0, lambda k: True) == 0
    assert largest_fitting(1, lambda k: k <= 1) == 1


def test_never_exceeds_budget_with_a_non_monotone_counter() -> None:
    # A counter that is cheap for even lengths and dear for odd ones breaks the binary
    # search's assumption; the result must still respect the budget.
    def odd(text: str) -> int:
        return words(text) + 50 * (len(text) % 2)

    for limit in range(1, 400, 7):
        result = build("a b c", "s " * 40, "u " * 40, "m", limit=limit, count=odd)
        assert result.tokens == odd(result.text) <= result.budget


_ALPHABET = st.sampled_from(
    list("abcxyz ABC 0123456789 \n\n\t.,:;!?-#*/<>\"'")
    + list("记忆用户你好世界的一")
    + ["👋", "🏽", "…", "\u200d"]
)
# And files of free-form Markdown lines (``md_lines``): fences, comments, quotes, CR LF
# and byte-order marks the cut must close or strip.
_MARKDOWN = st.lists(free_lines(), max_size=60).map("\n".join)
_CONTENT = st.text(alphabet=_ALPHABET, max_size=2500) | _MARKDOWN


@settings(max_examples=150, deadline=None)
@given(
    agents=_CONTENT,
    soul=_CONTENT,
    user=_CONTENT,
    memory=_CONTENT,
    limit=st.integers(min_value=1, max_value=20_000),
    ratio=st.sampled_from([0.15, 0.01, 0.5, 1.0]),
    counter=st.sampled_from(COUNTERS),
    # The spec's strict order (the default), the share measured, and the largest allowed.
    share=st.sampled_from([0.0, 0.125, 0.5]),
)
def test_budget_is_never_exceeded(
    agents: str,
    soul: str,
    user: str,
    memory: str,
    limit: int,
    ratio: float,
    counter: Callable[[str], int],
    share: float,
) -> None:
    result = build(
        agents, soul, user, memory, limit=limit, count=counter, ratio=ratio, floor_share=share
    )
    assert result.tokens == counter(result.text) <= result.budget == prompt_budget(limit, ratio)

    names = ["AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md"]
    # A file's text is its ``shown_content``: without blanks and byte-order marks around it.
    shown_texts = [shown_content(c) for c in (agents, soul, user, memory)]
    present = [n for n, c in zip(names, shown_texts, strict=True) if c]
    shown = [n for n in present if f'<file name="{n}">' in result.text]
    # Every file there is is shown or left out; sections appear in priority order.
    assert shown == [n for n in present if n not in result.dropped]
    starts = [result.text.index(f'<file name="{n}">') for n in shown]
    assert starts == sorted(starts)
    # The files before the first one cut or left out are whole; that one is cut, or left
    # out with every file below it. Only with floors (a share opted in to, whose floor is
    # MIN_FLOOR or more) can a file below it show, within its floor.
    first = next((n for n in present if n in result.truncated or n in result.dropped), None)
    if first is not None and first in result.dropped:
        assert list(result.dropped) == present[present.index(first) :]
    if not floor_tokens(result.budget, share) or first == "AGENTS.md":
        assert shown == present[: len(shown)] and len(result.truncated) <= 1
    for name in result.truncated:
        assert name in shown and f"…[truncated: {name}, " in result.text
    # The note names the files left out, last; in full whenever a file is shown (room
    # was left for it), else in brief if that fits, else it is not there.
    note = [line for line in result.text.split("\n") if line.startswith("[left out for")]
    if not result.dropped:
        assert note == []
    elif shown:
        assert note == [result.text.rsplit("\n", 1)[-1]]
        named = re.findall(r"(\w+\.md) \(\d+ tokens?\)", note[0])
        assert named == list(result.dropped)
    elif result.text:
        assert result.text in (
            f"[left out for lack of room: {', '.join(result.dropped)}]",
            note[0],
        )
    if not result.truncated and not result.dropped:
        # A whole file that ends inside an HTML block (``<?``, ``<!--``: the alphabet has
        # them) gets that block's closing line before ``</file>``, as a cut one does; the
        # closing line itself is checked against markdown-it in test_prompt_prefixes.
        bodies = [close_fence(c) for c in shown_texts if c]
        assert result.text == "\n\n".join(
            section(n, b) for n, b in zip(present, bodies, strict=True)
        )


def _shown(result: PromptResult, name: str) -> str:
    return result.text.split(f'<file name="{name}">\n', 1)[1].split("\n…[truncated", 1)[0]


def _cluster_ends(text: str) -> set[int]:
    return {match.end() for match in regex.finditer(r"\X", text)} | {0}


@pytest.mark.parametrize(
    "memory",
    [
        "👨\u200d👩\u200d👧\u200d👦" * 200,  # ZWJ sequence
        "🇨🇳🇯🇵" * 200,  # regional-indicator pairs
        "e\u0301" * 600,  # NFD accents
        "क्षत्रि" * 200,  # Devanagari conjuncts
        "👋🏽 " * 300,  # skin tones
        "\ufeff" + "Zalgo z\u0301\u0302\u0303\u0304 " * 100,
    ],
)
def test_truncation_never_splits_a_grapheme_cluster(memory: str) -> None:
    content = shown_content(memory)
    ends = _cluster_ends(content)
    total = count_tokens(content)
    truncated = 0
    for limit in range(40, 2000, 7):
        result = build(memory=memory, limit=limit, count=count_tokens)
        assert result.tokens == count_tokens(result.text) <= result.budget
        if not result.truncated:
            continue
        truncated += 1
        shown = _shown(result, "MEMORY.md")
        assert content.startswith(shown) and len(shown) in ends, (limit, shown[-8:])
        assert result.text.endswith(marker("MEMORY.md", count_tokens(shown), total) + "\n</file>")
    assert truncated > 100  # the sweep did cut, many times


def test_a_first_cluster_that_does_not_fit_drops_the_file() -> None:
    family = "👨\u200d👩\u200d👧\u200d👦"
    # Budget 65: room for the header, the marker and three code points of the family
    # (👨 ZWJ 👩), though not the whole of it; the note says so instead.
    result = build(memory=family * 20, limit=434, count=count_tokens)
    assert (result.text, result.dropped) == (
        "[left out for lack of room: MEMORY.md (360 tokens); "
        "use memory_search or read the whole file]",
        ("MEMORY.md",),
    )


@pytest.mark.parametrize(
    ("user", "memory"),
    [
        ("\ufeff# USER\n- Name: Ann\n", "\ufeff \n"),
        # Behind blank lines, or after another mark: a mark is never the body's start.
        (" \n\ufeff# USER\n- Name: Ann\n", "\ufeff \n\ufeff\t"),
        ("\ufeff\n\ufeff\ufeff# USER\n- Name: Ann", "\n\ufeff"),
    ],
)
def test_a_leading_byte_order_mark_never_reaches_the_prompt(user: str, memory: str) -> None:
    result = build(user=user, memory=memory, limit=1000)
    assert result.text == section("USER.md", "# USER\n- Name: Ann")
    assert "\ufeff" not in result.text
    assert result.dropped == ()  # a file of just a mark is empty: left out, not dropped


@pytest.mark.parametrize(
    ("limit", "accepted"),
    [
        (MIN_TOKEN_LIMIT - 1, False),
        (MIN_TOKEN_LIMIT, True),
        (MAX_TOKEN_LIMIT, True),
        (MAX_TOKEN_LIMIT + 1, False),
    ],
)
def test_token_limit_bounds_are_the_mcp_prompts(limit: int, accepted: bool) -> None:
    # open_agent_session took 0 ("≥ 0") while memory_context refused it: one rule for both,
    # with one message (MCP's prompt argument is the same number as a string).
    assert (MIN_TOKEN_LIMIT, MAX_TOKEN_LIMIT) == (1, 10_000_000)
    mcp_argument = {"token_limit": str(limit)}
    if accepted:
        assert check_token_limit(limit) == limit
        assert prompt_token_limit(mcp_argument) == limit
        return
    with pytest.raises(InvalidContentError) as refused:
        check_token_limit(limit)
    assert str(refused.value) == (
        "token_limit must be a whole number from 1 to 10000000: the model's context window "
        f"in tokens, e.g. 128000; got {limit!r}"
    )
    with pytest.raises(MCPError) as over_mcp:
        prompt_token_limit(mcp_argument)
    assert over_mcp.value.code == INVALID_PARAMS
    assert over_mcp.value.error.message == str(refused.value)


def test_an_mcp_token_limit_that_is_no_number_gets_the_same_message() -> None:
    with pytest.raises(MCPError) as over_mcp:
        prompt_token_limit({"token_limit": "lots"})
    assert over_mcp.value.error.message == (
        "token_limit must be a whole number from 1 to 10000000: the model's context window "
        "in tokens, e.g. 128000; got 'lots'"
    )
