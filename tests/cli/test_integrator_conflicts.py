"""`memstrata conflicts list --file X` refuses a name that is not user, soul or memory as
REST (`?file=`) and MCP (`memstrata://conflicts?file=`) do: their English message, with
what was given, on one line and exit status 1 — not the spec's Chinese 400 detail, nor
the write routes' "AGENTS.md ... is read-only; write one of ..." for a listing."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.api.errors import INVALID_FILE_NAME_MESSAGE
from tests.cli.cli_env import clean_env, run_cli


@pytest.mark.parametrize("file", ["diary", "agents", "MEMORY.md", "Memory", ""])
def test_a_bad_file_is_refused_in_the_words_of_rest_and_mcp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, file: str
) -> None:
    # No database: the name is refused before anything starts.
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    code, out, err = run_cli("conflicts", "list", "--user", "alice", "--file", file)
    assert (code, out) == (1, "")
    assert err == f"error: {INVALID_FILE_NAME_MESSAGE} (--file {file!r})\n"
    assert INVALID_FILE_NAME_MESSAGE == "invalid file name: use one of user, soul, memory"
    assert not (tmp_path / "data").exists()  # nothing was started


def test_a_long_bad_file_is_quoted_in_part(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    code, _, err = run_cli("conflicts", "list", "--user", "alice", "-f", "x" * 5000)
    assert code == 1
    assert err == f"error: {INVALID_FILE_NAME_MESSAGE} (--file {'x' * 100!r})\n"
