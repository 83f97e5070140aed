"""A script that ends on an exception without ``close()``: its runtime's database monitor
is stopped at exit before the embedded server, which used to be taken for an outage as
the process ended (``db.lost``, a restart attempt) — false alarms in a host's logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The hook registered first runs last: after the embedded server's own, it holds the
# process a moment with the server stopped, as a slow shutdown would — a monitor still
# running sees the server gone within that time.
SCRIPT = """
import atexit, logging, sys, time
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
atexit.register(time.sleep, 2.0)
from memstrata.config import Settings
from memstrata.runtime import Memstrata
mem = Memstrata.open(Settings(environment="test"), embedder=None)
mem.start_background()
mem.store.provision_default_files("exiting-user")
print("open", flush=True)
raise RuntimeError("the host's script failed")
"""


@pytest.mark.timeout(120)
def test_an_exception_exit_without_close_logs_no_lost_database(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env["MEMSTRATA_DATA_DIR"] = str(tmp_path)
    env["MEMSTRATA_DB_CHECK_INTERVAL_S"] = "0.2"
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=100
    )
    assert run.stdout.strip() == "open", run.stderr[-3000:]
    assert run.returncode == 1 and "the host's script failed" in run.stderr
    lost = [line for line in run.stderr.splitlines() if "db.lost" in line or "restart" in line]
    assert lost == [], run.stderr[-3000:]
