"""A clean ``MEMSTRATA_*`` environment and the CLI through Typer's runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memstrata.cli import build_app


def clean_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, values: dict[str, str]
) -> dict[str, str]:
    """Only ``values`` among the MEMSTRATA_* variables, run from ``tmp_path`` (so no stray
    .env file is read); returns ``values``."""
    for name in list(os.environ):
        if name.startswith("MEMSTRATA_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def run_cli(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``memstrata ARGS``; an exception other than the
    exit fails the test."""
    result = CliRunner().invoke(build_app(), list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr
