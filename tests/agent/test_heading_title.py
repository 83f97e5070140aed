"""``markdown_lines.title`` reads a heading's title as the pattern it replaced did, in
linear time: the pattern, kept here as the oracle, read the blanks after each character
of the title again (a line of 16,000 blanks took 4.8 s)."""

from __future__ import annotations

import re

from hypothesis import given as for_all
from hypothesis import settings
from hypothesis import strategies as st

from memstrata.agent.markdown_lines import title

_TITLE = re.compile(r"[ \t]*(.*?)[ \t]*(?:(?<=[ \t])#+[ \t]*)?")


@settings(max_examples=3000, deadline=None)
@for_all(st.text(alphabet=" \t#a\u00a0\u3000\r", max_size=24))
def test_title_reads_as_the_pattern_did(rest: str) -> None:
    found = _TITLE.fullmatch(rest)
    assert found is not None
    assert title(rest) == found.group(1), rest
