"""The library's argument errors say in English what is wrong and name the argument:
a file kind's error began with the HTTP spec's Chinese detail (``无效的文件名: ...``),
which HTTP still answers verbatim; a bad ``token_limit`` had ``field=None``; a user id
of the wrong type did not say which type it was, nor carry ``field``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from memstrata.errors import InvalidContentError, InvalidFileTypeError, InvalidUserIdError
from memstrata.memory.kinds import api_kind, parse_kind
from memstrata.runtime import Memstrata

CJK = re.compile(r"[\u3000-\u9fff]")


@pytest.mark.parametrize(
    "refuse",
    [
        lambda: parse_kind("User"),
        lambda: parse_kind(3),  # type: ignore[arg-type]
        lambda: parse_kind("AGENTS.md"),
        lambda: api_kind("agents"),
        lambda: api_kind("memroy", agents=True),
    ],
)
def test_a_file_kind_error_is_english(refuse: Callable[[], object]) -> None:
    with pytest.raises(InvalidFileTypeError) as refused:
        refuse()
    message = str(refused.value)
    assert message.startswith("invalid file name: "), message
    assert CJK.search(message) is None, message


def test_a_bad_token_limit_names_its_field(open_runtime: Callable[..., Memstrata]) -> None:
    mem = open_runtime()
    for bad in ("128000", 0, True):
        with pytest.raises(InvalidContentError, match="token_limit") as refused:
            asyncio.run(mem.open_agent_session("limit-user", token_limit=bad))  # type: ignore[arg-type]
        assert refused.value.field == "token_limit"


@pytest.mark.parametrize(("bad", "named"), [(None, "NoneType"), (123, "int"), (b"bob", "bytes")])
def test_a_user_id_of_another_type_is_named(
    open_runtime: Callable[..., Memstrata], bad: object, named: str
) -> None:
    mem = open_runtime()
    with pytest.raises(
        InvalidUserIdError, match=f"user_id must be a non-empty string, got {named}"
    ) as refused:
        mem.store.get_memory_file(bad, "user")  # type: ignore[arg-type]
    assert refused.value.field == "user_id"
    with pytest.raises(InvalidUserIdError) as blank:
        mem.holds_user("  ")
    assert blank.value.field == "user_id"
    assert str(blank.value) == "user_id must be a non-empty string"
