"""Two runtimes of one process on one embedded data directory share its server: closing
one leaves it running for the other, the last close stops it — a restart by the monitor
included (the restarted postmaster used to outlive the last close and the process, an
orphan with parent pid 1)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Prints "reads" when b read right after a closed, then the postmaster's pid once both
# are closed.
TWO_RUNTIMES = """
import os, sys, time
from memstrata.config import Settings
from memstrata.runtime import Memstrata
settings = Settings(environment="test")
a = Memstrata.open(settings, embedder=None)
b = Memstrata.open(settings, embedder=None)
b.start_background()
b.store.provision_default_files("shared-user")
pgdata = os.path.join(os.environ["MEMSTRATA_DATA_DIR"], "pgdata")
def postmaster():
    return int(open(os.path.join(pgdata, "postmaster.pid")).readline())
if sys.argv[1] == "kill":
    killed = postmaster()
    os.kill(killed, 9)
    deadline = time.monotonic() + 60
    while True:
        try:
            # A backend the killed postmaster left behind may still answer a read: wait
            # for the monitor's new server (postmaster.pid is gone meanwhile: raises).
            if postmaster() != killed:
                b.store.get_memory_file("shared-user", "user")
                break
        except Exception:
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("the embedded server was not restarted within 60 s")
        time.sleep(0.3)
    print("restarted", flush=True)
a.close()
b.store.get_memory_file("shared-user", "user")  # no outage: the server is b's too
print("reads", flush=True)
print(postmaster(), flush=True)
b.close()
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["MEMSTRATA_DATA_DIR"] = str(data_dir)
    env["MEMSTRATA_LOG_LEVEL"] = "WARNING"
    env["MEMSTRATA_DB_CHECK_INTERVAL_S"] = "0.25"
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def _stopped(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _alive(pid)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["none", "kill"])
def test_the_last_of_two_runtimes_stops_the_shared_embedded_server(
    tmp_path: Path, fault: str
) -> None:
    run = subprocess.run(
        [sys.executable, "-c", TWO_RUNTIMES, fault],
        env=_env(tmp_path), capture_output=True, text=True, timeout=200,
    )  # fmt: skip
    lines = run.stdout.split()
    pid = int(lines[-1]) if lines and lines[-1].isdigit() else None
    try:
        assert run.returncode == 0, run.stderr[-3000:]
        assert "reads" in lines, run.stderr[-3000:]
        assert pid is not None
        # The process has exited: its server must not run on.
        assert _stopped(pid, 20), f"postmaster {pid} outlived the last close and the process"
        # Closing the first runtime never stopped the server under the second.
        assert "db.lost" not in run.stderr or fault == "kill", run.stderr[-3000:]
        assert "db.embedded.restarting" not in run.stderr or fault == "kill"
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGQUIT)  # the leak this test found: end it
