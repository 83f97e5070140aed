"""What a platform reaches for first when it uses memstrata as a library: ``with
Memstrata.open(...)``, the sandbox directory to mount into its container, and the errors
it catches (each importable from ``memstrata.errors``, with the attributes HTTP names).

The names new with these tests are looked up on the modules (``errors.X``), so that each
test fails on its own without them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from memstrata import errors, runtime
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import InvalidContentError, MemstrataError, RuntimeClosedError
from memstrata.retrieval import rounds
from memstrata.sandbox.base import Sandbox
from memstrata.sandbox.local import LocalSandboxProvider

USER = "surface-user"


# -- with Memstrata.open(...) -----------------------------------------------------------------


def test_a_runtime_is_a_context_manager_that_closes_it(db: Database, settings: Settings) -> None:
    with runtime.Memstrata.open(settings, database=db) as mem:
        mem.store.provision_default_files(USER)
    with pytest.raises(RuntimeClosedError):
        mem.store.get_memory_file(USER, "user")
    # An exception inside the block closes it too, and goes on.
    with pytest.raises(KeyError), runtime.Memstrata.open(settings, database=db) as other:
        raise KeyError("the host's own error")
    with pytest.raises(RuntimeClosedError):
        other.list_users()


# -- the sandbox directory ------------------------------------------------------------------


def test_the_sandbox_directory_is_where_the_session_writes_its_files(
    open_runtime: Callable[..., runtime.Memstrata], settings: Settings
) -> None:
    """By the provider's own rule: a session id with characters it escapes lands in the
    directory named here, not in one a host would build by joining the names."""
    mem = open_runtime()
    session_id = "Chat:1 é"
    session = asyncio.run(mem.open_agent_session(USER, token_limit=8000, session_id=session_id))
    directory = mem.sandbox_directory(USER, session_id)
    assert isinstance(directory, Path)
    assert (directory / "MEMORY.md").read_text(encoding="utf-8").startswith("# MEMORY.md")
    assert directory != settings.resolved_sandbox_root / USER / "sessions" / session_id
    assert directory.is_relative_to(mem.sandbox_directory(USER))
    assert mem.sandbox_directory(USER).parent == settings.resolved_sandbox_root
    session.close()
    # A session id no session can have is refused, not escaped into a directory.
    with pytest.raises(InvalidContentError, match="invalid session_id"):
        mem.sandbox_directory(USER, "a/b")
    mem.close()
    with pytest.raises(RuntimeClosedError):
        mem.sandbox_directory(USER)


class HostProvider:
    """A platform's own sandboxes (its container volumes), which memstrata has no path of."""

    def __init__(self, root: Path) -> None:
        self.local = LocalSandboxProvider(root)

    def for_user(self, user_id: str, session_id: str | None = None) -> Sandbox:
        return self.local.for_user(user_id, session_id)


def test_a_host_providers_sandboxes_have_no_directory_here(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    host = HostProvider(tmp_path)
    with (
        runtime.Memstrata.open(settings, database=db, sandboxes=host) as mem,
        pytest.raises(errors.NoSandboxDirectoryError, match="HostProvider") as info,
    ):
        mem.sandbox_directory(USER, "chat-1")
    assert isinstance(info.value, MemstrataError)


# -- the errors -------------------------------------------------------------------------------


def test_rounds_invalid_error_is_one_of_memstratas_errors() -> None:
    assert errors.RoundsInvalidError is rounds.RoundsInvalidError
    assert issubclass(errors.RoundsInvalidError, InvalidContentError)


def test_a_version_conflict_carries_the_versions_by_their_http_names() -> None:
    conflict = errors.VersionConflictError(USER, "user_md", 3, 5)
    assert (conflict.expected_version, conflict.current_version) == (3, 5)
    assert (conflict.expected, conflict.actual) == (3, 5)
    assert errors.VersionConflictError(USER, "user_md", 1, None).current_version is None


def test_a_bad_setting_is_a_memstrata_error_naming_its_variable() -> None:
    """Still pydantic's ValidationError and a ValueError (callers that catch either go
    on working, and ``errors()`` and the per-field report are pydantic's), and a
    MemstrataError whose message names the MEMSTRATA_* variable of each setting and not
    the value given: a database URL's password was in pydantic's message."""
    with pytest.raises(errors.InvalidSettingError) as info:
        Settings(rrf_k=-1, database_url="mysql://u:S3cretPW@localhost/db")
    error = info.value
    assert isinstance(error, MemstrataError)
    assert isinstance(error, ValidationError) and isinstance(error, ValueError)
    assert [e["loc"] for e in error.errors()] == [("database_url",), ("rrf_k",)]
    first, *report = str(error).splitlines()
    assert first == "invalid settings: MEMSTRATA_DATABASE_URL, MEMSTRATA_RRF_K"
    assert report[:3] == [
        "2 validation errors for Settings",
        "database_url",
        "  Value error, must be a PostgreSQL URL (e.g. postgresql://user:password@host:5432/"
        "memstrata, or 'embedded'); got scheme 'mysql' [type=value_error]",
    ]
    assert "rrf_k\n  Input should be greater than or equal to 1" in str(error)
    assert "S3cretPW" not in str(error) and "S3cretPW" not in repr(error)


def test_a_bad_entry_inside_a_json_setting_is_named_by_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMSTRATA_EMBEDDING_MODELS", '[{"name": 3}]')
    with pytest.raises(errors.InvalidSettingError) as info:
        Settings()
    assert str(info.value).startswith(
        "invalid settings: MEMSTRATA_EMBEDDING_MODELS[0].name, MEMSTRATA_EMBEDDING_MODELS[0]\n"
    ), str(info.value)
    assert "embedding_models.0.name\n  must be a JSON string; got a JSON number" in str(info.value)
    assert info.value.errors()[0]["type"] == "embedding_model_entry"
