"""Result diversification on memstrata's fused list: MMR and near-duplicate removal — measured.

A LoCoMo multi-hop question has several evidence turns; when the first hits are variants of
one topic, a second evidence turn can fall out of the first k. Two ways to spread the first
k over more topics, each applied to the fused list the product ranks (the same candidates
a side, the same RRF k = 60, the same decay — over every candidate, the spec's, or within
the relevance pool when ``MEMSTRATA_DECAY_POOL`` is on):

- ``mmr_l{λ}``: maximal marginal relevance — greedily, the next hit is the candidate with
  the highest ``λ · rel − (1 − λ) · max cos(v, v_s)`` over the hits ``s`` already chosen,
  ``rel`` the fused score (after decay when decay is on) min-max normalised within the
  candidates and ``v`` the rows' own stored unit vectors;
- ``dedup_t{τ}``: the fused order, skipping a candidate whose cosine with a hit already
  chosen is at least ``τ`` (skipped ones fill the end if fewer than k remain).

Candidates are all fused rows — with decay on too, unless the opt-in relevance pool
(``ranking.decay_pool``) limits them to the rows decay may bring into the first k; each
variant is scored with decay off and with the spec's decay (suffix ``_spec_decay``).
``hybrid`` and ``hybrid_spec_decay`` are the product's order; every question's hits under
them must equal the harness's own (``memstrata bench``) hits, or the run stops — the check
that this script scores what the product ranks.

    .venv/bin/python benchmarks/diversity.py locomo PATH/TO/locomo-dev.json \\
        --embedding-cache DIR --out locomo.json
    .venv/bin/python benchmarks/diversity.py madial PATH/TO/madial-folder \\
        --embedding-cache DIR --out madial.json
    .venv/bin/python benchmarks/diversity.py longmemeval PATH/TO/longmemeval-s.json.gz \\
        --embedding-cache DIR --out longmemeval.json
    .venv/bin/python benchmarks/diversity.py decide locomo.json madial.json longmemeval.json
    .venv/bin/python benchmarks/diversity.py cost --chunks 10000 --searches 300

``decide`` applies the rule fixed before the run: a variant is kept only if it is at or
above ``hybrid`` (decay off) and ``hybrid_spec_decay`` (decay on) on every set, at @5 and
@10, in every score (LongMemEval: recall_all and recall_any). ``cost`` times the step
alone, CPU per search, on one user of synthetic rows (``bench.latency``'s data) with
top_k 10. ``--embedding-cache DIR`` is ``feedback.EmbeddingCache`` (written after each
case: pass a copy you may overwrite).
"""

from __future__ import annotations

import os

# The BLAS threads of the ``memstrata`` command (one), before numpy loads: a second thread
# spinning on a 100 × 384 product would be counted in the step's CPU.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np
import numpy.typing as npt

from memstrata.bench.harness import KS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from memstrata.bench.harness import Case, Dataset
    from memstrata.retrieval.ranking import Candidates, DecayPolicy
    from memstrata.retrieval.search import SearchService
    from memstrata.retrieval.user_index import UserIndex
    from memstrata.runtime import Memstrata

LAMBDAS = (0.9, 0.8, 0.7, 0.5)
TAUS = (0.95, 0.9)
DECAYS = ("", "_spec_decay")  # row suffix: decay off, the spec's decay
# The harness rows each suffix reproduces.
PRODUCT = {"": "hybrid", "_spec_decay": "hybrid_spec_decay"}

Vectors = npt.NDArray[np.float32]
# score ("fraction", "all", "any") -> row -> str(k) -> per-question scores
Table = dict[str, dict[str, dict[str, list[float]]]]


class Saved(TypedDict):
    dataset: str
    scores: list[str]
    table: Table
    kinds: list[str]  # each question's type (LoCoMo: its category), in table order


def normalised(scores: Sequence[float]) -> list[float]:
    """``scores`` mapped onto [0, 1] (all 1.0 when they are equal)."""
    lo, hi = min(scores), max(scores)
    return [(s - lo) / (hi - lo) if hi > lo else 1.0 for s in scores]


def mmr(relevance: Sequence[float], unit: Vectors, top_k: int, lam: float) -> list[int]:
    """Positions of the ``top_k`` candidates chosen greedily by ``λ · rel − (1 − λ) · max
    cos`` with the ones already chosen (``unit``: one unit row a candidate, in fused
    order); equal values go to the earlier candidate, so λ = 1 is the fused order."""
    rel = np.asarray(relevance, dtype=np.float64)
    sims = (unit @ unit.T).astype(np.float64)
    nearest = np.zeros(len(rel))  # max cos with the chosen; nothing chosen yet
    free = np.ones(len(rel), dtype=bool)
    chosen: list[int] = []
    for _ in range(min(top_k, len(rel))):
        value = np.where(free, lam * rel - (1.0 - lam) * nearest, -np.inf)
        pick = int(np.argmax(value))  # the first of equal values
        chosen.append(pick)
        free[pick] = False
        nearest = sims[pick] if len(chosen) == 1 else np.maximum(nearest, sims[pick])
    return chosen


def dedup(unit: Vectors, top_k: int, tau: float) -> list[int]:
    """Positions of the first ``top_k`` candidates in fused order whose cosine with every
    one kept before is below ``tau``; the skipped ones, in order, fill any places left."""
    kept: list[int] = []
    skipped: list[int] = []
    for pos in range(len(unit)):
        if len(kept) == top_k:
            break
        if kept and float(np.max(unit[kept] @ unit[pos])) >= tau:
            skipped.append(pos)
        else:
            kept.append(pos)
    return (kept + skipped)[:top_k]


def fused(
    search: SearchService, found: Candidates, top_k: int, decay: DecayPolicy, as_of: float
) -> list[tuple[int, float]]:
    """The product's fused order (``ranking.rank``'s call of ``fuse``) as (key, score), cut
    to the rows a diversified first ``top_k`` may take: all of them, or with decay on and
    the opt-in relevance pool, that pool (the rows after it follow it whatever their
    decayed score)."""
    from memstrata.retrieval.fusion import DAY_SECONDS, fuse

    pool = search.decay_pool(top_k)
    out = fuse(
        found.bm25,
        found.vector,
        k=search.rrf_k,
        top_k=None,
        ages_days={k: max(0.0, as_of - r.created_at) / DAY_SECONDS for k, r in found.rows.items()},
        resident={k: r.source == "memory" for k, r in found.rows.items()},
        half_life_days=decay.half_life_days,
        floor=decay.floor,
        decay=decay.enabled,
        pool=pool,
    )
    return [(f.key, f.score) for f in (out[:pool] if decay.enabled and pool else out)]


# A variant: (normalised relevance, unit rows, top_k) -> the positions it ranks first.
Rule = Callable[[Sequence[float], Vectors, int], list[int]]


def rules() -> dict[str, Rule]:
    """Every variant's rule, the product's fused order (``hybrid``) first."""
    out: dict[str, Rule] = {"hybrid": lambda rel, _unit, k: list(range(min(k, len(rel))))}
    for lam in LAMBDAS:
        out[f"mmr_l{lam}"] = lambda rel, unit, k, lam=lam: mmr(rel, unit, k, lam)
    for tau in TAUS:
        out[f"dedup_t{tau}"] = lambda _rel, unit, k, tau=tau: dedup(unit, k, tau)
    return out


def diversified(order: list[tuple[int, float]], unit: Vectors, top_k: int) -> dict[str, list[int]]:
    """Every variant's first ``top_k`` keys from the fused ``order`` and its unit rows."""
    keys = [key for key, _ in order]
    rel = normalised([s for _, s in order]) if order else []
    return {name: [keys[p] for p in rule(rel, unit, top_k)] for name, rule in rules().items()}


def unit_rows(index: UserIndex, keys: list[int]) -> Vectors:
    assert index.vectors is not None
    return index.vectors.unit_rows(keys) if keys else np.zeros((0, index.vectors.dim), np.float32)


def score_case(
    mem: Memstrata, dataset: Dataset, case: Case, table: Table, spread: dict[str, list[float]]
) -> None:
    """Store ``case`` once, rank each question every way, append the scores to ``table``
    and what the rules see to ``spread`` (``spread_of``); stop when the product's rows
    differ from the harness's."""
    from memstrata.bench import harness

    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    index = mem.search.cache.get(case.user_id, mem.search.model)
    checked = {name: harness.VARIANTS[name] for name in PRODUCT.values()}
    policies = {"": harness.NO_DECAY, "_spec_decay": harness.SPEC_DECAY}
    assert mem.embedder is not None
    for q in case.questions:
        vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
        product = harness._rankings(mem, dataset, case, q, None, None, checked, {})
        for suffix, decay in policies.items():
            n = mem.search.candidate_depth(dataset.depth, decay)
            found = mem.search.candidates(case.user_id, q.text, vector, n, as_of=q.as_of)
            order = fused(mem.search, found, dataset.depth, decay, q.as_of.timestamp())
            unit = unit_rows(index, [k for k, _ in order])
            ranked = diversified(order, unit, dataset.depth)
            spread_of(order, unit, suffix, spread)
            if [found.rows[k].source_ids for k in ranked["hybrid"]] != product[PRODUCT[suffix]]:
                raise SystemExit(f"{case.user_id}: {q.text!r} ranked apart from the harness")
            for variant, keys in ranked.items():
                row = PRODUCT[suffix] if variant == "hybrid" else variant + suffix
                record(table, row, [found.rows[k].source_ids for k in keys], dataset, q.gold)


def record(
    table: Table,
    row: str,
    covered: Sequence[Sequence[str]],
    dataset: Dataset,
    gold: Sequence[str],
) -> None:
    """Append one question's score at each k of ``KS``, in each of ``dataset``'s scores,
    to ``row`` of ``table``; ``covered`` holds each hit's source ids, best first."""
    from memstrata.bench import harness

    units = harness.distinct_units(covered, dataset.unit)
    for how in dataset.scores:
        per_k = table.setdefault(how, {}).setdefault(row, {})
        for k in KS:
            per_k.setdefault(str(k), []).append(harness.score(units, gold, k, how))


def spread_of(
    order: list[tuple[int, float]], unit: Vectors, suffix: str, spread: dict[str, list[float]]
) -> None:
    """What the two rules read, for the report: the cosines between the first ten fused
    hits (decay off), and the second candidate's normalised relevance (each decay)."""
    if not suffix:
        sims = unit[:10] @ unit[:10].T
        spread.setdefault("cos", []).extend(sims[np.triu_indices(len(sims), 1)].tolist())
    if len(order) > 1:
        rel = normalised([s for _, s in order])[1]
        spread.setdefault("rel2" + (suffix or "_decay_off"), []).append(rel)


def print_spread(spread: dict[str, list[float]]) -> None:
    cos = np.asarray(spread.get("cos", [0.0]))
    print(
        f"first ten fused hits, cosine between two (decay off): median "
        f"{np.median(cos):.3f}, >= 0.9 {np.mean(cos >= 0.9):.1%}, >= 0.95 "
        f"{np.mean(cos >= 0.95):.1%}; second candidate's normalised relevance, median: "
        + ", ".join(f"{k[5:]} {np.median(v):.3f}" for k, v in spread.items() if k != "cos")
    )


def run_set(args: argparse.Namespace) -> None:
    from benchmarks.feedback import cached_runtime
    from benchmarks.stemmer import load

    dataset = load(args.dataset, args.path, args.limit)
    table: Table = {}
    spread: dict[str, list[float]] = {}
    with cached_runtime(args.embedding_cache) as run:
        for n, case in run.each(dataset.cases):
            score_case(run.mem, dataset, case, table, spread)
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)
    kinds = [q.kind for case in dataset.cases for q in case.questions]
    saved: Saved = {
        "dataset": args.dataset,
        "scores": list(dataset.scores),
        "table": table,
        "kinds": kinds,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(saved), encoding="utf-8")
    print_spread(spread)
    print_set(saved)


def mean(scores: Sequence[float], at: Sequence[int]) -> float:
    return sum(scores[n] for n in at) / max(len(at), 1)


def means(saved: Saved, how: str) -> dict[str, dict[str, float]]:
    rows = saved["table"][how]
    return {
        row: {k: round(sum(s) / max(len(s), 1), 4) for k, s in ks.items()}
        for row, ks in rows.items()
    }


def baseline(row: str) -> str:
    return PRODUCT["_spec_decay" if row.endswith("_spec_decay") else ""]


def shortfalls(saved: Saved) -> dict[str, list[str]]:
    """Per variant, the cells (score, k) below the product row of the same decay."""
    out: dict[str, list[str]] = {}
    for how in saved["scores"]:
        m = means(saved, how)
        for row, ks in m.items():
            out.setdefault(row, [])
            for k in KS:
                diff = ks[str(k)] - m[baseline(row)][str(k)]
                if diff < 0:
                    out[row].append(f"{saved['dataset']} {how}@{k} {diff:+.4f}")
    return out


def moves(table: Table, row: str, how: str, base: Callable[[str], str] = baseline) -> str:
    """Questions up / down against the row ``base`` compares ``row`` with (here: the
    product row of the same decay), by ``how``, per k."""
    rows = table[how]
    parts = []
    for k in KS:
        new, old = rows[row][str(k)], rows[base(row)][str(k)]
        up = sum(a > b for a, b in zip(new, old, strict=True))
        down = sum(a < b for a, b in zip(new, old, strict=True))
        parts.append(f"@{k} {up} up / {down} down")
    return ", ".join(parts)


def print_set(saved: Saved) -> None:
    """One table a score; a variant's mark counts its cells below the product's in every
    score of the set (what the rule reads)."""
    first = saved["scores"][0]
    questions = len(saved["table"][first]["hybrid"]["5"])
    below = shortfalls(saved)
    for how in saved["scores"]:
        print(f"\n{saved['dataset']} ({questions} questions), recall ({how}) @5 / @10")
        for row, ks in means(saved, how).items():
            tag = "" if row in PRODUCT.values() else f"  [{moves(saved['table'], row, how)}]"
            mark = "holds" if not below[row] else f"{len(below[row])} below"
            print(f"  {row:26s} {ks['5']:.4f} / {ks['10']:.4f}  {mark}{tag}")
    rows = [r for r in saved["table"][first] if not r.endswith("_spec_decay")]
    for kind in sorted(set(saved["kinds"])):
        at = [n for n, k in enumerate(saved["kinds"]) if k == kind]
        cells = [f"{r} {mean(saved['table'][first][r]['10'], at):.4f}" for r in rows]
        print(f"  @10, decay off, {kind or 'all'} ({len(at)}): " + ", ".join(cells))


def decide(paths: Sequence[Path]) -> None:
    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_set(saved)
    variants = [r for r in sets[0]["table"][sets[0]["scores"][0]] if r not in PRODUCT.values()]
    print("\nthe rule (at or above the product row of the same decay, decay off and on):")
    for variant in (v for v in variants if not v.endswith("_spec_decay")):
        rows = [variant + suffix for suffix in DECAYS]
        cells = [f"{row} {cell}" for s in sets for row in rows for cell in shortfalls(s)[row]]
        print(f"  {variant:12s} {'KEPT' if not cells else 'not kept: ' + '; '.join(cells)}")


def cost(chunks: int, searches: int, seed: int = 7) -> None:
    """CPU of each variant's step alone per search (after the product's fused order, the
    unit rows fetched included), top_k 10, decay off and on, on ``chunks`` synthetic rows
    of one user: median and p95 in µs, beside the search's own CPU."""
    from datetime import UTC, datetime, timedelta

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
        texts = [" ".join(s.split()[:5]) for s in latency._sentences(rng, vocab, searches, 8)]
        vectors = latency._unit(rng, searches, 384)
        as_of = start + timedelta(days=200)
        search.search_with_vector(latency.USER, texts[0], vectors[0], top_k=top_k)  # cold load
        index = search.cache.get(latency.USER, latency.MODEL)
        for name, decay in (("decay off", harness.NO_DECAY), ("spec decay", harness.SPEC_DECAY)):
            search.decay = decay
            steps = rules()
            micro: dict[str, list[float]] = {s: [] for s in ["search", *steps]}
            for text, vector in zip(texts, vectors, strict=True):
                began = time.process_time()
                search.search_with_vector(latency.USER, text, vector, top_k=top_k, as_of=as_of)
                micro["search"].append((time.process_time() - began) * 1e6)
                found = search.candidates(
                    latency.USER, text, vector, search.candidate_depth(top_k), as_of=as_of
                )
                order = fused(search, found, top_k, decay, as_of.timestamp())
                names = list(steps)
                shift = len(micro["search"]) % len(names)  # each step first in turn
                for step in names[shift:] + names[:shift]:
                    began = time.process_time()
                    keys = [k for k, _ in order]
                    if step == "hybrid":  # the product: the first top_k
                        keys = keys[:top_k]
                    else:
                        rel = normalised([s for _, s in order])
                        steps[step](rel, unit_rows(index, keys), top_k)
                    micro[step].append((time.process_time() - began) * 1e6)
            print(f"\n{name}: {chunks} rows, {searches} searches, top_k {top_k}, CPU µs")
            for step, us in micro.items():
                p95 = statistics.quantiles(us, n=20, method="inclusive")[-1]
                print(f"  {step:24s} median {statistics.median(us):8.1f}  p95 {p95:8.1f}")


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
