"""The read-back rule as a pure function: every row of the table in docs/ARCHITECTURE.md,
and the property that no input loses a side's text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.sandbox.merge import merge3
from memstrata.sandbox.rule import (
    Action,
    Merge,
    Nothing,
    Preserve,
    Push,
    SyncBase,
    WriteBack,
    decide,
    edited_from,
)

BASE = SyncBase(3, "a\nb\nc\n")
INVISIBLE = "\ufeff\u200b\u200c\u200d\u2060"  # show nothing; an editor may leave them


@pytest.mark.parametrize(
    ("row", "sandbox", "db", "base", "expected"),
    [
        # 1. sandbox missing or blank: the DB copy is pushed back; no DB row: nothing
        ("1 missing", None, BASE, None, Push(restore=True)),
        ("1 blank", " \n\t", BASE, BASE, Push(restore=True)),
        ("1 byte-order mark only", "\ufeff\r\n", BASE, BASE, Push(restore=True)),
        ("1 zero-width only", "\u200b \u2060\n", BASE, None, Push(restore=True)),
        ("1 both empty", None, None, None, Nothing()),
        ("1 blank, no row", "", None, BASE, Nothing()),
        # 2. sandbox equals the DB: nothing is written
        ("2 equal", "a\nb\nc\n", BASE, None, Nothing()),
        ("2 equal, old base", "x\n", SyncBase(4, "x\n"), BASE, Nothing()),
        # 3. sandbox equals its base: it lags behind the DB, which is pushed
        ("3 lagging", "a\nb\nc\n", SyncBase(5, "a\nB\nc\n"), BASE, Push()),
        # 4. no DB row: the sandbox edit is inserted (version 0 = must not exist)
        ("4 no row", "new\n", None, None, WriteBack("new\n", 0)),
        ("4 no row, base", "new\n", None, BASE, WriteBack("new\n", 0)),
        # 5. no base: the spec's plain sandbox-first rule, at the current version
        ("5 no base", "edit\n", SyncBase(7, "db\n"), None, WriteBack("edit\n", 7)),
        # 6. the DB has not moved since the base: written at the base version
        ("6 edit", "a\nb\nc\nd\n", BASE, BASE, WriteBack("a\nb\nc\nd\n", 3)),
        # 7. the DB moved since the base: a clean merge is stored at the current version ...
        (
            "7 merge",
            "a\nb\nc\nagent\n",
            SyncBase(4, "human\na\nb\nc\n"),
            BASE,
            Merge("human\na\nb\nc\nagent\n", 4),
        ),
        # ... and overlapping edits let the DB copy (the human's) win, the agent's kept aside
        ("7 conflict", "a\nAGENT\nc\n", SyncBase(4, "a\nHUMAN\nc\n"), BASE, Preserve()),
    ],
)
def test_every_row_of_the_rule(
    row: str, sandbox: str | None, db: SyncBase | None, base: SyncBase | None, expected: Action
) -> None:
    assert decide(sandbox, db, base) == expected, row


@pytest.mark.parametrize(
    ("row", "sandbox", "base", "expected"),
    [
        # A frontend edit being pushed: the DB copy is authoritative.
        ("unreadable or blank", None, BASE, Push(restore=True)),
        ("already equal: pushed anyway", "db\n", None, Push()),
        ("no base: a stale copy, replaced", "old\n", None, Push()),
        ("equals its base: replaced", "a\nb\nc\n", BASE, Push()),
    ],
)
def test_the_frontend_push_rows(
    row: str, sandbox: str | None, base: SyncBase | None, expected: Action
) -> None:
    assert decide(sandbox, SyncBase(4, "db\n"), base, db_authoritative=True) == expected, row


def test_a_frontend_push_merges_a_pending_edit_with_the_human_one() -> None:
    db = SyncBase(4, "human\na\nb\nc\n")
    assert decide("a\nb\nc\nagent\n", db, BASE, db_authoritative=True) == Merge(
        "human\na\nb\nc\nagent\n", 4
    )
    assert decide("a\nAGENT\nc\n", SyncBase(4, "a\nHUMAN\nc\n"), BASE, db_authoritative=True) == (
        Preserve()
    )


# A base recorded ahead of a push whose file write may have failed: the sandbox may still
# hold ``previous`` (the template here), or the pushed copy, or an agent's edit of either.
PUSHED = SyncBase(2, "a\nb\nc\nallergy\n", previous="a\nb\nc\n")


@pytest.mark.parametrize(
    ("row", "sandbox", "db", "expected"),
    [
        ("the replaced copy lags", "a\nb\nc\n", PUSHED, Push()),
        ("the pushed copy", "a\nb\nc\nallergy\n", PUSHED, Nothing()),
        ("the replaced copy, DB moved on", "a\nb\nc\n", SyncBase(3, "x\n"), Push()),
        (
            "an edit of the replaced copy: merged from it, the push's line kept",
            "diet\na\nb\nc\n",
            PUSHED,
            Merge("diet\na\nb\nc\nallergy\n", 2),
        ),
        (
            "an edit of the pushed copy: written at the base version",
            "diet\na\nb\nc\nallergy\n",
            PUSHED,
            WriteBack("diet\na\nb\nc\nallergy\n", 2),
        ),
    ],
)
def test_a_base_that_names_the_copy_its_push_replaced(
    row: str, sandbox: str, db: SyncBase, expected: Action
) -> None:
    assert decide(sandbox, db, PUSHED) == expected, row


# -- the property: no input loses a side's text ------------------------------------------

lines = st.lists(
    st.sampled_from(["a", "b", "c", "d", "", "- x", "- y", "\ufeff", "\u200b "]), max_size=6
)
texts = lines.map(lambda ls: "\n".join(ls))
maybe_text = st.one_of(st.none(), texts)
stored = st.builds(SyncBase, st.integers(1, 5), texts)
maybe_stored = st.one_of(st.none(), stored)
# Bases may also name the copy their push replaced (a record written ahead of the file).
bases = st.one_of(
    st.none(), st.builds(SyncBase, st.integers(1, 5), texts, st.one_of(st.none(), texts))
)


def _added(text: str, base: str) -> set[str]:
    return set(text.split("\n")) - set(base.split("\n"))


@given(maybe_text, maybe_stored, bases, st.booleans())
def test_no_input_loses_a_sides_text(
    sandbox: str | None, db: SyncBase | None, base: SyncBase | None, authoritative: bool
) -> None:
    action = decide(sandbox, db, base, db_authoritative=authoritative)
    shown = None if sandbox is None else sandbox.translate(dict.fromkeys(map(ord, INVISIBLE)))
    blank = shown is None or not shown.strip()
    if isinstance(action, Nothing):
        # Nothing happens only when both sides already hold the same text (or neither any).
        assert (blank and db is None) or (db is not None and sandbox == db.content)
    elif isinstance(action, Push):
        # The DB copy replaces the sandbox only when the sandbox holds no edit of its own:
        # blank, already equal, a lagging copy of its base, or a stale copy under a
        # frontend push that has no base to tell an edit from a stale copy.
        assert db is not None
        assert (
            blank
            or sandbox == db.content
            or (base is not None and sandbox in (base.content, base.previous))
            or (authoritative and base is None)
        )
    elif isinstance(action, WriteBack):
        # The sandbox text is stored as it is, only over a DB copy it was based on (holding
        # every change of the push that recorded it), a missing row, or (no base: the
        # spec's sandbox-first rule) the current row.
        assert action.content == sandbox
        assert (
            db is None
            or (base is None and not authoritative)
            or (
                base is not None
                and (base.version, base.content) == (db.version, db.content)
                and edited_from(sandbox, base) == base.content
            )
        )
        assert action.expected == (0 if db is None else db.version)
    elif isinstance(action, Merge):
        # Both sides' added lines survive, and the write is conditional on the DB copy
        # that was merged.
        assert base is not None and db is not None and sandbox is not None
        origin = edited_from(sandbox, base)
        assert action.content == merge3(origin, sandbox, db.content)
        merged = set(action.content.split("\n"))
        assert _added(sandbox, origin) <= merged
        assert _added(db.content, origin) <= merged
        assert action.expected == db.version
    else:
        # Preserve: the two edits overlap; the sandbox text is kept aside, the DB one wins.
        assert isinstance(action, Preserve)
        assert base is not None and db is not None and sandbox is not None
        assert merge3(edited_from(sandbox, base), sandbox, db.content) is None
