"""The banner's "get a token" command works as printed, from another shell.

``memstrata serve`` started with ``MEMSTRATA_DATA_DIR`` signs nothing itself: it checks
tokens against the development secret in that directory. The banner printed
``memstrata token --user alice``, which a second terminal (without the variable) ran
against the default data directory's secret: its token got 401 "token signature is
invalid" from the very server that suggested it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from memstrata.cli.serve import token_hint
from memstrata.config import Settings
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready

pytestmark = pytest.mark.timeout(90)


def _another_shell(tmp_path: Path) -> dict[str, str]:
    """None of the server's MEMSTRATA_* variables, and a default data directory of its own
    (so a token minted there never touches the real one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    return env | {"XDG_DATA_HOME": str(tmp_path / "other-shell")}


def test_the_printed_token_command_gets_a_token_the_server_accepts(
    tmp_path: Path, pg_url: str
) -> None:
    served = _another_shell(tmp_path) | {
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_JSON": "false",
    }
    port = free_port()
    pipe = subprocess.PIPE
    process = start_serve(served, port, stdout=pipe, stderr=pipe, text=True)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(6)]
        (hint,) = [
            line.split("get a token", 1)[1].strip() for line in lines if "get a token" in line
        ]
        wait_ready(process, f"http://127.0.0.1:{port}", timeout_s=30, path="/healthz")
        done = subprocess.run(
            hint,
            shell=True,
            env=_another_shell(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        token = done.stdout.strip()
        response = httpx.get(
            f"http://127.0.0.1:{port}/api/config/limits",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert response.status_code == 200, (hint, response.text)
    finally:
        stop_serve(process)
        process.communicate()


def test_the_hint_names_what_the_token_command_needs(tmp_path: Path) -> None:
    default = Settings(environment="development")
    assert token_hint(default, "memstrata") == "memstrata token --user alice"
    elsewhere = Settings(environment="development", data_dir=tmp_path / "my data")
    assert token_hint(elsewhere, "memstrata") == (
        f"MEMSTRATA_DATA_DIR='{tmp_path / 'my data'}' memstrata token --user alice"
    )
    secret = Settings(environment="development", jwt_secret="s" * 40, data_dir=tmp_path)
    assert token_hint(secret, "memstrata") == (
        "memstrata token --user alice  (with this server's MEMSTRATA_JWT_SECRET)"
    )
