"""The read-back rule as a pure function: every row of the table in docs/ARCHITECTURE.md,
and the property that no input loses a side's text."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
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
)

BASE = SyncBase(3, "a\nb\nc\n")


def _blank(text: str) -> bool:
    """Whitespace, format characters (BOM, zero-width and bidi marks, soft hyphen) and
    marks with no letter (variation selectors, combining accents) show nothing: a file of
    only these was emptied, not written."""
    return all(c.isspace() or unicodedata.category(c) in ("Cf", "Mn", "Me") for c in text)


@pytest.mark.parametrize(
    ("row", "sandbox", "db", "base", "expected"),
    [
        # 1. sandbox missing or blank: the DB copy is pushed back; no DB row: nothing
        ("1 missing", None, BASE, None, Push(restore=True)),
        ("1 blank", " \n\t", BASE, BASE, Push(restore=True)),
        ("1 byte-order mark only", "\ufeff\r\n", BASE, BASE, Push(restore=True)),
        ("1 zero-width only", "\u200b \u2060\n", BASE, None, Push(restore=True)),
        # Bidi marks (an RTL editor leaves them in a file it empties), a soft hyphen, a
        # variation selector, a combining mark alone: each once replaced the whole DB copy.
        ("1 right-to-left mark only", "\u200f\n", BASE, BASE, Push(restore=True)),
        ("1 bidi marks only", "\u200e\u061c\u202b\u2066\n", BASE, BASE, Push(restore=True)),
        ("1 soft hyphen only", "\u00ad", BASE, BASE, Push(restore=True)),
        ("1 variation selector only", "\ufe0f", BASE, None, Push(restore=True)),
        ("1 combining marks only", " \u0301\u20dd\n", BASE, BASE, Push(restore=True)),
        ("1 all of them, no row", "\u200f\u00ad\ufe0f\u0301", None, None, Nothing()),
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
PUSHED = SyncBase(2, "a\nb\nc\nallergy\n", ("a\nb\nc\n",))


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


# The same, for a push that removed a line (a human deleted ``b``): a sandbox that still
# holds ``b`` was edited from the replaced copy, so a write-back would bring ``b`` back.
REMOVING = SyncBase(2, "a\nc\n", ("a\nb\nc\n",))


@pytest.mark.parametrize(
    ("row", "sandbox", "expected"),
    [
        (
            "an edit of the replaced copy: merged from it, the removal kept",
            "a\nb\nc\ndiet\n",
            Merge("a\nc\ndiet\n", 2),
        ),
        (
            "an edit of the pushed copy: written at the base version",
            "a\nc\ndiet\n",
            WriteBack("a\nc\ndiet\n", 2),
        ),
    ],
)
def test_a_base_whose_push_removed_a_line(row: str, sandbox: str, expected: Action) -> None:
    assert decide(sandbox, REMOVING, REMOVING) == expected, row


# -- the property: no input loses a side's text ------------------------------------------

lines = st.lists(
    st.sampled_from(
        ["a", "b", "c", "d", "", "- x", "- y", "\ufeff", "\u200b ", "\u200f", "\u0301"]
    ),
    max_size=6,
)
texts = lines.map(lambda ls: "\n".join(ls))
maybe_text = st.one_of(st.none(), texts)
stored = st.builds(SyncBase, st.integers(1, 5), texts)
maybe_stored = st.one_of(st.none(), stored)
# Bases may also name the copy their push replaced (a record written ahead of the file).
bases = st.one_of(
    st.none(), st.builds(SyncBase, st.integers(1, 5), texts, st.lists(texts, max_size=1).map(tuple))
)


@st.composite
def _inputs(draw: st.DrawFn) -> tuple[str | None, SyncBase | None, SyncBase | None]:
    """A sandbox text, a base and a DB row. Often the row is the one the base still
    matches and the sandbox text is made of the base's lines (the pushed and the replaced
    copy's), so the rows that tell an edit of one copy from the other are reached, not
    left to chance."""
    base = draw(bases)
    db = draw(maybe_stored)
    sandbox = draw(maybe_text)
    if base is not None and draw(st.booleans()):
        db = SyncBase(base.version, base.content)
    if base is not None and draw(st.booleans()):
        pool = [*base.content.split("\n"), *(base.previous or "").split("\n"), "d"]
        sandbox = "\n".join(draw(st.lists(st.sampled_from(pool), max_size=8)))
    return sandbox, base, db


def _added(text: str, base: str) -> set[str]:
    return set(text.split("\n")) - set(base.split("\n"))


def _origin(sandbox: str, base: SyncBase) -> str:
    """The copy a sandbox edit started from, spelled out line by line rather than taken
    from ``edited_from``, so the property checks that function instead of restating it:
    the pushed copy when the sandbox holds every line the push added and none it removed,
    else the copy the push replaced."""
    if base.previous is None:
        return base.content
    held = sandbox.split("\n")
    pushed, replaced = base.content.split("\n"), base.previous.split("\n")
    added = [line for line in pushed if line not in replaced]
    removed = [line for line in replaced if line not in pushed]
    if all(line in held for line in added) and not any(line in held for line in removed):
        return base.content
    return base.previous


def _merge(origin: str, sandbox: str, db: str, base: SyncBase) -> str | None:
    """The merge from ``origin``; from the copy a push replaced, without the append rule:
    the push's appended lines, missing from the sandbox, and the sandbox's own may be one
    block the agent changed, which two appends would store twice."""
    return merge3(origin, sandbox, db, appends=origin == base.content)


# More examples than the default: an input that tells the two copies apart needs several
# draws to line up, and each example costs well under a millisecond.
@settings(max_examples=1000)
@given(_inputs(), st.booleans())
def test_no_input_loses_a_sides_text(
    inputs: tuple[str | None, SyncBase | None, SyncBase | None], authoritative: bool
) -> None:
    sandbox, base, db = inputs
    action = decide(sandbox, db, base, db_authoritative=authoritative)
    blank = sandbox is None or _blank(sandbox)
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
            or (base is not None and sandbox in (base.content, *base.older))
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
                and _origin(sandbox, base) == base.content
            )
        )
        assert action.expected == (0 if db is None else db.version)
    elif isinstance(action, Merge):
        # Both sides' added lines survive, and the write is conditional on the DB copy
        # that was merged.
        assert base is not None and db is not None and sandbox is not None
        origin = _origin(sandbox, base)
        assert action.content == _merge(origin, sandbox, db.content, base)
        merged = set(action.content.split("\n"))
        assert _added(sandbox, origin) <= merged
        assert _added(db.content, origin) <= merged
        assert action.expected == db.version
    else:
        # Preserve: the two edits overlap; the sandbox text is kept aside, the DB one wins.
        assert isinstance(action, Preserve)
        assert base is not None and db is not None and sandbox is not None
        assert _merge(_origin(sandbox, base), sandbox, db.content, base) is None
