"""Session ids that look like another id: a character Unicode lists as a confusable of '/'
or '\\' that is no letter (``sessions/a∕b/0`` reads as a nested path), and whitespace at
either end (``" s"`` shows as ``s``). The rule (``retrieval.session_ids``) directly, then
MCP's ``conversation_index_turn`` by it. Letters of other scripts stay allowed, lookalikes
or not (Cyrillic ``аdmin``, Katakana ``ノ``): refusing a script refuses its users."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from memstrata.retrieval.session_ids import (
    SESSION_ID_HINT,
    SESSION_ID_RULE,
    InvalidSessionIdError,
    check_session_id,
)
from memstrata.runtime import Memstrata
from tests.mcp.conftest import ClientFactory
from tests.mcp.test_tools import refused

pytestmark = pytest.mark.anyio


def _said(session_id: str) -> str:
    with pytest.raises(InvalidSessionIdError) as refusal:
        check_session_id(session_id)
    return str(refusal.value)


@pytest.mark.parametrize(
    ("session_id", "named"),
    [
        ("a\u2215b", "U+2215 DIVISION SLASH"),
        ("a\u2044b", "U+2044 FRACTION SLASH"),
        ("a\uff0fb", "U+FF0F FULLWIDTH SOLIDUS"),
        ("a\u29f8b", "U+29F8 BIG SOLIDUS"),
        ("a\u2571b", "U+2571 BOX DRAWINGS LIGHT DIAGONAL UPPER RIGHT TO LOWER LEFT"),
        ("a\u2216b", "U+2216 SET MINUS"),
        ("a\uff3cb", "U+FF3C FULLWIDTH REVERSE SOLIDUS"),
        ("a\ufe68b", "U+FE68 SMALL REVERSE SOLIDUS"),
    ],
)
def test_a_slash_lookalike_is_refused_with_its_name(session_id: str, named: str) -> None:
    assert _said(session_id) == (
        f"invalid session_id {session_id!r}: character 2 is {named} (it looks like a path "
        f"separator); {SESSION_ID_HINT}"
    )


def test_every_compatibility_form_of_a_slash_is_refused() -> None:
    # Independent of the rule's list: whatever NFKC reads as '/' or '\' shows as one.
    forms = [
        chr(code)
        for code in range(0x80, sys.maxunicode + 1)
        if not 0xD800 <= code <= 0xDFFF
        and any(sep in unicodedata.normalize("NFKC", chr(code)) for sep in "/\\")
    ]
    assert len(forms) >= 7
    for char in forms:
        assert "path separator" in _said(f"a{char}b"), char


@pytest.mark.parametrize(
    ("session_id", "where", "named"),
    [
        (" s", "starts", "U+0020 SPACE"),
        ("s ", "ends", "U+0020 SPACE"),
        ("s\u3000", "ends", "U+3000 IDEOGRAPHIC SPACE"),
        ("\u00a0chat", "starts", "U+00A0 NO-BREAK SPACE"),
    ],
)
def test_whitespace_at_either_end_is_refused_not_stripped(
    session_id: str, where: str, named: str
) -> None:
    assert _said(session_id) == (
        f"invalid session_id {session_id!r}: it {where} with {named} (whitespace at either "
        f"end makes an id that shows like another); remove it; {SESSION_ID_HINT}"
    )


@pytest.mark.parametrize(
    "session_id", ["\u0430dmin", "\u30ce\u30fc\u30c8", "\u4e3f", "chat 2026", "a-b_c.d:e"]
)
def test_letters_of_any_script_and_inner_spaces_pass(session_id: str) -> None:
    assert check_session_id(session_id) == session_id


def test_the_rule_says_so() -> None:
    assert "look like '/' or '\\'" in SESSION_ID_RULE
    assert "whitespace at either end" in SESSION_ID_RULE


@pytest.mark.parametrize("session_id", ["a\u2215b", " s"])
async def test_conversation_index_turn_refuses_them(
    connect: ClientFactory, mem: Memstrata, session_id: str
) -> None:
    turn = {"session_id": session_id, "turn_index": 0, "user_message": "hi"}
    async with connect("alice") as client:
        said = await refused(client, "conversation_index_turn", turn)
    assert said.startswith(f"error: invalid session_id {session_id!r}: ")
    assert said.endswith(SESSION_ID_HINT)
    assert mem.search.search("alice", "hi", top_k=5).hits == []
