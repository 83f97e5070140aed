"""memstrata is a typed package: a host's mypy sees its annotations, not ``Any``."""

from __future__ import annotations

import subprocess
import sys
from importlib.resources import files
from pathlib import Path


def test_the_package_carries_the_py_typed_marker() -> None:
    assert files("memstrata").joinpath("py.typed").is_file()


def test_a_hosts_strict_mypy_checks_against_memstrata(tmp_path: Path) -> None:
    """Without the marker every import was ``import-untyped`` and every value ``Any``, so
    this mistake passed unnoticed."""
    host = tmp_path / "host.py"
    host.write_text(
        "from memstrata.runtime import Memstrata\n"
        "from memstrata.retrieval.search import SearchService\n\n"
        "def top(mem: Memstrata) -> SearchService:\n"
        "    wrong: int = mem.search\n"
        "    return mem.search\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(host)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert "import-untyped" not in done.stdout, done.stdout
    assert 'Incompatible types in assignment (expression has type "SearchService"' in done.stdout
