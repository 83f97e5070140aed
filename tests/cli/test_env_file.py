"""A misspelt ``MEMSTRATA_*`` line in ``./.env`` is named, as one in the environment is."""

from __future__ import annotations

from pathlib import Path

import pytest

from memstrata.config import env_file_variables
from memstrata.logs import event_fields
from tests.cli.cli_env import clean_env, run_cli


def _warned(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        {k: f[k] for k in ("name", "closest", "file") if k in f}
        for f in map(event_fields, caplog.records)
        if f.get("event") == "config.unknown_variable"
    ]


def test_an_unknown_variable_in_the_env_file_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clean_env(monkeypatch, tmp_path, {"MEMSTRATA_DATA_DIR": str(tmp_path / "data")})
    (tmp_path / ".env").write_text(
        "# a comment\nMEMSTRATA_PROT=5\nMEMSTRATA_LOG_JSON=false\nOTHER_PROGRAM=1\n"
        "export MEMSTRATA_DECAY_FLOR=0.5\n",
        encoding="utf-8",
    )
    code, _, _ = run_cli("token", "--user", "a")
    assert code == 0
    env_file = str(tmp_path / ".env")
    assert _warned(caplog) == [
        {"name": "MEMSTRATA_DECAY_FLOR", "closest": "MEMSTRATA_DECAY_FLOOR", "file": env_file},
        {"name": "MEMSTRATA_PROT", "closest": "MEMSTRATA_PORT", "file": env_file},
    ]


def test_a_name_in_both_is_named_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clean_env(
        monkeypatch,
        tmp_path,
        {"MEMSTRATA_DATA_DIR": str(tmp_path / "data"), "MEMSTRATA_PROT": "6"},
    )
    (tmp_path / ".env").write_text("MEMSTRATA_PROT=5\n", encoding="utf-8")
    code, _, _ = run_cli("token", "--user", "a")
    assert code == 0
    assert _warned(caplog) == [{"name": "MEMSTRATA_PROT", "closest": "MEMSTRATA_PORT"}]


def test_no_env_file_is_no_variables(tmp_path: Path) -> None:
    assert env_file_variables(tmp_path / ".env") == {}
    (tmp_path / ".env").write_text("MEMSTRATA_A=1\nMEMSTRATA_B\n", encoding="utf-8")
    assert env_file_variables(tmp_path / ".env") == {"MEMSTRATA_A": "1", "MEMSTRATA_B": ""}
