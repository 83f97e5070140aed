"""The ``property`` marker that ``make properties`` selects by: every Hypothesis test gets it
(tests/conftest.py), and nothing else does, so a fresh seed reaches all of them; and a
property test's failure shows its example, so it can be replayed."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from tests import test_text

ROOT = Path(__file__).resolve().parents[1]


def _selected(module_file: Path, marker: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker, str(module_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return {line.split("::")[1].split("[")[0] for line in out.splitlines() if "::" in line}


def test_the_property_marker_selects_exactly_the_hypothesis_tests() -> None:
    tests = dict(inspect.getmembers(test_text, inspect.isfunction))
    hypothesis = {n for n, f in tests.items() if n.startswith("test_") and _is_property(f)}
    others = {n for n in tests if n.startswith("test_")} - hypothesis
    assert hypothesis and others  # the module holds both kinds, or this checks nothing
    module_file = Path(test_text.__file__)
    assert _selected(module_file, "property") == hypothesis
    assert _selected(module_file, "not property") == others


def _is_property(f: object) -> bool:
    return bool(getattr(f, "is_hypothesis_test", False))


def test_a_failing_property_shows_its_example(tmp_path: Path) -> None:
    # Under the repository's pytest settings (schemathesis' plugin printed "xs=,").
    (tmp_path / "test_fails.py").write_text(
        "from hypothesis import given, strategies as st\n"
        "@given(st.lists(st.integers()))\n"
        "def test_short(xs):\n"
        "    assert len(xs) < 2\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_fails.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "Failing test case" in out
    assert "xs=[0, 0]," in out
