"""Run the benchmarks and write their figures into docs/BENCHMARKS.md.

    .venv/bin/python benchmarks/run.py --locomo PATH/locomo-dev.json [--repeats 3]
    .venv/bin/python benchmarks/run.py --skip-locomo

``--locomo`` is a LoCoMo-format JSON file (the LoCoMo dataset of snap-research,
https://github.com/snap-research/locomo, licensed CC BY-NC 4.0; not shipped here).

Each benchmark's section in BENCHMARKS.md sits between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->`` and is replaced whole; the prose around it is kept.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "BENCHMARKS.md"
CLI = [sys.executable, "-m", "memstrata.cli"]


def run(args: list[str]) -> tuple[str, dict[str, object], str, str]:
    """(command, last-line JSON, other stdout lines, the ``indexed …`` stderr line)."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    lines = done.stdout.strip().splitlines()
    indexed = [ln for ln in done.stderr.splitlines() if ln.startswith("indexed ")]
    return (
        "memstrata " + " ".join(args),
        json.loads(lines[-1]),
        "\n".join(lines[:-1]),
        indexed[-1] if indexed else "",
    )


def replace_section(doc: str, name: str, body: str) -> str:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
    return pattern.sub(lambda _m: block, doc) if pattern.search(doc) else doc + "\n" + block + "\n"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()}, {cpu}, Python {platform.python_version()}"


def locomo_section(path: str) -> str:
    command, result, table, indexed = run(["bench", "locomo", path, "--decay-grid"])
    command = command.replace(path, Path(path).name)  # no machine paths in the docs
    recall = result["recall"]
    assert isinstance(recall, dict)
    rows = ["| variant | recall@5 | recall@10 |", "|---|---|---|"]
    for name in ("bm25", "vector", "hybrid", "hybrid_spec_decay"):
        r = recall[name]
        rows.append(f"| `{name}` | {r['5']:.4f} | {r['10']:.4f} |")
    return "\n".join(
        [
            f"Measured {datetime.now(UTC):%Y-%m-%d} on {machine()}.",
            "",
            f"Command: `{command}`",
            "",
            *rows,
            "",
            f"Indexing throughput: {indexed}.",
            "",
            "Decay grid (hybrid + decay with the given half-life in days and floor):",
            "",
            "```",
            table,
            "```",
            "",
            "Last line printed:",
            "",
            "```json",
            json.dumps(result),
            "```",
        ]
    )


def row(label: str, p50: float, p95: float) -> str:
    return f"| {label} | {p50:.2f} | {p95:.2f} |"


def latency_section(repeats: int) -> str:
    parts = [f"Measured {datetime.now(UTC):%Y-%m-%d} on {machine()}.", ""]
    for chunks in (1000, 10000):
        args = ["bench", "latency", "--chunks", str(chunks), "--others", "200000"]
        results = [run(args)[1] for _ in range(repeats)]
        queries = int(results[0]["queries"])  # type: ignore[call-overload]
        command = "memstrata " + " ".join(args)

        def med(key: str, results: list[dict[str, object]] = results) -> float:
            return statistics.median(float(r[key]) for r in results)  # type: ignore[arg-type]

        parts += [
            f"**{chunks} chunks among 200,000 rows of other users** — `{command}`, "
            f"{repeats} runs × {queries} queries; median over runs of each run's figure.",
            "",
            "| | p50 ms | p95 ms |",
            "|---|---|---|",
            row("memstrata search (warm, embedding excluded)", med("p50_ms"), med("p95_ms")),
            row(
                "in-process bound: bm25s + numpy cosine",
                med("baseline_p50_ms"),
                med("baseline_p95_ms"),
            ),
            row(
                "vector candidates from pgvector instead",
                med("pgvector_backend_p50_ms"),
                med("pgvector_backend_p95_ms"),
            ),
            "",
            f"Ratio memstrata / bound at p50: {med('ratio_p50'):.2f}. Cold load of the user's "
            f"index: {med('cold_load_ms'):.0f} ms; memory per cached user: "
            f"{med('cache_peak_mib'):.1f} MiB peak during load (tracemalloc), "
            f"{med('cache_estimate_mib'):.1f} MiB held (estimate). Indexing one round: "
            f"{med('index_one_round_ms'):.1f} ms; first search after it (incremental refresh): "
            f"{med('search_after_new_round_ms'):.1f} ms; bulk indexing without embeddings: "
            f"{med('index_rounds_per_s_no_embedding'):.0f} rounds/s.",
            "",
            "Raw runs:",
            "",
            "```json",
            *(json.dumps(r) for r in results),
            "```",
            "",
        ]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--locomo", help="LoCoMo-format JSON file (required unless skipped)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-locomo", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    if not args.skip_locomo and not args.locomo:
        parser.error("--locomo PATH is required (or pass --skip-locomo)")
    doc = DOC.read_text(encoding="utf-8") if DOC.exists() else "# Benchmarks\n"
    if not args.skip_locomo:
        doc = replace_section(doc, "locomo", locomo_section(args.locomo))
        DOC.write_text(doc, encoding="utf-8")
    if not args.skip_latency:
        doc = replace_section(doc, "latency", latency_section(args.repeats))
        DOC.write_text(doc, encoding="utf-8")


if __name__ == "__main__":
    main()
