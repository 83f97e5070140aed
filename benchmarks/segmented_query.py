"""A dialogue as the query, embedded line by line — measured on MADial, not shipped.

MADial's query is the dialogue so far (several ``speaker: text`` lines), and one embedding
of the whole dialogue averages its topics. These variants rank the vector side by each
row's best similarity to any line (max-sim over the lines' query embeddings) and fuse it
with the same BM25 list by the same RRF (k=60, decay off) as ``hybrid``:

- ``lines_max``: every line of the dialogue;
- ``user_lines_max``: the user's lines only (not the assistant's);
- ``whole_and_lines_max``: the whole dialogue's embedding and every line's;
- ``lines_mean``: the mean similarity over the lines instead of the best.

    .venv/bin/python benchmarks/segmented_query.py PATH/TO/madial-folder

Events go in through the harness of ``memstrata bench`` (the batch path, real embeddings
from the local server, a temporary embedded PostgreSQL); the run stops without figures if
any row lacks a vector. The ``hybrid`` row must equal ``memstrata bench madial``'s — the
check that this script scores what the product ranks.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ASSISTANT = "Assistant:"


def aggregated(per_line: Sequence[dict[int, float]], how: str, depth: int) -> list[int]:
    """Keys by their best (``max``) or mean (``mean``) similarity over the lines."""
    keys = set().union(*per_line)
    if how == "max":
        score = {k: max(s.get(k, -1.0) for s in per_line) for k in keys}
    else:
        score = {k: sum(s.get(k, -1.0) for s in per_line) / len(per_line) for k in keys}
    return sorted(keys, key=lambda k: (-score[k], k))[:depth]


def _similarities(index: Any, vector: np.ndarray, allowed: set[int] | None) -> dict[int, float]:
    """Every allowed row's cosine similarity to ``vector``."""
    return dict(index.vectors.top_n(vector, len(index.rows), allowed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.recall_sums import RecallSums
    from memstrata.bench import harness
    from memstrata.bench.madial import madial_dataset
    from memstrata.cli.bench import bench_runtime
    from memstrata.retrieval.fusion import fuse
    from memstrata.retrieval.ranking import DecayPolicy
    from memstrata.retrieval.search import as_of_filter

    dataset = madial_dataset(args.path)
    sums = RecallSums(dataset)
    with bench_runtime(None) as mem:
        assert mem.embedder is not None and mem.search.embedder is not None
        n = mem.search.candidate_depth(dataset.depth, DecayPolicy(enabled=False))
        for case in dataset.cases:
            result = harness.BenchResult(dataset.name)
            harness.ingest(mem, case, result)
            index = mem.search.cache.get(case.user_id, mem.search.embedder.name)
            if index.vectors is None or len(index.vectors) != len(index.rows):
                raise SystemExit(f"{case.user_id}: rows without vectors; no figures")
            for q in case.questions:
                lines = [line for line in q.text.split("\n") if line.strip()]
                embedded = mem.embedder.embed([q.text, *lines], "query")
                whole = np.asarray(embedded[0], dtype=np.float32)
                line_vectors = [np.asarray(v, dtype=np.float32) for v in embedded[1:]]
                found = mem.search.candidates(case.user_id, q.text, whole, n, as_of=q.as_of)
                allowed = as_of_filter(index, q.as_of.timestamp(), None)

                per_line = [_similarities(index, v, allowed) for v in line_vectors]
                user = [
                    s
                    for line, s in zip(lines, per_line, strict=True)
                    if not line.startswith(ASSISTANT)
                ] or per_line
                whole_too = [_similarities(index, whole, allowed), *per_line]
                sides = {
                    "hybrid": found.vector,
                    "lines_max": aggregated(per_line, "max", n),
                    "user_lines_max": aggregated(user, "max", n),
                    "whole_and_lines_max": aggregated(whole_too, "max", n),
                    "lines_mean": aggregated(per_line, "mean", n),
                }
                variants = {
                    name: [f.key for f in fuse(found.bm25, side, top_k=dataset.depth, decay=False)]
                    for name, side in sides.items()
                }
                sums.add(
                    q, {v: [index.rows[k].source_ids for k in keys] for v, keys in variants.items()}
                )
    sums.report()


if __name__ == "__main__":
    main()
