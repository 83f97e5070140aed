"""The library's refusals name the input at fault (``InvalidContentError.field``, which
HTTP's 422 turns into its ``loc``) and word NUL and lone surrogates by the one shared rule
(``memstrata.text.unstorable_text``), user ids included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from memstrata.errors import InvalidContentError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id
from memstrata.memory.store import MemoryStore, check_expected_version
from memstrata.runtime import Memstrata
from memstrata.text import unstorable_text

Call = Callable[[Memstrata], Any]

CALLS: list[tuple[str, Call, str | None]] = [
    ("blank query", lambda m: m.search.search("alice", " "), "query"),
    ("NUL query", lambda m: m.search.search("alice", "tea\x00"), "query"),
    ("top_k", lambda m: m.search.search("alice", "tea", top_k=0), "top_k"),
    ("sources", lambda m: m.search.search("alice", "tea", sources=["web"]), "sources"),
    ("as_of", lambda m: m.search.search("alice", "tea", as_of="now"), "as_of"),  # type: ignore[arg-type]
    ("content", lambda m: m.store.upsert_memory_file("alice", "user", "a\x00"), "content"),
    (
        "expected_version",
        lambda m: m.store.upsert_memory_file("alice", "user", "a", -1),
        "expected_version",
    ),
    ("turn text", lambda m: m.indexer.index_turn("alice", "s1", 0, "a\x00"), "user_message"),
    ("turn_index", lambda m: m.indexer.index_turn("alice", "s1", -1, "hi"), "turn_index"),
    ("empty round", lambda m: m.indexer.index_turn("alice", "s1", 0, ""), None),
    ("skill switch", lambda m: m.skills.set_enabled("alice", "web_search", "no"), "enabled"),  # type: ignore[arg-type]
    ("background", lambda m: m.import_rounds("alice", [], background="no"), "background"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "field"), [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_a_refusal_names_its_input(
    open_runtime: Callable[..., Memstrata], call: Call, field: str | None
) -> None:
    with pytest.raises(InvalidContentError) as info:
        call(open_runtime())
    assert info.value.field == field, str(info.value)


def test_a_query_with_a_nul_has_the_shared_wording(
    open_runtime: Callable[..., Memstrata],
) -> None:
    with pytest.raises(InvalidContentError) as info:
        open_runtime().search.search("alice", "tea\x00")
    assert str(info.value) == unstorable_text("tea\x00", "query")
    assert str(info.value) == "query must not contain NUL characters ('\\x00' at character 4)"


def test_an_optional_expected_version_may_be_left_out_a_required_one_not() -> None:
    head = "expected_version must be an integer from 0 (the file must not exist yet) to 2147483647"
    with pytest.raises(InvalidContentError) as optional:
        check_expected_version(-1)
    with pytest.raises(InvalidContentError) as required:
        check_expected_version(-1, required=True)
    assert str(optional.value) == f"{head}, or left out; got -1"
    assert str(required.value) == f"{head}; got -1"
    with pytest.raises(InvalidContentError, match="got None"):
        check_expected_version(None, required=True)
    assert check_expected_version(None) is None


@pytest.mark.parametrize("user_id", ["bo\x00b", "bo\ud800b"], ids=["nul", "lone-surrogate"])
def test_a_user_id_that_cannot_be_stored_has_the_shared_wording(
    store: MemoryStore, user_id: str
) -> None:
    said = unstorable_text(user_id, "user_id")
    assert said is not None and "at character 3" in said
    with pytest.raises(InvalidUserIdError) as checked:
        validate_user_id(user_id)
    with pytest.raises(InvalidUserIdError) as read:
        store.get_memory_file(user_id, "user")
    assert str(checked.value) == str(read.value) == said
