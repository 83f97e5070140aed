"""A host's sandbox provider that returns the wrong type: a sandbox failure, not a crash.

Before, ``read_text`` returning ``bytes`` or ``list`` returning ``[None, 3]`` passed the
deadline wrapper unchecked and failed wherever a caller first touched the value:
``end_round()`` raised ``AttributeError: 'int' object has no attribute 'isspace'``,
``list_copies`` raised, and ``record_memory`` answered "could not be saved
(AttributeError)" though the DB write had committed. ``TimedSandbox`` (which every
provider call goes through) now checks each result against the ``Sandbox`` protocol and
raises ``SandboxError`` naming the method and the type, which the usual degrade paths
turn into ``sandbox_failed``.

Real PostgreSQL and a real local sandbox behind the provider; the only fake is the
wrapper that corrupts the chosen methods' results.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import SandboxError
from memstrata.memory.conflicts import list_copies
from memstrata.memory.kinds import FileKind
from memstrata.runtime import Memstrata
from memstrata.sandbox.base import Sandbox, Undecodable
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.results import Outcome
from memstrata.sandbox.timed import with_deadline

pytestmark = pytest.mark.anyio

USER = "wrong-types"


class WrongSandbox:
    """A real sandbox whose methods named in ``wrong`` return that value instead."""

    def __init__(self, inner: Sandbox, wrong: dict[str, object]) -> None:
        self._inner = inner
        self._wrong = wrong
        self.case_sensitive = inner.case_sensitive

    def _result(self, method: str, real: object) -> Any:
        return self._wrong.get(method, real)

    async def read_text(self, path: str) -> Any:
        return self._result("read_text", await self._inner.read_text(path))

    async def write_text(self, path: str, content: str) -> Any:
        await self._inner.write_text(path, content)
        return self._wrong.get("write_text")

    async def exists(self, path: str) -> Any:
        return self._result("exists", await self._inner.exists(path))

    async def list(self, prefix: str = "") -> Any:
        return self._result("list", await self._inner.list(prefix))

    async def delete(self, path: str) -> Any:
        await self._inner.delete(path)
        return self._wrong.get("delete")


class WrongProvider:
    def __init__(self, inner: LocalSandboxProvider) -> None:
        self.inner = inner
        self.wrong: dict[str, object] = {}

    def for_user(self, user_id: str, session_id: str | None = None) -> WrongSandbox:
        return WrongSandbox(self.inner.for_user(user_id, session_id), self.wrong)


@pytest.fixture
def provider(tmp_path: Path) -> WrongProvider:
    return WrongProvider(LocalSandboxProvider(tmp_path / "sandboxes"))


@pytest.mark.parametrize(
    ("method", "value", "message"),
    [
        (
            "read_text",
            b"text",
            "read_text returned bytes; a SandboxProvider's read_text returns str or None",
        ),
        (
            "read_text",
            3,
            "read_text returned int; a SandboxProvider's read_text returns str or None",
        ),
        (
            "list",
            [None, 3],
            "list returned a list holding NoneType; a SandboxProvider's list returns a list of str",
        ),
        ("list", "a.md", "list returned str; a SandboxProvider's list returns a list of str"),
        ("list", ("a.md",), "list returned tuple; a SandboxProvider's list returns a list of str"),
        ("exists", None, "exists returned NoneType; a SandboxProvider's exists returns bool"),
        ("exists", "yes", "exists returned str; a SandboxProvider's exists returns bool"),
    ],
)
async def test_a_result_of_the_wrong_type_is_a_sandbox_error_naming_method_and_type(
    provider: WrongProvider, method: str, value: object, message: str
) -> None:
    provider.wrong[method] = value
    sandbox = with_deadline(provider, 5.0).for_user(USER)
    argument = "" if method == "list" else "USER.md"  # a prefix, or a path
    with pytest.raises(SandboxError) as raised:
        await getattr(sandbox, method)(argument)
    assert str(raised.value) == message


async def test_results_of_the_protocols_types_pass_unchanged(provider: WrongProvider) -> None:
    sandbox = with_deadline(provider, 5.0).for_user(USER)
    assert await sandbox.read_text("USER.md") is None
    assert await sandbox.exists("USER.md") is False
    assert await sandbox.list("") == []
    await sandbox.write_text("notes/a.md", "tea")
    assert await sandbox.read_text("notes/a.md") == "tea"
    assert await sandbox.exists("notes/a.md") is True
    assert await sandbox.list("") == ["notes/a.md"]
    kept = Undecodable(b"caf\xe9")  # a str: how a provider hands back a file not text
    provider.wrong["read_text"] = kept
    assert await sandbox.read_text("notes/a.md") is kept


@pytest.fixture
def mem(settings: Settings, db: Database, provider: WrongProvider) -> Iterator[Memstrata]:
    runtime = Memstrata.open(settings, database=db, sandboxes=provider, embedder=None)
    yield runtime
    runtime.close()


@pytest.mark.parametrize(
    "wrong",
    [{"read_text": b"bytes"}, {"list": [None, 3]}, {"read_text": b"bytes", "list": [None, 3]}],
    ids=["read_text-bytes", "list-junk", "both"],
)
async def test_a_provider_returning_wrong_types_degrades_to_sandbox_failed(
    mem: Memstrata, provider: WrongProvider, wrong: dict[str, object]
) -> None:
    session = await mem.open_agent_session(USER, token_limit=8000, session_id="chat-1")
    try:
        provider.wrong.update(wrong)
        answer = await session.tools.call("record_memory", json.dumps({"content": "likes tea"}))
        assert "could not be saved" not in str(answer), answer
        assert str(answer).startswith("Recorded in MEMORY.md"), answer
        session.on_tool_call("record_memory", json.dumps({"content": "likes tea"}))
        results = await session.end_round()  # raised AttributeError before
        page = await list_copies(mem.sandboxes, USER)  # raised AttributeError before
    finally:
        session.close()
    if "read_text" in wrong:
        message = "read_text returned bytes; a SandboxProvider's read_text returns str or None"
        assert results != []
        assert {r.outcome for r in results} == {Outcome.SANDBOX_FAILED}
        assert {r.detail for r in results} == {f"SandboxError: {message}"}
    if "list" in wrong:
        assert (page.sandbox, page.copies, page.total) == ("sandbox_failed", [], None)
        assert "(SandboxError)" in page.warnings[0], page.warnings
    else:
        assert (page.sandbox, page.copies) == ("ok", [])
    stored = mem.store.get_memory_file(USER, FileKind.MEMORY)
    assert stored is not None and "likes tea" in stored.content
