"""The memory-file reader on hand-written, hostile files: its time grows with the file,
not with the file times its nesting, and the tools keep every line of a CRLF file with a
byte-order mark, tabs, deep nesting and a fence on a nested item's line. Real DB and
sandbox for the tools."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from memstrata.agent import markdown_doc
from memstrata.agent.prompt import PromptResult, build_system_prompt
from memstrata.agent.tools import MemoryTools
from memstrata.config import PROMPT_BUDGET_RATIO
from memstrata.memory.kinds import MAX_CONTENT_BYTES, FileKind
from memstrata.memory.store import MemoryStore
from memstrata.retrieval.tokenize import count_tokens
from memstrata.runtime import Memstrata
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.tool_support import given
from tests.mcp.conftest import ClientFactory, connect, mem  # noqa: F401  (fixtures by name)
from tests.mcp.test_tools import ok, stored

# Files of about ``size`` characters that once cost a parse time growing with the square
# of their size: a line of nested markers (each one matched against the thematic-break
# rule over the rest of the line), then lines at the margin under all of those items
# (each one tried against every item's width in turn), and ordered markers (the rest of
# the line copied once per marker).
SHAPES: dict[str, Callable[[int], str]] = {
    "nested markers": lambda size: "- " * (size // 2) + "a\nb\n",
    "margin lines under them": lambda size: "- " * (size // 4) + "a\n" + "b\n" * (size // 4),
    "ordered markers": lambda size: "1. " * (size // 3) + "a\nb\n",
    "a staircase 50 deep": lambda size: "".join(
        "  " * (i % 50) + f"- item {i}\n" + ("back at the margin\n" if i % 50 == 49 else "")
        for i in range(size // 60)
    ),
    # Block quotes and HTML blocks: a long quote, quotes nested as deep as a line goes
    # (each level reads the line again, up to ``MAX_QUOTES``), lazy lines under them, a
    # list in a quote, and the lines of HTML blocks, blank ones among them.
    "quote lines": lambda size: "> quoted - line\n" * (size // 16),
    "nested quote markers": lambda size: "> " * (size // 2) + "a\nb\n",
    "lazy lines under them": lambda size: "> " * (size // 4) + "a\n" + "b\n" * (size // 4),
    "items and quotes in turn": lambda size: "- > " * (size // 4) + "a\nb\n",
    "a list in a quote": lambda size: "> - a\n>   b\n" * (size // 12),
    "an HTML comment of list lines": lambda size: "<!--\n" + "- Name: x\n\n" * (size // 11),
    "HTML lines in an entry": lambda size: "- a\n  <div>\n" + "  <p>x</p>\n" * (size // 11),
    # Lazy lines under quotes as deep as they go, in an entry (each line asked all 32
    # levels whether the innermost is a paragraph), and a tag with a long run of
    # attributes and no ">" (a lone tag's pattern must fail it without backtracking).
    "lazy lines under 32 quotes": lambda size: "- > " * 40 + "a\n" + "b\n" * (size // 2),
    "a tag never closed": lambda size: "<a" + " b=x" * (size // 4) + "\n",
}


def parse_cpu(text: str) -> float:
    """The least CPU time of a few parses of ``text``: CPU, not wall time, and the least,
    so other processes on the machine matter as little as they can."""
    best = float("inf")
    for _ in range(5):
        began = time.process_time()
        markdown_doc.parse(text)
        best = min(best, time.process_time() - began)
    return best


@pytest.mark.parametrize("shape", SHAPES)
def test_a_parse_takes_time_linear_in_the_file(shape: str) -> None:
    make = SHAPES[shape]
    small, large = parse_cpu(make(8_000)), parse_cpu(make(32_000))
    # Four times the text, about four times the time; a floor for a clock's grain. Square
    # growth was 15 times and more (1.3 s at 16 KB, 20 s at 64 KB for nested markers).
    assert large < 8 * max(small, 0.005), (small, large)
    # The largest file the store takes by default, read well within a second.
    assert parse_cpu(make(MAX_CONTENT_BYTES)) < 1.0


# CRLF, a byte-order mark, tabs mixed with spaces, nesting 50 deep, a fence on a nested
# item's line left open (its item's end ends it) and a long line.
HOSTILE = "\ufeff" + "\r\n".join(
    [
        "# MEMORY.md",
        "",
        "## Notes",
        "- 2026-01-01: Deep:",
        *("  " * depth + f"- level {depth}" for depth in range(1, 50)),
        "- 2026-01-02: Deploy with:",
        "  - - ```sh",
        "\t  make deploy",
        "        make tag",
        "- 2026-01-03: " + "long " * 4000,
        "\t- 2026-01-04: tab-indented",
        "- 2026-01-05: Last one.",
        "",
    ]
)


def entry_spans(text: str) -> list[tuple[int, int]]:
    return [(b.start, b.end) for b in markdown_doc.parse(text).blocks if b.kind.value == "item"]


def test_the_hostile_file_reads_as_its_entries() -> None:
    lines = HOSTILE.split("\n")
    # The deep entry takes its 49 nested lines; the fence ends with its nested item; the
    # tab-indented item is four columns in, so nested in the long entry, as CommonMark
    # reads it.
    assert entry_spans(HOSTILE) == [(3, 53), (53, 57), (57, 59), (59, 60)]
    assert markdown_doc.parse(HOSTILE).open_fence is None
    assert lines[59].startswith("- 2026-01-05")


@pytest.mark.anyio
@pytest.mark.parametrize("replaced", ["Deep:", "Deploy with:", "long long", "Last one."])
async def test_replacing_an_entry_keeps_every_other_line_once(
    replaced: str, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, HOSTILE)
    doc = markdown_doc.parse(HOSTILE)
    lines = HOSTILE.split("\n")
    (gone,) = [b for b in doc.blocks if b.kind.value == "item" and replaced in lines[b.start]]

    answer = await tools.record_memory("Replaced it.", replaces=replaced)

    assert not answer.failed, answer
    stored = memory(store)[0]
    kept = [
        line.removesuffix("\r") for i, line in enumerate(lines) if not gone.start <= i < gone.end
    ]
    got = [line.removesuffix("\r") for line in stored.split("\n")]
    new = [line for line in got if "Replaced it." in line]
    assert len(new) == 1
    got.remove(new[0])
    # the byte-order mark kept too: the tools edit lines, not the file's encoding
    assert [line for line in got if line.strip()] == [line for line in kept if line.strip()]


# A whole file of nested markers (a model's or an importer's mistake, or on purpose) and
# the hostile file after it: the write reads it for an open fence, the prompt for entries.
NESTED_MARKERS = "# MEMORY.md\n\n## Notes\n" + "- " * 32_000 + "deep\n" + "at the margin\n" * 20


@pytest.mark.anyio
async def test_memory_write_and_read_of_deep_nesting_through_mcp(
    connect: ClientFactory,  # noqa: F811
    mem: Memstrata,  # noqa: F811
) -> None:
    content = NESTED_MARKERS + HOSTILE.removeprefix("\ufeff")
    async with connect("alice") as client:
        read = (await ok(client, "memory_read", {"name": "memory"})).structured_content
        assert read is not None
        began = time.monotonic()
        await ok(
            client,
            "memory_write",
            # replace_all: the text replaces the template's sections.
            {
                "name": "memory",
                "content": content,
                "expected_version": read["version"],
                "replace_all": True,
            },
        )
        written_s = time.monotonic() - began  # 25 s and more when the parse was quadratic
        again = (await ok(client, "memory_read", {"name": "memory"})).structured_content
    assert written_s < 5.0
    assert again is not None and again["content"] == content
    assert stored(mem, "alice", FileKind.MEMORY) == (content, read["version"] + 1)

    began = time.process_time()
    prompt = build_system_prompt(
        agents_md="A", soul="S", user="U", memory=content, token_limit=4_000, count=len
    )
    assert time.process_time() - began < 2.0
    # The newest entries that fit, each whole, the prompt within its budget.
    assert prompt.tokens <= prompt.budget and "- 2026-01-05: Last one." in prompt.text


# A 256 KB USER.md of hostile lines, edited through the tools: an edit reads the file a
# few times (the edit, the section's lines, where the bullet goes), so a read that costs
# more than it must, or is made twice, adds up. Lazy lines under quotes 32 deep, in an
# entry: each line was read through all 32 levels, and the file four times.
EDITED = "# USER.md\n\n## Notes\n" + SHAPES["lazy lines under 32 quotes"](MAX_CONTENT_BYTES - 400)


@pytest.mark.anyio
async def test_a_key_set_in_a_large_hostile_file_takes_well_under_a_second(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.USER, EDITED)

    began = time.process_time()
    answer = await tools.update_user("Bob", section="Notes", key="Name")
    spent = time.process_time() - began

    assert answer == f"Set Name under ## Notes in USER.md (version {version + 1})."
    assert user_md(store)[0] == EDITED + "- Name: Bob\n"
    # 1.6 s of CPU time (the least noisy measure here) before, 0.3 s now.
    assert spent < 1.0, spent


# 256 KB SOUL.md files of hostile lines and one fence, cut by the prompt near their end
# (the binary search then tries prefixes of most of the file): ``<`` lines (each read as
# a possible HTML block), short ``> -`` lines (a quote and a list item each), and a fence
# left open inside a list item. A parse per prefix tried cost 0.4 to 4.4 s of CPU per
# build; the file is now read about once.
def _fence_at(lines: str, where: float) -> str:
    split = lines.split("\n")
    split.insert(max(1, int(len(split) * where)), "```")
    return "\n".join(split)[: MAX_CONTENT_BYTES - 100]


_LT, _QUOTED = "<\n" * (MAX_CONTENT_BYTES // 2), "> - \n" * (MAX_CONTENT_BYTES // 4)
PROMPT_SHAPES: dict[str, str] = {
    **{f"< lines, a fence at {at}": _fence_at(_LT, at) for at in (0, 0.5)},
    **{f"> - lines, a fence at {at}": _fence_at(_QUOTED, at) for at in (0, 0.5, 0.99)},
    "a fence open in a list item": "- a\n  ```\n" + "  <\n" * (MAX_CONTENT_BYTES // 4 - 5),
}


def least_cpu(run: Callable[[], object], times: int = 2) -> float:
    best = float("inf")
    for _ in range(times):
        began = time.process_time()
        run()
        best = min(best, time.process_time() - began)
    return best


def soul_cut_cpu(text: str) -> float:
    """The least CPU time of a prompt build that cuts ``text`` as SOUL.md, with a budget
    nine tenths of what the file counts."""
    token_limit = int(count_tokens(text) * 0.9 / PROMPT_BUDGET_RATIO)
    built: list[PromptResult] = []

    def build() -> None:
        built.append(
            build_system_prompt(
                agents_md="",
                soul=text,
                user="",
                memory="",
                token_limit=token_limit,
                count=count_tokens,
            )
        )

    spent = least_cpu(build)
    assert built[0].truncated == ("SOUL.md",)
    return spent


@pytest.mark.parametrize("shape", PROMPT_SHAPES)
def test_a_prompt_build_reads_a_large_hostile_file_about_once(shape: str) -> None:
    text = PROMPT_SHAPES[shape]
    spent = soul_cut_cpu(text)
    parse = least_cpu(lambda: markdown_doc.parse(text), times=1)
    counted = least_cpu(lambda: count_tokens(text))
    # About a parse and a count or two: 0.1 to 0.4 s on a loaded 2-core machine, half this
    # bound or less. A parse per prefix tried took 1 to 4.5 s, 3 to 6 times the bound (a
    # fence near the end is tried by few prefixes: 0.9 s then, under the bound).
    assert spent < 3 * parse + 6 * counted + 0.1, (spent, parse, counted)


# 256 KB SOUL.md files that are one line, cut by the prompt near their end: every prefix
# the binary search tries ends in that line. Counted from the line's start, each cost a
# count of up to the file: 0.2 to 0.35 s of CPU per build. The line is now counted once,
# in stretches between checkpoints, and each prefix from the last one before its end
# (``agent.line_prefix``); a run of one letter finds its checkpoints from its matches.
def _one_line(unit: str) -> str:
    repeated = unit * (MAX_CONTENT_BYTES // len(unit.encode()) + 1)
    return repeated.encode()[: MAX_CONTENT_BYTES - 100].decode(errors="ignore").strip()


ONE_LINE_SHAPES: dict[str, str] = {
    "prose": _one_line("Some words of prose here, and more. "),
    "mixed scripts": _one_line("记住：用户喜欢简短的回答 😀👍 नमस्ते दुनिया, café déjà vu, x = 1; "),
    "one Devanagari letter": _one_line("क"),
}


@pytest.mark.parametrize("shape", ONE_LINE_SHAPES)
def test_a_prompt_build_counts_a_one_line_file_about_once(shape: str) -> None:
    text = ONE_LINE_SHAPES[shape]
    spent = soul_cut_cpu(text)
    counted = least_cpu(lambda: count_tokens(text))
    # About two counts of the file (the line's checkpoints, the section kept) and what
    # every prefix tried costs besides its count: 0.04 to 0.05 s, under half this bound.
    # Each prefix counted from the line's start took 0.2 to 0.35 s, 2 to 3 times it.
    assert spent < 4 * counted + 0.05, (spent, counted)
