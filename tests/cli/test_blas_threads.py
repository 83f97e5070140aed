"""memstrata's own processes run numpy with one BLAS thread (``memstrata.cli``): with
OpenBLAS's default of a thread per core, the extra thread busy-waited for ~25 ms of a core
after every search (docs/BENCHMARKS.md, "BLAS threads"). An operator's setting wins.

Checked in a new interpreter, as ``memstrata`` starts, by the thread count the BLAS library
itself reports (threadpoolctl): the setting must be in place before numpy is first
imported, which reads it once.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
import memstrata
assert "numpy" not in sys.modules, "the package imports numpy before the CLI's setting"
import memstrata.cli
import numpy
from threadpoolctl import threadpool_info
blas = [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]
assert blas, "numpy has no BLAS library loaded"
print(*blas)
"""


@pytest.mark.parametrize(("preset", "expected"), [(None, "1"), ("2", "2")])
def test_the_cli_sets_one_blas_thread_unless_told(preset: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    done = subprocess.run(
        [sys.executable, "-P", "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected
