"""A memstrata runtime on an embedded PostgreSQL in a temporary data directory, for the
in-process benchmarks: no embedding server (BM25 only unless a script adds vectors
itself), warnings only. Scripts import it as ``benchmarks.scratch`` after putting the
repository root on ``sys.path``, as the others here do."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.runtime import Memstrata


@contextmanager
def scratch_runtime(prefix: str) -> Iterator[Memstrata]:
    """``Memstrata.open`` on a fresh data directory named ``prefix…``, closed and removed
    afterwards. The settings come from the environment, so the directory is set there."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        os.environ.update(
            MEMSTRATA_DATA_DIR=tmp,
            MEMSTRATA_LOG_LEVEL="WARNING",
            MEMSTRATA_EMBEDDING_AUTOSTART="false",
        )
        from memstrata.config import Settings

        mem = Memstrata.open(Settings())
        try:
            yield mem
        finally:
            mem.close()
