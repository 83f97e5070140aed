"""Lists nested in an entry are read as CommonMark reads them: a fence in a nested item ends
with that item, a line indented under a nested item is read within it (as far in as its
text starts), and a fence on an item's own line (``- ```sh``) opens a fenced block. Each
decides where the entry ends — which lines a replaced entry takes with it — which lines are
code (no key of USER.md is read there) and which line the prompt adds to close a fence.
Pinned against CommonMark's reading (markdown-it-py) and through the memory tools, against
a real DB and sandbox."""

from __future__ import annotations

import pytest

from memstrata.agent import markdown_closing
from memstrata.agent.prompt import build_system_prompt
from memstrata.agent.tools import MemoryTools
from memstrata.memory.kinds import FileKind
from memstrata.memory.store import MemoryStore
from memstrata.sandbox.sync import SyncService
from tests.agent.stored import memory, user_md
from tests.agent.test_entry_fences import commonmark_code
from tests.agent.test_list_items import code, commonmark_items, spans
from tests.agent.tool_support import given

pytestmark = pytest.mark.anyio

# A release checklist: a nested item's snippet, its closing fence forgotten; the next
# nested item ends it, and the line at the margin goes on with that item's paragraph.
NESTED_FENCE = """# MEMORY.md

## Deploys
- 2026-02-01: Release steps:
  - build the image:
    ```sh
    make image
  - push it, then tag the release
and announce it in #ops.
- 2026-02-02: Staging deploys run on Fridays.
"""

# A snippet as the whole item, the fence on the item's line, left open: the item's end
# ends it, and the note at the margin is a paragraph of its own (no lazy line after code).
ITEM_LINE_FENCE = """# MEMORY.md

## Snippets
- ```sh
  make deploy
Ask Ann before deploying on Fridays.
"""

# The same, in a nested item.
NESTED_ITEM_LINE_FENCE = """# MEMORY.md

## Deploys
- 2026-02-03: Deploy with:
  - ```sh
    make deploy
Ask Ann before deploying on Fridays.
"""

# Text seven columns in under "1. build" (its text five in) after a blank line is a
# paragraph of that item, not indented code, so the margin line after it goes on with it.
NESTED_WIDTH = """# MEMORY.md

## Steps
- 2026-02-04: Release:
  1. build

       make image
then push.
"""


# -- the reader ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "items", "fenced"),
    [
        (NESTED_FENCE, [(3, 9), (9, 10)], {5, 6}),
        (ITEM_LINE_FENCE, [(3, 5)], {3, 4}),
        (NESTED_ITEM_LINE_FENCE, [(3, 6)], {4, 5}),
        (NESTED_WIDTH, [(3, 8)], set()),
        # A fence in a nested item ends with it; the line that ends it opens none.
        ("- a\n  1. b\n     ```\n     x\n  2. c\n     ## in c", [(0, 6)], {2, 3}),
        # Under the nested item it closes as CommonMark closes it, within that item.
        ("- a\n  - b\n    ~~~\n    ~~~\n  - c", [(0, 5)], {2, 3}),
        # "  ```" ends the nested item and its fence, and opens a fence of the entry.
        ("- a\n  - b\n    ```\n  ```\n  x\nlazy?", [(0, 5)], {2, 3, 4}),
        # A nested item without text ends at a blank line; the entry goes on.
        ("- a\n\n  -\n\n  b\nlazy", [(0, 6)], set()),
        # One item in another on one line; then a heading on an item's line.
        ("- - a\n    b\n- # h\nnot lazy", [(0, 2), (2, 3)], set()),
        # An item line whose text is a thematic break: no paragraph to go on with.
        ("- * * *\nnot lazy", [(0, 1)], set()),
        # A fence on an item's line closes within the item, at its width.
        ("1. ~~~\n   x\n   ~~~\n   ## in the item\n## Notes", [(0, 4)], {0, 1, 2}),
    ],
)
def test_nested_lists_and_item_line_fences_read_as_commonmark_reads_them(
    text: str, items: list[tuple[int, int]], fenced: set[int]
) -> None:
    assert commonmark_items(text) == items
    assert spans(text) == items
    assert commonmark_code(text) == fenced
    assert code(text) == fenced


@pytest.mark.parametrize(
    ("text", "closing"),
    [
        ("- a\n  - b\n    ```\n    x", "    ```"),  # in the nested item
        ("- a\n  - b\n    ```\n    x\n  - c", None),  # "- c" ended it
        ("- ```py\n  x", "  ```"),  # on the item's line: as far in as the item's text
        ("10) ```py\n    x", "    ```"),
        ("- a\n  1. ~~~~\n\n     x", "     ~~~~"),
        ("-\t```\n    x", "    ```"),  # a tab to column 4
        ("- a\n\t```\n  x", "    ```"),  # a tab, four columns in: still the item's
    ],
)
def test_the_line_that_closes_a_fence_in_an_item_stays_in_that_item(
    text: str, closing: str | None
) -> None:
    assert markdown_closing.closing_line(text) == closing
    if closing is not None:
        closed = f"{text}\n{closing}\nafter"
        assert len(closed.split("\n")) - 1 not in commonmark_code(closed)
        assert commonmark_items(closed) == spans(closed)


# -- through the tools --------------------------------------------------------------------------


async def test_a_replaced_entry_takes_the_lazy_line_after_its_nested_list(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, NESTED_FENCE)

    replaced = await tools.record_memory("Release with make release", replaces="Release steps")

    assert replaced == (
        "Recorded in MEMORY.md under ## Deploys and removed the entry '2026-02-01: Release "
        "steps: - build the image: ```sh make image - push it, then tag the release and "
        f"announce it in #ops.' (6 lines) (version {version + 1})."
    )
    # The line at the margin was the nested item's: it went with the entry, not left
    # behind to read as a line of whatever comes before it.
    assert memory(store)[0] == (
        "# MEMORY.md\n\n## Deploys\n- 2026-02-02: Staging deploys run on Fridays.\n"
        "- 2026-03-01: Release with make release\n"
    )


@pytest.mark.parametrize("text", [ITEM_LINE_FENCE, NESTED_ITEM_LINE_FENCE])
async def test_a_replaced_entry_leaves_the_paragraph_after_its_code(
    text: str, tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    version = await given(sync, FileKind.MEMORY, text)

    replaced = await tools.record_memory("Deploy with make deploy", replaces="make deploy")

    assert not replaced.failed and f"(version {version + 1})" in replaced
    stored = memory(store)[0]
    # CommonMark ends the item (and its code) at the margin line: the note is text of its
    # own, kept where it was; it used to be deleted with the entry.
    assert stored.endswith(
        "Ask Ann before deploying on Fridays.\n- 2026-03-01: Deploy with make deploy\n"
    )
    assert "make deploy\n" not in stored.replace("Deploy with make deploy\n", "")


async def test_a_replaced_entry_takes_the_paragraph_of_its_nested_item(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    await given(sync, FileKind.MEMORY, NESTED_WIDTH)

    replaced = await tools.record_memory("Release: build, then push.", replaces="Release:")

    assert not replaced.failed
    assert memory(store)[0] == (
        "# MEMORY.md\n\n## Steps\n- 2026-03-01: Release: build, then push.\n"
    )


async def test_a_key_in_an_item_line_fence_is_an_example_not_a_fact(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    text = "# USER.md\n\n## Profile\n- ```yaml\n  - Name: example\n  ```\n- Name: Ann\n"
    await given(sync, FileKind.USER, text)

    answer = await tools.update_user("Anna", section="Profile", key="Name")

    assert not answer.failed
    assert user_md(store)[0] == text.replace("- Name: Ann\n", "- Name: Anna\n")


async def test_a_key_after_a_nested_items_fence_is_found(
    tools: MemoryTools, sync: SyncService, store: MemoryStore
) -> None:
    # The next nested item ends the fence of the one before: its key is no code, and is
    # updated in place rather than written a second time.
    text = (
        "# USER.md\n\n## Profile\n- Contact format:\n  - as YAML:\n    ```yaml\n"
        "    name: x\n  - Email: ann@example.com\n"
    )
    await given(sync, FileKind.USER, text)

    answer = await tools.update_user("ann@example.org", section="Profile", key="Email")

    assert not answer.failed
    assert user_md(store)[0] == text.replace("example.com", "example.org")


# -- the prompt's cut ---------------------------------------------------------------------------

OLDER = "".join(
    f"- 2026-01-{day:02d}: note {day} about the weekly release train and its owners\n"
    for day in range(1, 21)
)


@pytest.mark.parametrize(
    ("last", "tail"),
    [
        # The nested item "push it" ended the fence: no line to close it (one four columns
        # in would open a fence in "push it", and the marker would read as code).
        (
            "- 2026-02-01: Release steps:\n  - build the image:\n    ```sh\n    make image\n"
            "  - push it",
            "  - push it\n…[truncated",
        ),
        # A fence on the item's line is closed within the item, before the marker.
        ("- ```sh\n  make deploy", "  make deploy\n  ```\n…[truncated"),
    ],
)
def test_the_cut_closes_exactly_the_fence_left_open(last: str, tail: str) -> None:
    result = build_system_prompt(
        agents_md="",
        soul="",
        user="",
        memory=f"## Deploys\n{OLDER}{last}",
        token_limit=1500,
        count=lambda text: len(text.split()),
    )
    body = result.text.split('<file name="MEMORY.md">\n', 1)[1]
    assert tail in body
    marker = next(i for i, line in enumerate(body.split("\n")) if line.startswith("…["))
    assert marker not in commonmark_code(body)
