"""The prompt says in its text which files the budget left out, within the budget; a file
crowded out by a larger one above it is left out (the spec's order), or keeps a floor when
a host opts in (``floor_share``); and a host's guide leads it.

A walkthrough's user with a USER.md of 8,923 tokens got, at ``token_limit`` 32000, USER.md
cut and MEMORY.md dropped, which only ``PromptResult.dropped`` said: the text had no
trace of MEMORY.md, so a model did not know it was there to search or read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.agent.prompt import PromptResult, build_system_prompt
from memstrata.agent.prompt_room import MIN_FLOOR, floor_tokens
from memstrata.retrieval.tokenize import count_tokens
from tests.prompt_files import MEMORY_MD, USER_MD

# The floor share measured (docs/ARCHITECTURE.md), which the floor tests opt in to.
SHARE = 0.125

AGENTS = "# AGENTS.md\n\nRules of this workspace.\n- Be careful with data.\n"
SOUL = "# SOUL.md\n\n- Be terse.\n- Have opinions.\n"
# The walkthrough's USER.md and MEMORY.md.
USER, MEMORY = USER_MD, MEMORY_MD


def build(
    token_limit: int,
    *,
    agents: str = AGENTS,
    soul: str = SOUL,
    user: str = USER,
    memory: str = MEMORY,
    count: Callable[[str], int] = count_tokens,
    guide: str = "",
    floor_share: float | None = None,
) -> PromptResult:
    """The prompt, with the library's default floor share unless ``floor_share``."""
    shares = {} if floor_share is None else {"floor_share": floor_share}
    result = build_system_prompt(
        agents_md=agents,
        soul=soul,
        user=user,
        memory=memory,
        token_limit=token_limit,
        count=count,
        guide=guide,
        **shares,
    )
    assert result.tokens == count(result.text) <= result.budget
    return result


def shown(result: PromptResult, name: str) -> str | None:
    """The section of ``name`` as the text shows it, or None."""
    found = re.search(rf'<file name="{re.escape(name)}">\n.*?\n</file>', result.text, re.DOTALL)
    return None if found is None else found.group(0)


def _wrapped(text: str) -> int:
    """``count_tokens`` behind another function: the same counts, by the generic path."""
    return count_tokens(text)


def test_a_file_left_out_is_named_in_the_text() -> None:
    result = build(4000)  # budget 600: no floors
    assert (result.truncated, result.dropped) == (("USER.md",), ("MEMORY.md",))
    size = count_tokens(MEMORY.strip())
    assert result.text.endswith(
        f"</file>\n\n[left out for lack of room: MEMORY.md ({size} tokens); "
        "use memory_search or read the whole file]"
    )


def test_by_default_a_large_user_md_leaves_memory_md_out() -> None:
    """The spec's strict priority order unless a host opts in to floors: USER.md is cut,
    MEMORY.md below it left out whole and named by the note."""
    result = build(32000)  # budget 4800, USER.md about 9,000 tokens
    assert (result.truncated, result.dropped) == (("USER.md",), ("MEMORY.md",))
    assert shown(result, "MEMORY.md") is None
    size = count_tokens(MEMORY.strip())
    assert result.text.endswith(
        f"</file>\n\n[left out for lack of room: MEMORY.md ({size} tokens); "
        "use memory_search or read the whole file]"
    )
    assert result == build(32000, floor_share=0.0)


def test_a_large_user_md_leaves_memory_md_its_floor() -> None:
    result = build(32000, floor_share=SHARE)  # budget 4800: a floor of 600
    assert floor_tokens(result.budget, SHARE) == 600
    assert (result.truncated, result.dropped) == (("USER.md", "MEMORY.md"), ())
    memory = shown(result, "MEMORY.md")
    assert memory is not None and count_tokens(memory) <= 600
    # Its headings and newest entries, by MEMORY.md's own cut.
    assert "## Decisions\n- 2026-01-02: Chose PostgreSQL." in memory
    assert "- 2026-02-01: the newest note, a correction\n…[truncated: MEMORY.md, " in memory
    # USER.md has the rest: whole sections before it, the cut, then the floor.
    assert result.text.index('<file name="USER.md">') < result.text.index(memory)
    assert result.budget - result.tokens < 30


def test_a_file_smaller_than_its_floor_is_shown_whole() -> None:
    small = "# MEMORY.md\n\n## Notes\n- 2026-02-01: a single note\n"
    result = build(32000, memory=small, floor_share=SHARE)
    assert (result.truncated, result.dropped) == (("USER.md",), ())
    assert shown(result, "MEMORY.md") == f'<file name="MEMORY.md">\n{small.strip()}\n</file>'


def test_agents_md_is_never_cut_for_a_floor() -> None:
    agents = "# AGENTS.md\n" + "".join(f"- rule {i}: do the thing number {i}\n" for i in range(900))
    result = build(32000, agents=agents, floor_share=SHARE)
    assert (result.truncated, result.dropped) == (
        ("AGENTS.md",),
        ("SOUL.md", "USER.md", "MEMORY.md"),
    )
    assert re.search(
        r"\[left out for lack of room: SOUL\.md \(\d+ tokens\), USER\.md \(\d+ tokens\), "
        r"MEMORY\.md \(\d+ tokens\); use memory_search or read the files\]$",
        result.text,
    )


@pytest.mark.parametrize(("token_limit", "floors"), [(7993, False), (8000, True)])
def test_no_floor_below_a_budget_of_1200(token_limit: int, floors: bool) -> None:
    assert MIN_FLOOR == 150 and SHARE * 1200 == MIN_FLOOR
    result = build(token_limit, floor_share=SHARE)
    assert (shown(result, "MEMORY.md") is not None) is floors
    assert result.dropped == (() if floors else ("MEMORY.md",))


def test_a_floor_never_leaves_the_file_cut_less_than_one() -> None:
    # AGENTS.md whole (never cut for a floor) leaves SOUL.md 400 tokens: less than a
    # floor beside the floors of USER.md and MEMORY.md, so SOUL.md keeps them all.
    agents = "# AGENTS.md\n" + "".join(f"- rule {i}: do the thing number {i}\n" for i in range(90))
    soul = "# SOUL.md\n" + "".join(f"- trait {i}: calm and kind\n" for i in range(110))
    fitted = build(1_000_000, agents=agents, soul="", user="", memory="").tokens
    limit = (fitted + 400) * 20 // 3  # budget: it and 400
    result = build(limit, agents=agents, soul=soul, floor_share=SHARE)
    assert MIN_FLOOR <= floor_tokens(result.budget, SHARE) < 200
    assert (result.truncated, result.dropped) == (("SOUL.md",), ("USER.md", "MEMORY.md"))
    # With 300 more tokens, SOUL.md keeps a floor and leaves one to each file below it.
    more = build((fitted + 700) * 20 // 3, agents=agents, soul=soul, floor_share=SHARE)
    assert (more.truncated, more.dropped) == (("SOUL.md", "USER.md", "MEMORY.md"), ())


@pytest.mark.parametrize(
    ("token_limit", "text"),
    [
        # Budget 30: no file, and not the note in full; in brief it fits.
        (200, "[left out for lack of room: AGENTS.md, SOUL.md, USER.md, MEMORY.md]"),
        # Budget 15: not even that.
        (100, ""),
    ],
)
def test_a_budget_that_holds_no_file(token_limit: int, text: str) -> None:
    result = build(token_limit)
    assert result.text == text
    assert result.dropped == ("AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md")


def test_a_guide_leads_whole_or_not_at_all() -> None:
    guide = "Your memory follows; change it with the memory tools."
    result = build(32000, agents="", guide=f"\n {guide}\n")
    assert result.text.startswith(f'{guide}\n\n<file name="SOUL.md">')
    assert shown(result, "AGENTS.md") is None
    tiny = build(200, agents="", guide=guide)  # budget 30: the guide (12) beside the note
    assert tiny.text == "[left out for lack of room: SOUL.md, USER.md, MEMORY.md]"


@pytest.mark.parametrize("share", [0.0, SHARE])
@pytest.mark.parametrize("token_limit", [200, 4000, 7999, 8000, 12_000, 32_000, 128_000])
def test_parts_and_whole_give_the_same_prompt(token_limit: int, share: float) -> None:
    for user in (USER, ""):
        by_parts = build(token_limit, user=user, floor_share=share)
        assert by_parts == build(token_limit, user=user, count=_wrapped, floor_share=share)


@pytest.mark.parametrize("share", [-0.125, 0.51, float("nan")])
def test_a_floor_share_outside_0_to_half_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match=r"floor_share must be between 0 and 0\.5"):
        build(32000, floor_share=share)


def test_a_floor_is_the_share_at_its_decimal_value() -> None:
    # 0.1 as a binary float is slightly below 1/10: 0.1 × 1500 would floor to 149, under
    # MIN_FLOOR, and no floor at all.
    assert floor_tokens(1500, 0.1) == 150
    assert floor_tokens(4800, 0.0) == 0 and floor_tokens(4800, 0.5) == 2400


_WORDS = st.sampled_from(["tea", "note", "用户", "😀", "x = 1", "Lisbon", "<file", "```"])
_LINE = st.lists(_WORDS, min_size=1, max_size=12).map(lambda w: "- " + " ".join(w))
# A few lines repeated up to 300 times: files from empty to about 8,000 tokens.
_FILE = st.tuples(st.lists(_LINE, max_size=6), st.integers(0, 300)).map(
    lambda parts: "\n".join(parts[0] * parts[1])
)
_HEADED = st.tuples(st.lists(_LINE, max_size=20), _FILE).map(
    lambda parts: "## Old\n" + "\n".join(parts[0]) + "\n## New\n" + parts[1]
)


@settings(max_examples=60, deadline=None)
@given(
    soul=_FILE,
    user=_FILE,
    memory=_HEADED,
    token_limit=st.integers(min_value=1000, max_value=40_000),
    share=st.sampled_from([0.0, SHARE, 0.3, 0.5]),
)
def test_floors_keep_the_budget_and_the_order(
    soul: str, user: str, memory: str, token_limit: int, share: float
) -> None:
    files = {"soul": soul, "user": user, "memory": memory}
    result = build(token_limit, **files, floor_share=share)  # within the budget (build)
    # Counted by parts as counted whole: the same prompt.
    assert result == build(token_limit, **files, count=_wrapped, floor_share=share)
    floor = floor_tokens(result.budget, share)
    names = ["AGENTS.md", "SOUL.md", "USER.md", "MEMORY.md"]
    cut = [n for n in names if n in result.truncated or n in result.dropped]
    for name in cut[1:]:
        section = shown(result, name)
        # Below the file cut, a file shows within its floor or is left out and named.
        assert (section is None) is (name in result.dropped)
        if section is not None and floor:
            assert count_tokens(section) <= floor
        if section is not None and not floor:
            pytest.fail(f"{name} shown below the cut without a floor")
    if result.dropped:
        assert all(f"{n} (" in result.text.rsplit("\n", 1)[-1] for n in result.dropped)
