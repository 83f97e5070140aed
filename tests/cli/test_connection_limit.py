"""``memstrata serve`` serves a bounded number of connections: a real server per case.

Without a limit, connections that sent nothing — no token, not even a request line — were
held open without end, every one served, up to the process's file-descriptor limit (a
slowloris). With ``MEMSTRATA_MAX_CONNECTIONS`` (by default half the open-file limit) a
request that arrives while that many connections are open, its own included, gets uvicorn's
503 at once; once the idle connections close, requests are answered again.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from memstrata.api.server import MAX_DEFAULT_CONNECTIONS, connection_limit
from memstrata.serve_process import SERVE, free_port, start_serve, stop_serve, wait_ready

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def env(tmp_path: Path, pg_url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(tmp_path / "data"),
        "MEMSTRATA_ENVIRONMENT": "development",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_MCP_HTTP_ENABLED": "false",
    }


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """``serve(env)`` → the URL of a ready ``memstrata serve``; stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], open_files: int | None = None) -> str:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = tmp_path / f"serve-{port}.log"
        with log.open("wb") as output:
            if open_files is None:
                process = start_serve(env, port, stdout=output, stderr=output)
            else:  # as `ulimit -n` before it
                process = subprocess.Popen(
                    [*SERVE, "--host", "127.0.0.1", "--port", str(port)],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    preexec_fn=lambda: resource.setrlimit(
                        resource.RLIMIT_NOFILE, (open_files, open_files)
                    ),
                )
        started.append(process)
        wait_ready(process, url, timeout_s=60, path="/healthz", output=log.read_text)
        return url

    yield start
    for process in started:
        stop_serve(process)


def _idle(url: str, count: int, stack: ExitStack) -> None:
    """``count`` connections that send nothing at all (held until ``stack`` closes)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    for _ in range(count):
        stack.enter_context(socket.create_connection((host, int(port)), timeout=5))


def _status_soon(url: str, wanted: int, within_s: float = 10) -> int:
    """/healthz's status once it is ``wanted`` (the server accepts and drops connections
    on its own time), or the last one seen when the time runs out."""
    deadline = time.monotonic() + within_s
    while True:
        status = httpx.get(f"{url}/healthz", timeout=5).status_code
        if status == wanted or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def test_a_request_beyond_the_limit_gets_503_until_connections_close(
    env: dict[str, str], serve: Callable[..., str]
) -> None:
    url = serve({**env, "MEMSTRATA_MAX_CONNECTIONS": "4"})
    with ExitStack() as held:
        _idle(url, 2, held)  # with the request's own, 3 of 4
        assert _status_soon(url, 200) == 200
        _idle(url, 1, held)  # 4 of 4
        assert _status_soon(url, 503) == 503
        beyond = httpx.get(f"{url}/healthz", timeout=5)
        assert (beyond.status_code, beyond.text) == (503, "Service Unavailable")
    assert _status_soon(url, 200) == 200


def test_by_default_the_limit_is_half_the_open_file_limit(
    env: dict[str, str], serve: Callable[..., str]
) -> None:
    """A process allowed 256 open files serves 128 connections at once: 127 held open and
    the one asking fill them."""
    url = serve(env, open_files=256)
    with ExitStack() as held:
        _idle(url, 126, held)
        assert _status_soon(url, 200) == 200
        _idle(url, 1, held)
        assert _status_soon(url, 503) == 503
    assert _status_soon(url, 200) == 200


@pytest.mark.parametrize(
    ("configured", "open_files", "limit"),
    [
        (None, 1024, 512),  # systemd's default soft limit
        (None, 20000, MAX_DEFAULT_CONNECTIONS),
        (None, 1048576, MAX_DEFAULT_CONNECTIONS),  # Docker's default
        (None, 3, 2),
        (50, 1024, 50),  # the setting, whatever the file limit
        (9000, 1024, 9000),
    ],
)
def test_the_connection_limit(configured: int | None, open_files: int, limit: int) -> None:
    assert connection_limit(configured, open_files) == limit


def test_an_unlimited_file_limit_gets_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        resource, "getrlimit", lambda _which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    )
    assert connection_limit(None) == MAX_DEFAULT_CONNECTIONS
