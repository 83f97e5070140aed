"""What ``memstrata serve`` prints is where it serves: a real server process per case.

``MEMSTRATA_PORT=0`` picks a free port as ``--port 0`` does (the setting refused 0), and
the banner's docs URL follows ``MEMSTRATA_API_PREFIX`` and ``MEMSTRATA_API_DOCS`` (it
pointed at ``<prefix>/docs``, which was a 404, and at docs that were turned off).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memstrata.serve_process import SERVE, free_port, start_serve, stop_serve, wait_ready

pytestmark = pytest.mark.timeout(60)

LISTENING = "memstrata listening on "


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "development",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_LOG_JSON": "false",
    }


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        stop_serve(process)
        process.communicate()


def _first_line(process: subprocess.Popen[str]) -> str:
    """The banner's first line (printed once the port is bound), or a failure with stderr."""
    assert process.stdout is not None and process.stderr is not None
    line = process.stdout.readline().rstrip("\n")
    if not line.startswith(LISTENING):
        process.kill()
        pytest.fail(f"no banner: {line!r}; stderr:\n{process.stderr.read()[-3000:]}")
    return line


def test_memstrata_port_zero_picks_a_free_port(
    env: dict[str, str], started: list[subprocess.Popen[str]]
) -> None:
    pipe = subprocess.PIPE
    process = subprocess.Popen(
        [*SERVE, "--host", "127.0.0.1"],
        env={**env, "MEMSTRATA_PORT": "0"},
        stdin=subprocess.DEVNULL,
        stdout=pipe,
        stderr=pipe,
        text=True,
    )
    started.append(process)
    url = _first_line(process).removeprefix(LISTENING).split()[0]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, url
    wait_ready(process, url, timeout_s=30, path="/healthz")


@pytest.mark.parametrize("docs", [True, False])
def test_the_banner_shows_the_docs_under_the_prefix_when_they_are_served(
    env: dict[str, str], started: list[subprocess.Popen[str]], docs: bool
) -> None:
    port = free_port()
    served = {**env, "MEMSTRATA_API_PREFIX": "/mem", "MEMSTRATA_API_DOCS": str(docs).lower()}
    pipe = subprocess.PIPE
    process = start_serve(served, port, stdout=pipe, stderr=pipe, text=True)
    started.append(process)
    base = f"http://127.0.0.1:{port}/mem"
    line = _first_line(process)
    wait_ready(process, base, timeout_s=30, path="/healthz")
    if docs:
        assert line == f"{LISTENING}{base}  (API docs: {base}/docs)"
        assert httpx.get(f"{base}/docs", timeout=5).status_code == 200
    else:
        assert line == f"{LISTENING}{base}"
        assert httpx.get(f"{base}/docs", timeout=5).status_code == 404
    assert httpx.get(f"{base}/openapi.json", timeout=5).status_code == 200


def test_a_request_sent_as_soon_as_the_banner_shows_is_answered(
    env: dict[str, str], started: list[subprocess.Popen[str]]
) -> None:
    """The banner says "listening": a client that connects the moment it reads it is
    answered (the socket listens from the bind on; connections wait in its backlog until
    the server accepts them) instead of being refused while start-up finishes."""
    port = free_port()
    pipe = subprocess.PIPE
    process = start_serve(env, port, stdout=pipe, stderr=pipe, text=True)
    started.append(process)
    _first_line(process)
    response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=30)
    assert response.status_code == 200
