"""Which release this is: ``memstrata --version``, the serve banner and the start-up log
line (review M7: ``--version`` was "No such option" and the version appeared nowhere).
The version is the installed package's (``importlib.metadata``), its one definition."""

from __future__ import annotations

import json
import os
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

import memstrata
from memstrata.db.migrate import schema_head
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.cli.cli_env import run_cli

RELEASE = f"memstrata {version('memstrata')} (schema {schema_head()})"


def test_version_option() -> None:
    assert run_cli("--version") == (0, f"{RELEASE}\n", "")
    assert memstrata.__version__ == version("memstrata")


@pytest.mark.timeout(90)
def test_the_banner_and_the_start_up_log_line_name_the_release(tmp_path: Path, pg_url: str) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "development",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
    }
    port = free_port()
    log = tmp_path / "stderr.log"  # a file: a full pipe would stall the server
    with log.open("w") as stderr:
        process = start_serve(env, port, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert process.stdout is not None
        banner = [process.stdout.readline().rstrip("\n") for _ in range(5)]
        wait_ready(process, f"http://127.0.0.1:{port}", timeout_s=60, path="/healthz")
    finally:
        stop_serve(process)
        process.communicate()
    assert banner[0].startswith("memstrata listening on "), banner
    assert banner[4] == f"  release     {RELEASE.removeprefix('memstrata ')}", banner
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    started = [line for line in lines if line.get("event") == "server.started"]
    assert len(started) == 1, log.read_text()[-2000:]
    assert started[0]["version"] == version("memstrata")
    assert started[0]["schema_head"] == schema_head()
