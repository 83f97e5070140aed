"""BM25's k1 and b on the dev sets: a grid against memstrata's 1.2 / 0.75 — measured.

The spec asks for BM25 + vector + RRF (k=60) and leaves Okapi's two constants open;
memstrata uses the textbook k1 = 1.2, b = 0.75 (``retrieval.bm25``). This script runs the
harness of ``memstrata bench`` with other values: each case's history is stored once
through the batch path, as ``memstrata bench`` stores it, and then every (k1, b) of the grid
ranks every question with the product's ``candidates`` + ``rank`` — the user's
``BM25Index`` is the one the search service built, its ``k1`` and ``b`` set before the
questions (the index applies them at query time, over raw term frequencies, so nothing
is rebuilt and the terms are the same at every point). The vector side is the same at
every point; its row must not move. The (1.2, 0.75) rows are the product as it is and must
equal ``memstrata bench``'s — the check that this script scores what the product ranks.

    .venv/bin/python benchmarks/bm25_params.py locomo PATH/TO/locomo-dev.json \\
        --embedding-cache DIR --out locomo.json
    .venv/bin/python benchmarks/bm25_params.py madial PATH/TO/madial-folder \\
        --embedding-cache DIR --out madial.json
    .venv/bin/python benchmarks/bm25_params.py longmemeval PATH/TO/longmemeval-s.json.gz \\
        --embedding-cache DIR --limit 30 --out longmemeval.json
    .venv/bin/python benchmarks/bm25_params.py decide locomo.json madial.json longmemeval.json

``decide`` applies the rule fixed before the run (``passes``) to the saved grids: the
points that hold it on every set, each point's cells below the default, the best point of
each set (hybrid @5 + @10, decay off) and the question-by-question moves of the best
passing point (or, when none passes, of the best point on the first set) against the
default. MADial's unigram rows of ``memstrata bench`` are not scored here.
``--embedding-cache DIR`` is ``feedback.EmbeddingCache``: only the first run embeds.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstrata.bench.harness import KS
from memstrata.retrieval.bm25 import K1, B

if TYPE_CHECKING:
    from memstrata.bench.harness import Case, Dataset
    from memstrata.runtime import Memstrata

K1S = (0.6, 0.9, 1.2, 1.5, 2.0)
BS = (0.3, 0.5, 0.75, 0.9, 1.0)
# `vector` too: it must not move with BM25's constants (and the harness's own rows).
ROWS = ("bm25", "vector", "hybrid", "hybrid_spec_decay")
# The rows the rule reads: decay off must hold at or above the default, decay on not fall.
DECAY_OFF = ("bm25", "hybrid")
DECAY_ON = ("hybrid_spec_decay",)

# point "k1/b" -> score ("all", "fraction", "any") -> row -> str(k) -> per-question scores
Grid = dict[str, dict[str, dict[str, dict[str, list[float]]]]]


class Saved(TypedDict):
    """One set's grid as ``--out`` writes it; ``scores[0]`` is its headline score."""

    dataset: str
    scores: list[str]
    grid: Grid


def point(k1: float, b: float) -> str:
    return f"{k1}/{b}"


DEFAULT = point(K1, B)


def mean(scores: Sequence[float]) -> float:
    return round(sum(scores) / max(len(scores), 1), 4)


def shortfalls(
    candidate: dict[str, dict[str, float]], default: dict[str, dict[str, float]]
) -> list[tuple[str, float]]:
    """The cells (row -> str(k) -> recall) where ``candidate`` is below the default, as
    ("row@k", difference): the rule reads BM25 and hybrid with decay off and the spec's
    decay, at every k."""
    return [
        (f"{row}@{k}", round(candidate[row][str(k)] - default[row][str(k)], 4))
        for row in DECAY_OFF + DECAY_ON
        for k in KS
        if candidate[row][str(k)] < default[row][str(k)]
    ]


def passes(candidate: dict[str, dict[str, float]], default: dict[str, dict[str, float]]) -> bool:
    """The rule for one set: nothing it reads below the default."""
    return not shortfalls(candidate, default)


def score_case(
    mem: Memstrata, dataset: Dataset, case: Case, grid: Grid, points: Sequence[tuple[float, float]]
) -> None:
    """Store ``case`` once, then rank its questions at every point, appending to ``grid``."""
    from benchmarks.diversity import record
    from memstrata.bench import harness

    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    index = mem.search.cache.get(case.user_id, mem.search.model)
    bm25 = index.bm25
    variants = {row: harness.VARIANTS[row] for row in ROWS}
    for k1, b in points:
        bm25.k1, bm25.b = k1, b
        per_score = grid.setdefault(point(k1, b), {})
        for q in case.questions:
            # `run`'s per-question step without its ingest (stored once for every point);
            # no peers, no Chinese unigram index: neither uses memstrata's BM25 constants.
            ranked = harness._rankings(mem, dataset, case, q, None, None, variants, {})
            for row, covered in ranked.items():
                record(per_score, row, covered, dataset, q.gold)
        # Every question of this point must have been ranked by the index just tuned.
        again = mem.search.cache.get(case.user_id, mem.search.model)
        if again is not index or again.bm25 is not bm25:
            raise SystemExit(f"{case.user_id}: the index was rebuilt during the grid")
    bm25.k1, bm25.b = K1, B


def run_grid(args: argparse.Namespace) -> None:
    from benchmarks.feedback import cached_runtime
    from benchmarks.stemmer import load

    dataset = load(args.dataset, args.path, args.limit)
    points = [(k1, b) for k1 in args.k1 for b in args.b]
    if (K1, B) not in points:
        points.insert(0, (K1, B))  # the check against `memstrata bench`
    grid: Grid = {}
    with cached_runtime(args.embedding_cache) as run:
        for n, case in run.each(dataset.cases):
            score_case(run.mem, dataset, case, grid, points)
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)
    saved: Saved = {"dataset": args.dataset, "scores": list(dataset.scores), "grid": grid}
    if args.out is not None:
        args.out.write_text(json.dumps(saved), encoding="utf-8")
    print_grid(saved)


def means(saved: Saved, at: str, how: str | None = None) -> dict[str, dict[str, float]]:
    """Recall by ``how`` (default the set's headline score), row -> str(k) -> mean, at
    point ``at``."""
    per_row = saved["grid"][at][how or saved["scores"][0]]
    return {row: {k: mean(s) for k, s in ks.items()} for row, ks in per_row.items()}


def print_grid(saved: Saved) -> None:
    """One table a score (LongMemEval: recall_all, then recall_any); the rule column reads
    the headline score."""
    name, first = saved["dataset"], saved["scores"][0]
    questions = len(saved["grid"][DEFAULT][first]["hybrid"]["5"])
    default = means(saved, DEFAULT)
    for how in saved["scores"]:
        print(f"\n{name} ({questions} questions), recall ({how}) @5 / @10")
        print("| k1 / b | " + " | ".join(ROWS) + " | rule |")
        for at in saved["grid"]:
            m = means(saved, at, how)
            cells = " | ".join(f"{m[row]['5']:.4f} / {m[row]['10']:.4f}" for row in ROWS)
            print(f"| {at} | {cells} | {'holds' if passes(means(saved, at), default) else '-'} |")


def best(saved: Saved) -> str:
    """The point with the highest hybrid @5 + @10 (decay off), the default on a tie."""
    return max(
        saved["grid"],
        key=lambda at: (
            means(saved, at)["hybrid"]["5"] + means(saved, at)["hybrid"]["10"],
            at == DEFAULT,
        ),
    )


def moves(saved: Saved, at: str) -> str:
    """Questions up and down at ``at`` against the default, per row and k."""
    first = saved["scores"][0]
    out = []
    for row in ("bm25", "hybrid", "hybrid_spec_decay"):
        for k in KS:
            new = saved["grid"][at][first][row][str(k)]
            old = saved["grid"][DEFAULT][first][row][str(k)]
            up = sum(a > b for a, b in zip(new, old, strict=True))
            down = sum(a < b for a, b in zip(new, old, strict=True))
            out.append(f"{row} @{k} {up} up / {down} down")
    return "; ".join(out)


def decide(paths: Sequence[Path]) -> None:
    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_grid(saved)
    holding = [
        at
        for at in sets[0]["grid"]
        if at != DEFAULT and all(passes(means(s, at), means(s, DEFAULT)) for s in sets)
    ]
    print(f"\npoints that hold the rule on every set: {holding or 'none'}")
    print("cells below the default (of 18), the largest fall first:")
    for at in sets[0]["grid"]:
        if at != DEFAULT:
            short = [
                (f"{s['dataset']} {cell}", d)
                for s in sets
                for cell, d in shortfalls(means(s, at), means(s, DEFAULT))
            ]
            worst = ", ".join(f"{cell} {d:+.4f}" for cell, d in sorted(short, key=lambda c: c[1]))
            print(f"  {at}: {len(short)}: {worst}")
    for saved in sets:
        at = best(saved)
        m, d = means(saved, at), means(saved, DEFAULT)
        print(
            f"best on {saved['dataset']}: {at}, hybrid {m['hybrid']['5']:.4f} / "
            f"{m['hybrid']['10']:.4f} (default {d['hybrid']['5']:.4f} / {d['hybrid']['10']:.4f})"
        )
    candidate = max(holding, key=lambda at: means(sets[0], at)["hybrid"]["10"], default=None)
    candidate = candidate or best(sets[0])
    print(f"\n{sets[0]['dataset']}, {candidate} against {DEFAULT}: {moves(sets[0], candidate)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "madial", "decide"))
    parser.add_argument("path", type=Path, nargs="+")
    parser.add_argument("--embedding-cache", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--k1", type=float, nargs="+", default=list(K1S))
    parser.add_argument("--b", type=float, nargs="+", default=list(BS))
    parser.add_argument("--out", type=Path, default=None, help="save the grid (JSON)")
    args = parser.parse_args()
    if args.dataset == "decide":
        decide(args.path)
        return
    args.path = args.path[0]
    run_grid(args)


if __name__ == "__main__":
    main()
