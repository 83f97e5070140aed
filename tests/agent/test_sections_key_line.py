"""``sections._key_line`` reads a line as the pattern it replaced did (its two groups), in
linear time: the pattern, kept here as the oracle, tried every split of a run of blanks
(6,400 spaces took 2 s)."""

from __future__ import annotations

import re

from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st

from memstrata.agent.sections import _key_line

_KEY_LINE = re.compile(r"\s*(?:[-*+]\s+)?(?:\*\*)?([^:*\n]{1,80}?)(?:\*\*)?[ \t]*:(.*)")
_ALPHABET = " \t\u3000-*+:ab\u00a0"


def oracle(line: str) -> tuple[str, str] | None:
    found = _KEY_LINE.fullmatch(line)
    return None if found is None else (found.group(1), found.group(2))


@settings(max_examples=3000, deadline=None)
@for_all(st.text(alphabet=_ALPHABET, max_size=30))
def test_key_line_reads_as_the_pattern_did(line: str) -> None:
    assert _key_line(line) == oracle(line), line


@settings(max_examples=300, deadline=None)
@for_all(st.integers(70, 90), st.sampled_from(["", "- ", "**", "- **", "  "]))
def test_a_key_of_up_to_80_characters(length: int, lead: str) -> None:
    line = lead + "k" * length + ": v"
    assert _key_line(line) == oracle(line), line
