"""Every function that runs a regular expression over a user's or an agent's text takes time
linear in the text, on the inputs that make a backtracking pattern quadratic: long runs of
one character each pattern reads (blanks, ``.``, ``#``, ``-``, ``>``, backticks, digits,
CJK, combining marks), runs of two of them in turn, and each pattern's near misses (a run
of what it matches, then a character that ends the match). Python's ``re`` holds the GIL
while it matches, so one quadratic match froze the whole server: a turn of 16,000 dots
took 3.6 s, a heading line of 16,000 blanks 4.8 s at every parse of the file.

Each input is a quarter of the largest memory file the store takes (``MAX_CONTENT_BYTES``
of UTF-8), and a turn an eighth of the longest a request may hold (1 MiB): ``FILE_BYTES``,
``TURN_BYTES``. A call must take under a second of
CPU per ``MAX_CONTENT_BYTES`` (two for the readers of every entry, ``SLOWER``): linear work
takes tens or hundreds of milliseconds, a quadratic one minutes. A call still running after
five times its budget is stopped (``re`` checks for signals while it matches), so a
regression fails in seconds rather than hanging the run.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.agent import (
    entries,
    markdown_blocks,
    markdown_closing,
    markdown_doc,
    prompt_body,
    sections,
)
from memstrata.agent.line_prefix import LinePrefixes
from memstrata.agent.markdown_lines import title
from memstrata.agent.preview import preview
from memstrata.agent.prompt import build_system_prompt
from memstrata.errors import MemstrataError
from memstrata.frontmatter import split_frontmatter
from memstrata.memory.conflicts import parse_name
from memstrata.memory.kinds import MAX_CONTENT_BYTES
from memstrata.retrieval.chunk import _SENTENCE_END, chunk_text
from memstrata.retrieval.entry_chunks import entry_chunks
from memstrata.retrieval.limits import MAX_QUERY_CHARS
from memstrata.retrieval.rounds import Round, round_doc, tail_within, validate_round
from memstrata.retrieval.scaffold import drop_scaffold
from memstrata.retrieval.tokenize import count_tokens, tokenize
from memstrata.sandbox.merge import merge3
from memstrata.terminal import visible
from memstrata.text import shortened

BUDGET_S = 1.0  # CPU seconds a call may take (linear work: tens of milliseconds)
_CAP = 5  # times the budget after which a call is stopped: quadratic, far over budget
# The inputs' sizes: a quarter of the largest memory file, an eighth of the longest turn
# (MEMSTRATA_MAX_REQUEST_BYTES' default, 1 MiB). A quadratic pattern still takes a minute or
# more there (16,000 dots took 3.6 s; 64 KiB of them ~16 times that), far over the budget,
# while the linear work of all these inputs at full size cost the suite minutes.
FILE_BYTES = MAX_CONTENT_BYTES // 4
TURN_BYTES = 1024 * 1024 // 8

# Characters the patterns read: blanks, line breaks, sentence ends (Latin and CJK),
# closing quotes, Markdown's markers, digits, letters of several scripts, combining marks
# and joiners, an emoji.
SINGLES = " \t\n\r.!?。」)]\"'#-*+_=>`~:<&/\\0aé中กक\u0301\u200d\u00ad\U0001f600\u2028\u3000"
# Two of them in turn: where one pattern's run is another's separator.
PAIRS = (
    " \t", ". ", ".\n", "?!", ".)", "- ", "* ", "+ ", "# ", "> ", "` ", "~ ", "1.", "1)", ": ",
    "**", "<!", "a ", "a\u0301", "中 ", "\t\n", " \n", "-\n", "#\n", "> -", "- -",
)  # fmt: skip
# Near misses: a long run a pattern matches or takes apart, then what ends it wrongly.
NEAR_MISSES: dict[str, Callable[[int], str]] = {
    "dots then a letter (sentence end)": lambda n: "." * n + "a",
    "?! then a letter (sentence end)": lambda n: "?!" * (n // 2) + "a",
    "dots, closing brackets, a letter": lambda n: "." * (n // 2) + ")" * (n // 2) + "a",
    "heading, blanks, a closing run, text": lambda n: "# a" + " \t" * (n // 2) + "###x\n",
    "heading of ' #' pairs": lambda n: "#" + " #" * (n // 2) + "x\n",
    "heading of blanks": lambda n: "#" + " " * n + "x\n",
    "heading of blanks, then #": lambda n: "## " + " " * n + "#",
    "key line of blanks": lambda n: " " * n + "x",
    "key bullet of blanks": lambda n: "- " + "\t " * (n // 2) + "x",
    "key bullet, bold, blanks": lambda n: "- **" + " " * n + "x",
    "key, blanks, no colon": lambda n: "- key" + " " * n + "x",
    "key bullets without colons": lambda n: "- **k** v\n" * (n // 10),
    "file tag of blanks": lambda n: "<" + " " * n + "x",
    "file tag, blanks, slash, blanks": lambda n: (
        "<" + " " * (n // 2) + "/" + " " * (n // 2) + "fil"
    ),
    "lines opening file tags": lambda n: "< / fil\n" * (n // 8),
    "thematic break, then text": lambda n: "-" + " -" * (n // 2) + "x",
    "thematic break of blanks": lambda n: "- -" + " " * n + "-x",
    "underline, then text": lambda n: "=" * n + " x",
    "fence, then backticks": lambda n: "```" + "`" * n + "\nx\n" + "`" * 3,
    "item markers, then digits": lambda n: "1. " + "1" * n + ".x",
    "a tag's attributes": lambda n: "<a" + " b='c'" * (n // 6) + " /x",
    "a tag's unquoted values": lambda n: "<a b=" + "c" * n + " =",
    "a comment never closed": lambda n: "<!--" + "-" * n,
    "frontmatter never closed": lambda n: "---\n" + "a: b\n" * (n // 5),
    "frontmatter, blanks": lambda n: "---" + " " * n + "\n" + "x",
    "a dated entry's date": lambda n: "- " + "2026-03-01:" * (n // 11),
    "combining marks on one letter": lambda n: "a" + "\u0301" * (n // 2) + " b",  # 2 bytes each
    "Thai marks, no letter": lambda n: "\u0e31" * (n // 3),  # 3 bytes each
}


def sized(unit: str, size: int) -> str:
    """``unit`` repeated to ``size`` bytes of UTF-8 (the store's limit counts bytes)."""
    return unit * max(size // len(unit.encode()), 1)


# The inputs of a size in bytes, by name, in three groups (for the test workers to share:
# a reader's calls on all of them take up to two minutes).
GROUPS: dict[str, Callable[[int], list[tuple[str, str]]]] = {
    "runs of one": lambda size: [(f"run of {char!r}", sized(char, size)) for char in SINGLES],
    "runs of two": lambda size: [(f"run of {pair!r}", sized(pair, size)) for pair in PAIRS],
    "near misses": lambda size: [(name, make(size)) for name, make in NEAR_MISSES.items()],
}


def _quiet(call: Callable[[str], object]) -> Callable[[str], object]:
    """``call``, its refusals of a text too long or malformed (a ValueError, a memstrata
    error) taken as answers: what is timed is the reading that decided it."""

    def run(text: str) -> object:
        try:
            return call(text)
        except (ValueError, MemstrataError) as exc:
            return exc

    return run


def _prompt(place: str, token_limit: int) -> Callable[[str], object]:
    """The prompt with a text as its file ``place``, for a model of ``token_limit``: the
    file whole, or cut to fit."""

    def build(text: str) -> object:
        files = {"agents_md": "", "soul": "", "user": "", "memory": "", place: text}
        return build_system_prompt(
            agents_md=files["agents_md"],
            soul=files["soul"],
            user=files["user"],
            memory=files["memory"],
            token_limit=token_limit,
            count=count_tokens,
        )

    return build


def _round(text: str) -> object:
    own = validate_round(Round("s", 2, text))
    previous = validate_round(Round("s", 1, "", text))
    return round_doc(own, previous, 512, 128)


# The functions that read a memory file (SOUL.md, USER.md, MEMORY.md), a section body or
# an entry the agent writes, a search query, or a file of the sandbox.
FILE_READERS: dict[str, Callable[[str], object]] = {
    "chunk_text": chunk_text,
    "entry_chunks": entry_chunks,
    "drop_scaffold": lambda text: drop_scaffold(text, frozenset({"x"})),
    "tokenize": tokenize,
    "count_tokens": count_tokens,
    "markdown_doc.parse": markdown_doc.parse,
    "markdown_closing.closing_line": markdown_closing.closing_line,
    "markdown_blocks.may_run_on": markdown_blocks.may_run_on,
    "sections.keyed_line": sections.keyed_line,
    "sections.body_keys": sections.body_keys,
    # A name is one line (a heading's title, a tool's argument).
    "sections.normalise_name": lambda text: sections.normalise_name(text.split("\n")[0]),
    "sections.without_own_heading": lambda text: sections.without_own_heading(text, "Notes"),
    "sections.set_key": lambda text: sections.set_key(text, "Notes", "Name", "x"),
    "sections.append_to_section": lambda text: sections.append_to_section(text, "Notes", "- x"),
    "sections.dated_bullet": lambda text: sections.dated_bullet(text, date(2026, 3, 1)),
    "entries.comparable": entries.comparable,
    "entries.entries": lambda text: entries.entries(markdown_doc.parse(text)),
    "prompt_body.escape_framing": prompt_body.escape_framing,
    "prompt_body.memory_entries": prompt_body.memory_entries,
    "prompt, SOUL.md whole": _prompt("soul", 10_000_000),
    "prompt, SOUL.md cut": _prompt("soul", 20_000),
    "prompt, MEMORY.md whole": _prompt("memory", 10_000_000),
    "prompt, MEMORY.md cut": _prompt("memory", 20_000),
    "LinePrefixes": LinePrefixes,
    "preview": lambda text: preview(text, text[:MAX_QUERY_CHARS]),
    "split_frontmatter": split_frontmatter,
    "merge3": lambda text: merge3("", text, text + "\nx"),
    "terminal.visible": lambda text: visible(text, lines=True),
    "shortened": lambda text: shortened(text, len(text) // 2),
    "conflicts.parse_name": parse_name,
}

# Readers of every entry of MEMORY.md take longer, in time still linear: 131,072 entries
# (a 256 KB file of "-" lines) took up to 0.9 s of CPU on a busy host, the Markdown reader's
# and the entries' own work (about 7 µs an entry), none of it a pattern's.
SLOWER: dict[str, float] = dict.fromkeys(
    ["entries.entries", "prompt_body.memory_entries", "prompt, MEMORY.md cut"], 2 * BUDGET_S
)

# The functions that read a conversation turn, as long as a request may be.
TURN_READERS: dict[str, Callable[[str], object]] = {
    "round_doc": _round,
    "tail_within": lambda text: tail_within(text, 128),
}


class _TooSlow(Exception):
    pass


@contextmanager
def _capped(seconds: float) -> Iterator[None]:
    """Stop the call after ``seconds`` of the process's CPU time (a signal, so only in the
    main thread; CPU time, so a busy machine does not stop a linear call)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGPROF, stop)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def cpu_time(call: Callable[[str], object], text: str, budget: float = BUDGET_S) -> float:
    """The CPU time of ``call(text)``, the least of two if the first is over ``budget`` (a
    busy machine), or ``inf`` when it was stopped after ``_CAP`` times ``budget``."""
    best = float("inf")
    for _ in range(2):
        began = time.process_time()
        try:
            with _capped(_CAP * budget):
                call(text)
        except _TooSlow:
            return float("inf")
        best = min(best, time.process_time() - began)
        if best < budget:
            break
    return best


def slow_inputs(
    call: Callable[[str], object], group: str, size: int, budget: float = BUDGET_S
) -> list[str]:
    """The inputs of ``group``, ``size`` bytes long, that ``call`` takes too long on: over
    ``budget`` per ``MAX_CONTENT_BYTES``."""
    budget *= max(size / MAX_CONTENT_BYTES, 1)
    run = _quiet(call)
    slow = []
    for name, text in GROUPS[group](size):
        took = cpu_time(run, text, budget)
        if took >= budget:
            shown = (
                f"stopped after {_CAP * budget:.0f} s" if took == float("inf") else f"{took:.2f} s"
            )
            slow.append(f"{name} ({len(text)} characters): {shown}")
    return slow


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("reader", FILE_READERS)
def test_a_memory_file_is_read_in_linear_time(reader: str, group: str) -> None:
    budget = SLOWER.get(reader, BUDGET_S)
    slow = slow_inputs(FILE_READERS[reader], group, FILE_BYTES, budget)
    assert not slow, "over budget:\n" + "\n".join(slow)


@pytest.mark.parametrize("group", GROUPS)
@pytest.mark.parametrize("reader", TURN_READERS)
def test_a_turn_is_read_in_linear_time(reader: str, group: str) -> None:
    slow = slow_inputs(TURN_READERS[reader], group, TURN_BYTES)
    assert not slow, "over budget:\n" + "\n".join(slow)


def test_the_cap_stops_a_quadratic_match() -> None:
    """The cap works on a pattern that backtracks quadratically: without it a regression
    would hang the run for minutes, not fail it."""
    quadratic = re.compile(r"(?:a|\s)*\s*x")
    began = time.process_time()
    assert cpu_time(quadratic.match, " " * 2_000_000, budget=0.1) == float("inf")
    assert time.process_time() - began < 2


# The patterns the linear rules replaced, which read every text as the rules do.
_OLD_SENTENCE_END = re.compile(
    r"(?:[.!?]+[\"'”’」』)）\]]*(?=\s|$))|(?:[。！？]+[\"'”’」』)）\]]*)|\n"
)
_OLD_TITLE = re.compile(r"[ \t]*(.*?)[ \t]*(?:(?<=[ \t])#+[ \t]*)?")
_OLD_KEY_LINE = re.compile(r"\s*(?:[-*+]\s+)?(?:\*\*)?([^:*\n]{1,80}?)(?:\*\*)?[ \t]*:(.*)")
_OLD_FILE_TAG_START = re.compile(r"<(?=[ \t]*/?[ \t]*file\b)", re.IGNORECASE)

# Short texts of the characters the patterns read, and lines shaped like a key's, with runs
# of whitespace and keys around the longest a key may be.
_PIECES = [" ", "\t", "\xa0", "\n", "-", "+", "*", "**", ":", "#", ".", "!", "?", "。", "」", ")"]
_PIECES += ["<", "/", "file", "FILE", "x", "y", " " * 40, "x" * 40]
_PIECES += ["\u3000", "\r"]  # blanks to str.strip but not to the patterns' [ \t]
_SPACE = st.sampled_from(["", " ", "  ", "\t", " \xa0", " " * 40])
_KEY = st.sampled_from(["", "x", "a b", " ", "x" * 79, "x" * 80, "x" * 81])
_KEY_LINES = st.tuples(
    _SPACE,
    st.sampled_from(["", "-", "*", "+"]),
    _SPACE,
    st.sampled_from(["", "*", "**"]),
    _KEY,
    st.sampled_from(["", "*", "**"]),
    st.sampled_from(["", " ", "\t ", " " * 80]),
    st.sampled_from(["", ":", "*:", ": v", "://x"]),
).map("".join)
_TEXTS = st.lists(st.sampled_from(_PIECES), max_size=12).map("".join) | st.text(max_size=30)


@settings(max_examples=3000, deadline=None)
@given(_TEXTS | _KEY_LINES)
def test_the_linear_rules_read_as_the_patterns_did(text: str) -> None:
    old_ends = [match.span() for match in _OLD_SENTENCE_END.finditer(text)]
    assert [match.span() for match in _SENTENCE_END.finditer(text)] == old_ends
    assert prompt_body.escape_framing(text) == _OLD_FILE_TAG_START.sub("&lt;", text)
    line = text.replace("\n", "")  # a title or a key is read from one line
    old_title = _OLD_TITLE.fullmatch(line)
    assert old_title is not None
    assert title(line) == old_title.group(1)
    old_key = _OLD_KEY_LINE.fullmatch(line)
    assert sections._key_line(line) == (None if old_key is None else old_key.groups())
