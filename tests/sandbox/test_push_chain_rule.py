"""The base record over a chain of pushes with no write-back between them (pure), and its
form on disk (real directory).

A record names every copy memstrata wrote to the file since the sandbox's last write-back
(``SyncBase.older``, at most ``MAX_OLDER_COPIES``), so a copy the agent read from any push
— and wrote back whole, as it is or with a line of its own — is read as the stale copy it
is, or merged from it: no push's change is undone. The same on a real database and real
directories: ``test_push_chains.py``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata.sandbox.local import LocalDirectorySandbox
from memstrata.sandbox.push import MAX_OLDER_COPIES, records
from memstrata.sandbox.rule import (
    Merge,
    Nothing,
    Push,
    SyncBase,
    WriteBack,
    decide,
    edited_from,
)
from memstrata.sandbox.state import base_path, read_base, write_base
from tests.sandbox.push_copies import MEMORY_MD, V1, V2, V3, file

AGENT_LINE = "- agent: a line of its own"


def copy(n: int) -> str:
    return f"# Memory\n- fact {n}\n"


def pushed_in_turn(copies: list[str], lands: list[bool] | None = None) -> SyncBase:
    """The record after pushing ``copies`` one after another with no write-back between
    (the first over an empty file); ``lands[i]``: whether push i's file write landed."""
    held: str | None = None
    record: SyncBase | None = None
    for version, content in enumerate(copies, 1):
        ahead, landed = records(file(version, content), held, record)
        if lands is None or lands[version - 1]:
            held, record = content, landed
        else:
            record = ahead
    assert record is not None
    return record


# -- the records ------------------------------------------------------------------------------


def test_three_pushes_leave_every_copy_in_the_record() -> None:
    record = pushed_in_turn([copy(1), copy(2), copy(3)])
    assert record == SyncBase(3, copy(3), (copy(1), copy(2)))


def test_a_copy_pushed_again_is_named_once_at_its_latest_place() -> None:
    record = pushed_in_turn([copy(1), copy(2), copy(1), copy(3)])
    assert record == SyncBase(4, copy(3), (copy(2), copy(1)))


def test_past_the_bound_the_newest_copies_are_kept() -> None:
    copies = [copy(n) for n in range(MAX_OLDER_COPIES + 3)]
    record = pushed_in_turn(copies)
    assert record.older == tuple(copies[-MAX_OLDER_COPIES - 1 : -1])


def test_past_the_bound_the_copy_the_file_holds_is_named_until_the_push_lands() -> None:
    # Every push after the first failed: the file still holds the first copy, which the
    # bound would drop; the record written ahead of the file still names it.
    copies = [copy(n) for n in range(MAX_OLDER_COPIES + 3)]
    lands = [True] + [False] * (len(copies) - 1)
    base = pushed_in_turn(copies[:-1], lands[:-1])
    ahead, landed = records(file(len(copies), copies[-1]), copies[0], base)
    assert ahead.older == (copies[0], *copies[-MAX_OLDER_COPIES - 1 : -1])
    assert landed.older == tuple(copies[-MAX_OLDER_COPIES - 1 : -1]) == ahead.older[1:]
    assert isinstance(decide(copies[0], SyncBase(len(copies), copies[-1]), ahead), Push)


def test_a_write_back_starts_the_copies_again() -> None:
    record = pushed_in_turn([copy(1), copy(2), copy(3)])
    edit = copy(3) + "- agent\n"  # the caller stored it: the file's copy is settled
    ahead, landed = records(file(4, copy(4)), edit, record)
    assert ahead == landed == SyncBase(4, copy(4), (edit,))


# -- the rule ---------------------------------------------------------------------------------

THREE = SyncBase(3, V3, (V1, V2))


@pytest.mark.parametrize(
    ("row", "sandbox", "expected"),
    [
        ("the first copy, as it is: it lags", V1, Push()),
        ("the middle copy, as it is: it lags", V2, Push()),
        ("the current copy", V3, Nothing()),
        ("the middle copy plus a line: merged from it", V1 + "- Z\n" + V2[len(V1) :], None),
        ("the current copy plus a line: written", V3 + "- Z\n", WriteBack(V3 + "- Z\n", 3)),
    ],
)
def test_a_write_of_any_copy_since_the_write_back(row: str, sandbox: str, expected: object) -> None:
    action = decide(sandbox, SyncBase(3, V3), THREE)
    if expected is None:
        assert action == Merge(V1 + "- Z\n- X: likes tea\n", 3), row
        assert edited_from(sandbox, THREE) == V2
    else:
        assert action == expected, row


# -- the property: writing a copy back never undoes a push --------------------------------

_lines = st.sampled_from([f"- fact {c}" for c in "abcdef"])
# A copy is a set of facts in a fixed order, so two copies with the same facts are one text;
# the section after them, which no push changes, is where the agent adds its line: its
# edit never touches a push's, so each merge is clean and its result can be checked.
_copies = st.lists(_lines, min_size=1, max_size=5, unique=True).map(
    lambda facts: "# Memory\n" + "".join(f"{fact}\n" for fact in sorted(facts)) + "## Notes\n"
)


@st.composite
def _chains(draw: st.DrawFn) -> tuple[list[str], list[bool], int]:
    """Copies pushed one after another (no more than the record keeps), which pushes'
    file writes landed (the first always: the copy the sandbox starts with), and after
    which push the agent read the file."""
    copies = draw(st.lists(_copies, min_size=2, max_size=MAX_OLDER_COPIES + 1))
    lands = [
        True,
        *draw(st.lists(st.booleans(), min_size=len(copies) - 1, max_size=len(copies) - 1)),
    ]
    return copies, lands, draw(st.integers(0, len(copies) - 1))


@settings(max_examples=500)
@given(_chains(), st.booleans())
def test_a_copy_read_from_any_push_and_written_back_never_undoes_a_push(
    chain: tuple[list[str], list[bool], int], adds_a_line: bool
) -> None:
    copies, lands, read_after = chain
    record = pushed_in_turn(copies, lands)
    # What the file held when the agent read it: the last copy whose write had landed.
    so_far = zip(copies[: read_after + 1], lands[: read_after + 1], strict=True)
    read = [content for content, landed in so_far if landed][-1]
    db = SyncBase(len(copies), copies[-1])
    written = read + f"{AGENT_LINE}\n" if adds_a_line else read

    action = decide(written, db, record)

    if not adds_a_line:
        assert isinstance(action, Push | Nothing)  # the DB copy stays
        return
    # The agent's line is stored with the latest copy's facts, no more and no fewer.
    assert isinstance(action, WriteBack | Merge)
    assert action.content == copies[-1] + f"{AGENT_LINE}\n"


# -- on disk ------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("count", [0, 1, 2, 3, MAX_OLDER_COPIES])
async def test_a_record_reads_back_as_written(count: int, user_box: LocalDirectorySandbox) -> None:
    record = SyncBase(9, copy(9), tuple(copy(n) for n in range(count)))
    await write_base(user_box, MEMORY_MD, record)
    assert await read_base(user_box, MEMORY_MD) == record


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("written", "older"),
    [
        ({}, ()),
        ({"previous": V1}, (V1,)),
        ({"previous": V1, "replacing": V2}, (V1, V2)),
        ({"previous": V1, "between": [V2, 3], "replacing": V3}, (V1, V2, V3)),
        ({"previous": V1, "between": "not a list", "replacing": V3}, (V1, V3)),
    ],
)
async def test_records_of_the_release_before_mean_what_they_meant(
    written: dict[str, object], older: tuple[str, ...], user_box: LocalDirectorySandbox
) -> None:
    """``previous`` (the oldest copy) and ``replacing`` (the copy the file held while a
    push landed, the newest) read as those copies; what is not text reads as absent."""
    raw = {"version": 3, "content": V3, **written}
    await user_box.write_text(base_path(MEMORY_MD), json.dumps(raw))
    assert await read_base(user_box, MEMORY_MD) == SyncBase(3, V3, older)
