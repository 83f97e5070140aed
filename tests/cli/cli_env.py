"""A clean ``MEMSTRATA_*`` environment, the CLI through Typer's runner, and ``memstrata
mcp`` as a real process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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


def start_mcp(
    tmp_path: Path, user: str = "alice", **settings: str
) -> tuple[subprocess.Popen[bytes], Path]:
    """``memstrata mcp --user USER`` with only ``settings`` (and a data directory in
    ``tmp_path``) of the MEMSTRATA_* environment; its stderr goes to the returned log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(MEMSTRATA_DATA_DIR=str(tmp_path), MEMSTRATA_ENVIRONMENT="development", **settings)
    log = tmp_path / "mcp.log"  # a file: a full stderr pipe would stall the server
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "memstrata.cli", "mcp", "--user", user],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            preexec_fn=_as_a_foreground_program,
        )
    return process, log


def _as_a_foreground_program() -> None:
    """Ctrl-C reaches the server as it would from a client in a terminal. A test run
    started in the background (``make test &``) passes SIGINT on as ignored, and `mcp`
    leaves an ignored SIGINT ignored, as a background job must: the SIGINT test then
    waited for an exit that could not come."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
