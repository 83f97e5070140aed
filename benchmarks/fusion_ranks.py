"""Two untried ways to feed RRF — complete ranks, and a query-adaptive weight — measured.

Today each side contributes only its first ``n`` candidates (``SearchService.
candidate_depth``): a row at BM25 rank 4 and vector rank 80 gets no vector term at all,
exactly like a row the vector side rates last. Per question, on the product's candidates
(decay off, and the spec's decay: suffix ``_spec_decay``):

- ``hybrid``: the product's two lists fused as the product fuses them (``ranking.rank``);
- ``rrf_full``: the same candidates (the union of both sides' first ``n``), each ranked on
  each side by its rank in that side's complete ordering — ``SearchService.candidates``
  asked for every row, so the same BM25 scores, the same exact cosine and the same ties
  (``topn.best_first``) — fused by ``fusion.fuse`` (RRF k = 60, the same decay and ties).
  A row with no query term has no BM25 score and stays without a BM25 rank, as today;
- ``rrf_adaptive``: the product's two lists, each side's ``1/(k + rank)`` times a weight
  read from that side's own scores (``side_weights``, the rule fixed before the run): with
  ``d = (s_1 − s_m) / (s_1 − s_last)``, m = min(10, the list's length), the share of the
  list's score range spent in its first ten, the side with the larger ``d`` keeps weight 1
  and the other gets ``0.5 + 0.5 · d / d_max``: a flat top says little about which of its
  first rows is best, so that side counts less, never under half. A side of fewer than
  two rows or one score, or both ``d`` zero: both weights 1 (plain RRF).

Checks, every question, or the run stops: ``fuse_weighted`` with weights 1, 1 equals the
harness's own ``hybrid`` hits (``harness._rankings``, decay off and on); each complete
ordering begins with the product's list of that side. Only the spec's decay over every
candidate is measured (the run refuses ``MEMSTRATA_DECAY_POOL``).

The rule, fixed before the run (that of ``stacked.py``): a variant is worth pursuing only if
its rows are at or above ``hybrid`` (decay off) and ``hybrid_spec_decay`` (decay on) on every
set, at @5 and @10, in every score (LongMemEval: recall_all and recall_any), and above on at
least one target cell of issue #12 (``sparse_head.TARGETS``).

    .venv/bin/python benchmarks/fusion_ranks.py locomo PATH/TO/locomo-dev.json \\
        --embedding-cache DIR/locomo --out locomo.json
    .venv/bin/python benchmarks/fusion_ranks.py madial PATH/TO/madial-folder \\
        --embedding-cache DIR/madial --out madial.json
    .venv/bin/python benchmarks/fusion_ranks.py longmemeval \\
        PATH/TO/longmemeval-s-dev-60q.json.gz --limit 12 \\
        --embedding-cache DIR/longmemeval --out longmemeval.json
    .venv/bin/python benchmarks/fusion_ranks.py decide locomo.json longmemeval.json madial.json
    .venv/bin/python benchmarks/fusion_ranks.py cost --chunks 10000 --searches 200

``--embedding-cache DIR`` is ``feedback.EmbeddingCache``; it and ``--out`` are written after
each case, so a run stopped part-way keeps what it embedded and scored. Each run also times,
per question and decay, each way's whole search after the query's embedding (candidates and
fusion, the ways in turn first), CPU µs: medians and p95 with the rows per user; ``cost``
does the same on one user of synthetic rows.
"""

from __future__ import annotations

import os

# One BLAS thread, as the ``memstrata`` command: the cost is CPU per search.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import diversity
from benchmarks.diversity import PRODUCT, record
from benchmarks.stacked import verdict

if TYPE_CHECKING:
    from benchmarks import stacked
    from benchmarks.feedback import CachedRun
    from memstrata.bench.harness import Case, Dataset
    from memstrata.retrieval.ranking import Candidates, DecayPolicy
    from memstrata.retrieval.rows import Row
    from memstrata.retrieval.search import SearchService

VARIANTS = ("rrf_full", "rrf_adaptive")
FLAT_AT = 10  # the deepest cut scored (recall@10): how far down "the top" of a list goes
LEAST_WEIGHT = 0.5  # the flatter side's weight when its top carries no spread at all
STEPS = ("hybrid", *VARIANTS)


class Saved(diversity.Saved):
    # Decay suffix -> union candidates, and side ranks that only the complete orderings
    # gave them (a row the product left without that side's term).
    completed: dict[str, dict[str, int]]
    weights: dict[str, list[list[float]]]  # decay suffix -> rrf_adaptive's (BM25, vector)
    # Decay suffix -> step -> CPU µs per search, one a question; rows per user.
    cost: dict[str, dict[str, list[float]]]
    rows: list[int]
    cases: int  # cases scored so far (the table holds their questions only)


def spread(scores: Sequence[float], at: int = FLAT_AT) -> float | None:
    """The share of a best-first list's score range spent in its first ``at`` rows; None
    when it has no range (fewer than two rows, or one score)."""
    if len(scores) < 2 or scores[0] == scores[-1]:
        return None
    return (scores[0] - scores[min(at, len(scores)) - 1]) / (scores[0] - scores[-1])


def side_weights(found: Candidates) -> tuple[float, float]:
    """(BM25, vector) weights by the rule of the module docstring."""
    d_bm25 = spread([found.bm25_scores[k] for k in found.bm25])
    d_vector = spread([found.vector_scores[k] for k in found.vector])
    if d_bm25 is None or d_vector is None or max(d_bm25, d_vector) == 0.0:
        return 1.0, 1.0
    top = max(d_bm25, d_vector)
    bm25, vector = (LEAST_WEIGHT + (1.0 - LEAST_WEIGHT) * d / top for d in (d_bm25, d_vector))
    return bm25, vector


def ages_of(rows: Mapping[int, Row], as_of: float) -> tuple[dict[int, float], dict[int, bool]]:
    """Each row's age in days at ``as_of`` and whether it is resident, as ``ranking.rank``."""
    from memstrata.retrieval.fusion import DAY_SECONDS

    ages = {k: max(0.0, as_of - r.created_at) / DAY_SECONDS for k, r in rows.items()}
    return ages, {k: r.source == "memory" for k, r in rows.items()}


def fuse_weighted(
    search: SearchService,
    found: Candidates,
    weights: tuple[float, float],
    top_k: int,
    decay: DecayPolicy,
    as_of: float,
) -> list[int]:
    """The first ``top_k`` keys of ``fusion.fuse`` over ``found``'s two lists (decay over
    every candidate, the spec's) with each side's ``1/(k + rank)`` times its weight: the
    same ``rrf_scores``, decay factor and ties (score, the better rank, first appearance,
    BM25 list first). With weights 1, 1 it is ``fuse``, to the bit (checked every question)."""
    from memstrata.retrieval.fusion import decay_factor, rrf_scores

    bm25, vector, k = found.bm25, found.vector, search.rrf_k
    ages, resident = ages_of(found.rows, as_of)
    sides = [rrf_scores([bm25], k), rrf_scores([vector], k)]
    ranks = [{key: r for r, key in reversed(list(enumerate(side, 1)))} for side in (bm25, vector)]
    items: list[tuple[tuple[float, int, int], int]] = []
    for order, key in enumerate(rrf_scores([bm25, vector], k)):
        score = 0.0
        for w, side in zip(weights, sides, strict=True):
            if key in side:
                score += w * side[key]
        if decay.enabled and not resident[key]:
            score *= decay_factor(ages[key], decay.half_life_days, decay.floor)
        best = min(r[key] for r in ranks if key in r)
        items.append(((-score, best, order), key))
    items.sort(key=lambda pair: pair[0])
    return [key for _, key in items][:top_k]


def full_ranked(
    search: SearchService, full: Candidates, n: int, top_k: int, decay: DecayPolicy, as_of: float
) -> tuple[list[int], int]:
    """``rrf_full``'s first ``top_k`` keys from ``full`` (both complete orderings): ``fuse``
    over them, kept to the union of each side's first ``n``; and how many side ranks the
    union's rows got that the first ``n`` did not give them."""
    from memstrata.retrieval.fusion import fuse

    union = set(full.bm25[:n]) | set(full.vector[:n])
    ages, resident = ages_of(full.rows, as_of)
    out = fuse(
        full.bm25,
        full.vector,
        k=search.rrf_k,
        ages_days=ages,
        resident=resident,
        half_life_days=decay.half_life_days,
        floor=decay.floor,
        decay=decay.enabled,
    )
    keys = [f.key for f in out if f.key in union][:top_k]
    gained = sum(
        len(union & set(side)) - len(union & set(side[:n])) for side in (full.bm25, full.vector)
    )
    return keys, gained


def timed(
    steps: Mapping[str, Callable[[], object]], turn: int, into: dict[str, list[float]]
) -> None:
    """Run each step once, ``turn`` choosing which goes first, appending its CPU µs."""
    names = list(steps)
    shift = turn % len(names)
    for name in names[shift:] + names[:shift]:
        began = time.process_time()
        steps[name]()
        into.setdefault(name, []).append((time.process_time() - began) * 1e6)


def searches(
    search: SearchService,
    user: str,
    text: str,
    vector: np.ndarray,
    at: datetime,
    depths: tuple[int, int, int],
    decay: DecayPolicy,
) -> dict[str, Callable[[], object]]:
    """Each way's whole search after the query's embedding, to time: its candidates and
    its fusion (``depths``: candidates a side, every row, hits)."""
    from memstrata.retrieval.ranking import rank

    n, every, top_k = depths
    as_of = at.timestamp()
    return {
        "hybrid": lambda: rank(
            search.candidates(user, text, vector, n, as_of=at),
            top_k=top_k,
            as_of=at,
            decay=decay,
            rrf_k=search.rrf_k,
        ),
        "rrf_full": lambda: full_ranked(
            search, search.candidates(user, text, vector, every, as_of=at), n, top_k, decay, as_of
        ),
        "rrf_adaptive": lambda: fuse_weighted(
            search,
            found := search.candidates(user, text, vector, n, as_of=at),
            side_weights(found),
            top_k,
            decay,
            as_of,
        ),
    }


def score_case(run: CachedRun, dataset: Dataset, case: Case, saved: Saved) -> None:
    """Store ``case``, rank each question every way, append its scores to ``saved``."""
    from memstrata.bench import harness

    mem = run.mem
    search = mem.search
    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    every = len(search.cache.get(case.user_id, search.model).rows)
    saved["rows"].append(every)
    reference = {name: harness.VARIANTS[name] for name in ("bm25", "vector", *PRODUCT.values())}
    policies = {"": harness.NO_DECAY, "_spec_decay": harness.SPEC_DECAY}
    assert mem.embedder is not None
    depth = dataset.depth
    turn = sum(len(us) for us in saved["cost"].get("", {}).values())
    for q in case.questions:
        vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
        product = harness._rankings(mem, dataset, case, q, None, None, reference, {})
        ranked = dict(product)
        as_of = q.as_of.timestamp()
        for suffix, decay in policies.items():
            n = search.candidate_depth(depth, decay)
            found = search.candidates(case.user_id, q.text, vector, n, as_of=q.as_of)
            full = search.candidates(case.user_id, q.text, vector, every, as_of=q.as_of)
            where = f"{case.user_id}: {q.text!r}{suffix}"
            if full.bm25[:n] != found.bm25 or full.vector[:n] != found.vector:
                raise SystemExit(f"{where}: a complete ordering does not begin with the product's")
            full_keys, gained = full_ranked(search, full, n, depth, decay, as_of)
            done = saved["completed"].setdefault(suffix, {"union": 0, "gained": 0})
            done["union"] += len(set(found.bm25) | set(found.vector))
            done["gained"] += gained
            plain = fuse_weighted(search, found, (1.0, 1.0), depth, decay, as_of)
            if [found.rows[k].source_ids for k in plain] != product[PRODUCT[suffix]]:
                raise SystemExit(f"{where}: hybrid ranked apart from the harness")
            weights = side_weights(found)
            saved["weights"].setdefault(suffix, []).append(list(weights))
            adapted = fuse_weighted(search, found, weights, depth, decay, as_of)
            ranked["rrf_full" + suffix] = [full.rows[k].source_ids for k in full_keys]
            ranked["rrf_adaptive" + suffix] = [found.rows[k].source_ids for k in adapted]
            steps = searches(
                search, case.user_id, q.text, vector, q.as_of, (n, every, depth), decay
            )
            timed(steps, turn, saved["cost"].setdefault(suffix, {}))
        turn += 1
        for row, hits in ranked.items():
            record(saved["table"], row, hits, dataset, q.gold)
        saved["kinds"].append(q.kind)


def run_set(args: argparse.Namespace) -> None:
    from benchmarks.feedback import cached_runtime
    from benchmarks.stemmer import load

    dataset = load(args.dataset, args.path, args.limit)
    saved: Saved = {
        "dataset": args.dataset,
        "scores": list(dataset.scores),
        "table": {},
        "kinds": [],
        "completed": {},
        "weights": {},
        "cost": {},
        "rows": [],
        "cases": 0,
    }
    with cached_runtime(args.embedding_cache) as run:
        if run.mem.search.decay_pool(dataset.depth) is not None:
            raise SystemExit("MEMSTRATA_DECAY_POOL is on: this measures the spec's decay only")
        for n, case in run.each(dataset.cases):
            score_case(run, dataset, case, saved)
            saved["cases"] = n
            # Saved after each case: a run stopped part-way keeps the cases it scored.
            if args.out is not None:
                args.out.write_text(json.dumps(saved), encoding="utf-8")
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)
    print_set(saved)


def print_set(saved: Saved) -> None:
    """``diversity.print_set``'s tables (questions up / down against the product row of
    the same decay), the ranks the complete orderings added, and the cost."""
    diversity.print_set(saved)
    for suffix, done in saved["completed"].items():
        per = done["gained"] / max(done["union"], 1)
        print(
            f"  rrf_full{suffix}: {done['union']} union candidates, {done['gained']} side ranks "
            f"gained ({per:.2f} a candidate)"
        )
    for suffix, pairs in saved.get("weights", {}).items():
        lower = [min(pair) for pair in pairs if min(pair) < 1.0]
        vector_lower = sum(pair[1] < pair[0] for pair in pairs)
        print(
            f"  rrf_adaptive{suffix}: a side below 1 in {len(lower)} of {len(pairs)} searches "
            f"(the vector side in {vector_lower}), its weight median "
            f"{statistics.median(lower) if lower else 1.0:.3f}"
        )
    rows = saved["rows"]
    print(f"  CPU µs per search ({min(rows)}–{max(rows)} rows per user, median and p95):")
    for suffix, steps in saved["cost"].items():
        cells = []
        for step in STEPS:
            us = steps[step]
            p95 = statistics.quantiles(us, n=20, method="inclusive")[-1] if len(us) > 1 else us[0]
            cells.append(f"{step} {statistics.median(us):.0f} / {p95:.0f}")
        print(f"    {'spec decay' if suffix else 'decay off'}: " + ", ".join(cells))


def decide(paths: Sequence[Path]) -> None:
    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_set(saved)
    print(f"\nthe rule on {', '.join(s['dataset'] for s in sets)}, against the product:")
    for variant in VARIANTS:
        print(f"  {variant:14s} {verdict(cast('list[stacked.Saved]', sets), variant)}")


def cost(chunks: int, searches_n: int, seed: int = 7) -> None:
    """Each way's whole search after the query's embedding, CPU µs, top_k 10, decay off
    and on, on ``chunks`` synthetic rows of one user (``bench.latency``'s data, as
    ``diversity.py cost``): median and p95, the ways in turn first."""
    from datetime import UTC, timedelta

    from memstrata.bench import harness, latency
    from memstrata.cli.bench import bench_runtime
    from memstrata.retrieval.cache import IndexCache
    from memstrata.retrieval.search import SearchService

    top_k, rng = latency.TOP_K, np.random.default_rng(seed)
    vocab = latency._vocabulary(rng)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with bench_runtime(None, embeddings=False) as mem:
        latency._copy_rows(
            mem,
            [latency.USER] * chunks,
            latency._sentences(rng, vocab, chunks),
            latency._unit(rng, chunks, 384),
            start,
        )
        search = SearchService(IndexCache(mem.db.sessions), latency._NamedOnly())
        texts = [" ".join(s.split()[:5]) for s in latency._sentences(rng, vocab, searches_n, 8)]
        vectors = latency._unit(rng, searches_n, 384)
        at = start + timedelta(days=200)
        search.search_with_vector(latency.USER, texts[0], vectors[0], top_k=top_k)  # cold load
        every = len(search.cache.get(latency.USER, latency.MODEL).rows)
        for name, decay in (("decay off", harness.NO_DECAY), ("spec decay", harness.SPEC_DECAY)):
            n = search.candidate_depth(top_k, decay)
            micro: dict[str, list[float]] = {}
            for turn, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
                steps = searches(search, latency.USER, text, vector, at, (n, every, top_k), decay)
                timed(steps, turn, micro)
            print(f"\n{name}: {every} rows, {searches_n} searches, top_k {top_k}, CPU µs")
            for step, us in micro.items():
                p95 = statistics.quantiles(us, n=20, method="inclusive")[-1]
                print(f"  {step:14s} median {statistics.median(us):9.1f}  p95 {p95:9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "madial", "decide", "cost"))
    parser.add_argument("path", type=Path, nargs="*")
    parser.add_argument("--embedding-cache", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--out", type=Path, default=None, help="save the scores (JSON)")
    parser.add_argument("--chunks", type=int, default=10_000, help="rows, for cost")
    parser.add_argument("--searches", type=int, default=300, help="for cost")
    args = parser.parse_args()
    if args.dataset == "cost":
        cost(args.chunks, args.searches)
    elif args.dataset == "decide":
        decide(args.path)
    else:
        args.path = args.path[0]
        run_set(args)


if __name__ == "__main__":
    main()
