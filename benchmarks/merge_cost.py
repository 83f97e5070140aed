"""What one three-way merge (``sandbox.merge.merge3``) costs on hostile and ordinary texts:
the sandbox read-back and the page's ``web/merge`` run it on whatever a writer sent.

    .venv/bin/python benchmarks/merge_cost.py --repeats 5

Prints the median and maximum seconds per case and whether it merged or conflicted. With
``--baseline-difflib`` it also times the former difflib-based line diff on the small
cases only (it took 35 s on 2,000 alternating lines: docs/ARCHITECTURE.md, "Resolution").
"""

from __future__ import annotations

import argparse
import difflib
import random
import statistics
import time
from collections.abc import Callable

from memstrata.sandbox import merge

Case = tuple[str, str, str]


def alternating(n: int) -> Case:
    """Two one-letter lines alternating, edited with other periods: a diff's worst case."""
    return (
        "\n".join("a" if i % 2 else "b" for i in range(n)),
        "\n".join("a" if i % 3 else "b" for i in range(n)),
        "\n".join("b" if i % 2 else "a" for i in range(n)),
    )


def shuffled(n: int) -> Case:
    rng = random.Random(1)
    lines = [f"- item {i}" for i in range(n)]
    ours, theirs = lines[:], lines[:]
    rng.shuffle(ours)
    rng.shuffle(theirs)
    return "\n".join(lines), "\n".join(ours), "\n".join(theirs)


def ordinary(n: int) -> Case:
    """A long memory file: the user adds a line near the top, the agent appends one."""
    lines = [f"- note {i}: something the user said" for i in range(n)]
    return (
        "\n".join(lines),
        "\n".join([*lines[:100], "- mine", *lines[100:]]),
        "\n".join([*lines, "- agent"]),
    )


CASES: dict[str, Callable[[], Case]] = {
    "alternating 2,000 lines": lambda: alternating(2_000),
    "alternating 30,000 lines": lambda: alternating(30_000),
    "alternating 120,000 lines": lambda: alternating(120_000),
    "shuffled 20,000 lines": lambda: shuffled(20_000),
    "ordinary 5,000 lines": lambda: ordinary(5_000),
}


def _difflib_hunks(base: list[str], other: list[str]) -> int:
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return sum(1 for tag, *_ in matcher.get_opcodes() if tag != "equal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-difflib", action="store_true")
    args = parser.parse_args()
    for name, make in CASES.items():
        base, ours, theirs = make()
        seconds = []
        result: str | None = None
        for _ in range(args.repeats):
            began = time.perf_counter()
            result = merge.merge3(base, ours, theirs)
            seconds.append(time.perf_counter() - began)
        outcome = "conflict" if result is None else "merged"
        print(
            f"{name:28s} {len(base.encode()):>8,} bytes  median {statistics.median(seconds):.3f} s"
            f"  max {max(seconds):.3f} s  {outcome}"
        )
    if args.baseline_difflib:
        base, ours, _ = alternating(2_000)
        began = time.perf_counter()
        _difflib_hunks(base.split("\n"), ours.split("\n"))
        print(f"difflib, one side of alternating 2,000 lines: {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
