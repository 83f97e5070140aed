"""A process that stopped its embedded server and removed the data directory leaves nothing
behind at exit: the wheel's exit hook took the lock again and re-created
``<data_dir>/run/.lockfile`` (with its parents) in the removed directory, so each
``memstrata bench`` run and each test session left a ``/tmp`` directory behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OPEN_CLOSE_REMOVE = """
import shutil, sys
from pathlib import Path
from memstrata.config import Settings
from memstrata.db.database import Database
data_dir = Path(sys.argv[1])
db = Database.open(Settings(environment="test", data_dir=data_dir))
with db.engine.connect() as conn:
    conn.exec_driver_sql("SELECT 1")
db.close()
shutil.rmtree(data_dir)
print("removed", flush=True)
"""


def test_nothing_is_left_after_exit(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["MEMSTRATA_LOG_LEVEL"] = "WARNING"
    done = subprocess.run(
        [sys.executable, "-c", OPEN_CLOSE_REMOVE, str(data_dir)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "removed"
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == [], f"left behind after exit: {left}"
