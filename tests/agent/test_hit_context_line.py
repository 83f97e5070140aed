"""A conversation hit whose text starts with the previous round's tail
(``explain.context_chars``) shows that tail as ``(before: …)`` ahead of the hit's own
lines, in the library's ``memory_search`` answer as in MCP's (one formatting for both; the
answer is one compact line a hit)."""

from __future__ import annotations

from dataclasses import replace

from memstrata.agent.answers import CONTEXT_PREVIEW_CHARS, format_hit
from tests.agent.test_preview import hit

TAIL = "User: I adopted a cat named Miso"
OWN = "User: she sleeps all day\nAssistant: cats do"
SHOWN = "User: she sleeps all day Assistant: cats do"  # a hit's lines on its one line


def conversation_hit(context_chars: int) -> str:
    h = replace(hit(f"{TAIL}\n{OWN}"), file_path="sessions/s1/1", source="conversation")
    h = replace(h, explain={"context_chars": context_chars})
    return format_hit(1, h, "sleeps")


def test_the_previous_rounds_tail_is_marked() -> None:
    line = conversation_hit(len(TAIL) + 1)
    assert line.endswith(f"] (before: {TAIL}) {SHOWN}")


def test_a_hit_without_context_is_shown_as_it_is() -> None:
    assert conversation_hit(0).endswith(f"] {TAIL} {SHOWN}")
    assert "(before:" not in conversation_hit(0)


def test_a_long_tail_is_cut_short_and_the_mark_kept() -> None:
    tail = "User: " + "word " * 100
    h = replace(hit(f"{tail}\n{OWN}"), explain={"context_chars": len(tail) + 1})
    line = format_hit(1, h, "sleeps")
    before = line[line.index("(before: ") : line.index(f") {SHOWN}")]
    assert len(before) <= len("(before: ") + CONTEXT_PREVIEW_CHARS + 1
    assert line.endswith(f") {SHOWN}")
