"""A start waits for a killed postmaster only while that postmaster is a zombie: not for a
``postmaster.pid`` that names another program's zombie, a zombie of a postmaster started at
another time, a live process, or nothing readable — each of those once held a start for
the whole wait (``DEAD_POSTMASTER_WAIT_S``). Real processes, zombies made by not reaping
them; no PostgreSQL needed but the data directory's pid file."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstrata.db.dead_postmaster import wait_for_dead_postmaster
from memstrata.db.embedded import pid_alive, prune_dead_handles
from memstrata.logs import event_fields

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")

WAIT_S = 3.0  # the longest wait a test allows; a start would wait 30 s


def zombie(tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    """A child of this process that exited and is not reaped yet (a zombie), run as a
    program called ``name`` (its /proc name)."""
    program = tmp_path / name
    program.symlink_to("/bin/true")
    child = subprocess.Popen([str(program)])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child


def pid_file(pgdata: Path, pid: int, started: float) -> None:
    """A ``postmaster.pid`` as PostgreSQL writes it: pid, data directory, start time…"""
    pgdata.mkdir(exist_ok=True)
    lines = [str(pid), str(pgdata), str(int(started)), "5432", "/tmp", "*", "0 0", "ready"]
    (pgdata / "postmaster.pid").write_text("\n".join(lines) + "\n")


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    made: list[subprocess.Popen[bytes]] = []
    yield made
    for child in made:
        child.wait()  # reaped: no zombie outlives the test


def waited(pgdata: Path) -> float:
    began = time.monotonic()
    wait_for_dead_postmaster(pgdata, timeout_s=WAIT_S)
    return time.monotonic() - began


def test_the_zombie_of_another_program_is_no_reason_to_wait(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    child = zombie(tmp_path, "true")
    children.append(child)
    pid_file(tmp_path / "pgdata", child.pid, time.time())

    assert waited(tmp_path / "pgdata") < 0.5


def test_the_zombie_of_a_postmaster_started_at_another_time_is_no_reason_to_wait(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    child = zombie(tmp_path, "postgres")
    children.append(child)
    pid_file(tmp_path / "pgdata", child.pid, time.time() - 3600)  # the pid taken again since

    assert waited(tmp_path / "pgdata") < 0.5


@pytest.mark.parametrize("content", ["", "not a pid\n", "\x00\xff", "12\n"])
def test_an_unreadable_pid_file_is_no_reason_to_wait(tmp_path: Path, content: str) -> None:
    (tmp_path / "postmaster.pid").write_text(content)
    assert waited(tmp_path) < 0.5


def test_a_live_process_is_no_reason_to_wait(tmp_path: Path) -> None:
    pid_file(tmp_path, os.getpid(), time.time())
    assert waited(tmp_path) < 0.5


def test_a_postmaster_zombie_of_this_process_is_reaped_not_waited_for(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    child = zombie(tmp_path, "postgres")
    pid_file(tmp_path / "pgdata", child.pid, time.time())

    assert waited(tmp_path / "pgdata") < 0.5
    assert not Path(f"/proc/{child.pid}").exists()


def test_the_wait_for_a_killed_postmaster_says_what_it_waits_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The zombie's parent is another process, which reaps it after 0.8 s.
    script = tmp_path / "postgres"
    script.symlink_to("/bin/true")
    reaper = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.argv[1]])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(0.8)\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", reaper, str(script)], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)  # it has exited (its parent sleeps on)
    pid_file(tmp_path / "pgdata", pid, time.time())
    caplog.set_level(logging.INFO, logger="memstrata.db.dead_postmaster")

    seconds = waited(tmp_path / "pgdata")
    parent.wait()

    assert 0.2 < seconds < WAIT_S
    events = {r.msg: event_fields(r) for r in caplog.records}
    waiting = events["db.embedded.dead_postmaster"]
    assert waiting["pid"] == pid and waiting["parent"] == parent.pid
    assert waiting["waiting_for"] == "the killed postmaster (a zombie) to be reaped by its parent"
    assert events["db.embedded.dead_postmaster_reaped"]["waited_s"] < WAIT_S


def test_a_zombie_is_no_live_holder_of_the_server(
    tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    child = zombie(tmp_path, "python3")
    children.append(child)
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / ".handle_pids.json").write_text(f"[{child.pid}, {os.getpid()}]")

    assert not pid_alive(child.pid)
    assert pid_alive(os.getpid())
    assert prune_dead_handles(pgdata) == [os.getpid()]
