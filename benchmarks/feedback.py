"""Pseudo-relevance feedback and weighted RRF on memstrata's candidates — measured, not shipped.

Two classic ways to find what the first ranking missed, each re-ranked with the same RRF
(k=60, decay off) as the ``hybrid`` variant of ``memstrata bench``:

- ``vprf_m{m}_b{beta}``: Rocchio on the query vector — the query's unit vector plus
  ``beta`` × the mean unit vector of the first ``m`` fused hits, searched again;
- ``rm3_m{m}_t{t}``: RM3-style BM25 expansion — the query's terms twice plus the ``t``
  terms that weigh most (length-normalised term frequency) in the first ``m`` fused hits.

And, on the same candidates, weighted RRF (``wrrf_v{w}``: the vector list's ``1/(k+rank)``
times ``w``, BM25's times 1) — whether giving one side more say than the spec's plain RRF
would help everywhere or only where that side happens to be the stronger one.

    .venv/bin/python benchmarks/feedback.py locomo PATH/TO/locomo-dev.json
    .venv/bin/python benchmarks/feedback.py madial PATH/TO/madial-folder
    .venv/bin/python benchmarks/feedback.py longmemeval PATH/TO/longmemeval-s.json.gz

Histories go in through the harness of ``memstrata bench`` (the batch path, real
embeddings from the local server, a temporary embedded PostgreSQL); the run stops without
figures if any row lacks a vector. ``--embedding-cache DIR`` keeps the embeddings between
runs (the vectors do not change between runs of the same model). The ``hybrid`` row must
equal ``memstrata bench``'s ``hybrid`` row for the same data — the check that this script
scores what the product ranks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from memstrata.bench.harness import Case, Dataset
    from memstrata.retrieval.ranking import Candidates
    from memstrata.retrieval.user_index import UserIndex
    from memstrata.runtime import Memstrata

VPRF = ((3, 0.5), (5, 0.5), (3, 1.0), (10, 0.3))
RM3 = ((5, 10), (10, 20))
VECTOR_WEIGHTS = (0.5, 0.75, 1.5, 2.0)


class EmbeddingCache:
    """Embeddings by (kind, text), kept in ``folder`` as a JSON key list and one matrix."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self.vectors: dict[tuple[str, str], np.ndarray] = {}
        if folder is not None and (folder / "keys.json").is_file():
            keys = json.loads((folder / "keys.json").read_text(encoding="utf-8"))
            matrix = np.load(folder / "vectors.npy", allow_pickle=False)
            self.vectors = {(k, t): matrix[n] for n, (k, t) in enumerate(keys)}

    def wrap(self, embedder: object) -> None:
        """Serve ``embedder``'s requests from the cache (at its batch call, which both
        ``embed`` and ``embed_each`` go through)."""
        embed: Callable[..., list[list[float]]] = embedder._embed_batch  # type: ignore[attr-defined]

        def cached(
            texts: Sequence[str], kind: str, *route: object, **options: object
        ) -> list[list[float]]:
            # ``route``, ``options``: the client's own arguments (``express``, ``deadline``,
            # ``split_slow``), passed on for the texts not cached.
            missing = list(dict.fromkeys(t for t in texts if (kind, t) not in self.vectors))
            for start in range(0, len(missing), 64):
                part = missing[start : start + 64]
                for t, v in zip(part, embed(part, kind, *route, **options), strict=True):
                    self.vectors[(kind, t)] = np.asarray(v, dtype=np.float32)
            return [self.vectors[(kind, t)].tolist() for t in texts]

        embedder._embed_batch = cached  # type: ignore[attr-defined]

    def save(self) -> None:
        if self.folder is None or not self.vectors:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        np.save(self.folder / "vectors.npy", np.stack([self.vectors[k] for k in keys]))
        (self.folder / "keys.json").write_text(json.dumps(keys), encoding="utf-8")


@dataclass
class CachedRun:
    """A runtime whose embedder is served from ``cache`` (``cached_runtime``)."""

    mem: Memstrata
    cache: EmbeddingCache

    def each(self, cases: Sequence[Case]) -> Iterator[tuple[int, Case]]:
        """``cases`` numbered from 1; the cache is saved after each one's loop body, so a
        run stopped part-way keeps what the cases before it embedded."""
        for n, case in enumerate(cases, 1):
            yield n, case
            self.cache.save()


@contextmanager
def cached_runtime(folder: Path | None) -> Iterator[CachedRun]:
    """``memstrata bench``'s runtime (the batch path, real embeddings from the local
    server, a temporary embedded PostgreSQL) with its embedder served from
    ``EmbeddingCache(folder)`` — the preamble of the scripts here that walk a dataset's
    cases (``folder`` None: nothing kept)."""
    from memstrata.cli.bench import bench_runtime

    cache = EmbeddingCache(folder)
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        cache.wrap(mem.embedder)
        yield CachedRun(mem, cache)


def fused_keys(bm25: Sequence[int], vector: Sequence[int], top_k: int) -> list[int]:
    from memstrata.retrieval.fusion import fuse

    return [f.key for f in fuse(bm25, vector, top_k=top_k, decay=False)]  # RRF k = 60


def weighted_keys(bm25: Sequence[int], vector: Sequence[int], depth: int, w: float) -> list[int]:
    from memstrata.retrieval.fusion import rrf_scores

    scores = rrf_scores([bm25])
    for key, s in rrf_scores([vector]).items():
        scores[key] = scores.get(key, 0.0) + w * s
    return sorted(scores, key=lambda key: -scores[key])[:depth]


def vector_feedback(
    index: UserIndex,
    query: np.ndarray,
    first: Sequence[int],
    allowed: set[int] | None,
    n: int,
    m: int,
    beta: float,
) -> list[int]:
    assert index.vectors is not None
    feedback = index.vectors.unit_rows(list(first[:m])).mean(axis=0)
    moved = (query / np.linalg.norm(query) + beta * feedback).astype(np.float32)
    return [key for key, _ in index.vectors.top_n(moved, n, allowed)]


def term_feedback(
    index: UserIndex,
    query: str,
    first: Sequence[int],
    allowed: set[int] | None,
    n: int,
    m: int,
    t: int,
) -> list[int]:
    from memstrata.retrieval.search import bm25_top
    from memstrata.retrieval.tokenize import tokenize

    weights: dict[str, float] = {}
    for key in first[:m]:
        terms = tokenize(index.rows[key].text)
        for term, tf in Counter(terms).items():
            weights[term] = weights.get(term, 0.0) + tf / max(len(terms), 1)
    own = tokenize(query)
    heaviest = sorted(weights, key=lambda term: -weights[term])
    extra = [term for term in heaviest if term not in own][:t]
    return bm25_top(index, own * 2 + extra, n, allowed)


def rankings(
    index: UserIndex,
    found: Candidates,
    query: str,
    vector: np.ndarray,
    allowed: set[int] | None,
    n: int,
    depth: int,
) -> dict[str, list[int]]:
    """Each variant's first ``depth`` keys; ``n`` candidates a side."""
    first = fused_keys(found.bm25, found.vector, 10)
    out = {"hybrid": fused_keys(found.bm25, found.vector, depth)}
    for m, beta in VPRF:
        moved = vector_feedback(index, vector, first, allowed, n, m, beta)
        out[f"vprf_m{m}_b{beta}"] = fused_keys(found.bm25, moved, depth)
    for w in VECTOR_WEIGHTS:
        out[f"wrrf_v{w}"] = weighted_keys(found.bm25, found.vector, depth, w)
    for m, t in RM3:
        expanded = term_feedback(index, query, first, allowed, n, m, t)
        out[f"rm3_m{m}_t{t}"] = fused_keys(expanded, found.vector, depth)
    return out


def load(name: str, path: Path) -> Dataset:
    from memstrata.bench.locomo import locomo_dataset
    from memstrata.bench.longmemeval import longmemeval_dataset
    from memstrata.bench.madial import madial_dataset

    loaders = {"locomo": locomo_dataset, "longmemeval": longmemeval_dataset}
    return loaders[name](path) if name in loaders else madial_dataset(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "madial"))
    parser.add_argument("path", type=Path)
    parser.add_argument("--embedding-cache", type=Path, default=None)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.recall_sums import RecallSums
    from memstrata.bench import harness
    from memstrata.retrieval.ranking import DecayPolicy
    from memstrata.retrieval.search import as_of_filter

    dataset = load(args.dataset, args.path)
    sums = RecallSums(dataset)
    with cached_runtime(args.embedding_cache) as run:
        mem = run.mem
        assert mem.embedder is not None and mem.search.embedder is not None
        # Candidates a side as for `memstrata bench`'s `hybrid` (decay off).
        n = mem.search.candidate_depth(dataset.depth, DecayPolicy(enabled=False))
        for _, case in run.each(dataset.cases):
            harness.ingest(mem, case, harness.BenchResult(dataset.name))
            index = mem.search.cache.get(case.user_id, mem.search.embedder.name)
            for q in case.questions:
                vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
                found = mem.search.candidates(case.user_id, q.text, vector, n, as_of=q.as_of)
                allowed = as_of_filter(index, q.as_of.timestamp(), None)
                ranked = rankings(index, found, q.text, vector, allowed, n, dataset.depth)
                sums.add(
                    q, {v: [index.rows[k].source_ids for k in keys] for v, keys in ranked.items()}
                )
            print(f"{case.user_id}: {sums.questions} questions so far", flush=True)
    sums.report()


if __name__ == "__main__":
    main()
