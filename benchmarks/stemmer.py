"""A Snowball English stemmer for BM25 against the light stemmer — measured, not shipped.

memstrata's English BM25 terms go through ``tokenize.light_stem`` (plural, -ed and -ing
only). This script swaps that step for a Snowball stemmer (PyStemmer, the C Snowball
library: ``english`` is Porter2, ``porter`` the original Porter algorithm) at the same
place — after the stop list, memoised the same way, only on ASCII letter words as
``light_stem`` — and runs the harness of ``memstrata bench`` unchanged: the rows are
written through the batch path with terms made by that stemmer, and questions ranked by
the product's ``candidates`` + ``rank``. The vector side is the same in every run. One
process a stemmer, because the tokeniser memoises its terms process-wide. The ``light``
rows are the product as it is and must equal ``memstrata bench``'s — the check that this
script scores what the product ranks.

    .venv/bin/pip install PyStemmer   # a measurement dependency, not the product's
    .venv/bin/python benchmarks/stemmer.py locomo PATH/TO/locomo-dev.json --embedding-cache DIR
    .venv/bin/python benchmarks/stemmer.py madial PATH/TO/madial-folder --embedding-cache DIR
    .venv/bin/python benchmarks/stemmer.py longmemeval PATH/TO/longmemeval-s.json.gz \\
        --embedding-cache DIR
    .venv/bin/python benchmarks/stemmer.py cost PATH/TO/locomo-dev.json PATH/TO/longmemeval...

``--embedding-cache DIR`` keeps the embeddings between runs (``feedback.EmbeddingCache``),
so only the first run calls the embedding server. ``cost`` times tokenising texts of the
given LoCoMo and LongMemEval files with each stemmer (CPU, cold memo, interleaved) and
counts the strings whose terms differ from the light stemmer's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memstrata.retrieval.tokenize import light_stem as LIGHT_STEM  # before any swap

if TYPE_CHECKING:
    from memstrata.bench.harness import BenchResult, Dataset

STEMMERS = ("light", "english", "porter")
# `vector` too: the Chinese rows of the harness fuse with it, and it must not move.
ROWS = ("bm25", "vector", "hybrid", "hybrid_spec_decay")


def stem_with(name: str) -> Callable[[str], str]:
    """The stemming step ``name`` stands for: memstrata's own, or a Snowball algorithm on
    the words ``light_stem`` may change (ASCII letters: other scripts, digits and mixed
    terms such as ``3pm`` stay as they are)."""
    if name == "light":
        return LIGHT_STEM
    import Stemmer  # type: ignore[import-not-found]

    stem_word: Callable[[str], str] = Stemmer.Stemmer(name).stemWord

    def snowball(term: str) -> str:
        return stem_word(term) if term.isascii() and term.isalpha() else term

    return snowball


def use_stemmer(name: str) -> None:
    """Make the tokeniser's stemming step ``name``'s in this process, memo emptied
    (``tokenize`` and its memo look ``light_stem`` up at each call)."""
    from memstrata.retrieval import tokenize

    tokenize.light_stem = stem_with(name)  # type: ignore[assignment]
    tokenize._DEFAULT_TERMS.clear()


def load(name: str, path: Path, limit: int | None) -> Dataset:
    from memstrata.bench.locomo import locomo_dataset
    from memstrata.bench.longmemeval import longmemeval_dataset
    from memstrata.bench.madial import madial_dataset

    loaders = {"locomo": locomo_dataset, "longmemeval": longmemeval_dataset}
    return loaders.get(name, madial_dataset)(path, limit)


def add(total: BenchResult, part: BenchResult) -> None:
    """Sum one case's recall into ``total`` (the harness sums over questions)."""
    total.questions += part.questions
    total.rows += part.rows
    total.rows_with_vectors += part.rows_with_vectors
    for how, variants in part.sums.items():
        for variant, ks in variants.items():
            into = total.sums.setdefault(how, {}).setdefault(variant, {})
            for k, s in ks.items():
                into[k] = into.get(k, 0.0) + s
    for kind, agg in part.by_kind.items():
        into_kind = total.by_kind.setdefault(kind, {})
        for key, value in agg.items():
            into_kind[key] = into_kind.get(key, 0.0) + value


def run_one(stemmer: str, dataset: Dataset, cache_dir: Path | None) -> None:
    """The harness with ``stemmer``, case by case (the cache saved after each); prints the
    JSON ``memstrata bench`` prints."""
    from benchmarks.feedback import cached_runtime
    from memstrata.bench import harness

    use_stemmer(stemmer)
    variants = {row: harness.VARIANTS[row] for row in ROWS}
    total = harness.BenchResult(dataset.name)
    with cached_runtime(cache_dir) as run:
        for _, case in run.each(dataset.cases):
            one = replace(dataset, cases=[case])
            add(total, harness.run(run.mem, one, peers=False, variants=variants))
            print(f"{stemmer} {case.user_id}: {total.questions} questions", file=sys.stderr)
    if total.rows_with_vectors != total.rows:
        raise SystemExit("rows without vectors; no figures")
    for kind, agg in sorted(total.by_kind.items()):
        print(
            f"by type  {kind:56s} {agg['sum'] / agg['n']:.4f} (n={agg['n']:.0f})", file=sys.stderr
        )
    print(total.to_json(dataset.scores))


def compare(args: argparse.Namespace) -> None:
    results: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for name in STEMMERS:
        command = [sys.executable, __file__, args.dataset, str(args.path), "--one", name]
        if args.embedding_cache is not None:
            command += ["--embedding-cache", str(args.embedding_cache)]
        if args.limit is not None:
            command += ["--limit", str(args.limit)]
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
        out = json.loads(done.stdout.strip().splitlines()[-1])
        results[name] = {score: out[score] for score in ("recall", "recall_any") if score in out}
        print(f"{name}: {out['questions']} questions, {out['rows']} rows", flush=True)
    for score in results["light"]:
        print(f"\n{score}\n| row | " + " | ".join(f"{s} @5 | @10" for s in STEMMERS) + " |")
        for row in [*ROWS, "bm25_unigrams", "hybrid_unigrams"]:
            if row in results["light"][score]:
                cells = [results[s][score][row] for s in STEMMERS]
                line = " | ".join(f"{c['5']:.4f} | {c['10']:.4f}" for c in cells)
                print(f"| `{row}` | {line} |")
    print(json.dumps(results))


def texts_of(dataset: Dataset) -> list[str]:
    """Every round's stored text and every question of ``dataset``."""
    from memstrata.retrieval.rounds import format_round

    texts = [
        format_round(r.user_message, r.assistant_reply) for c in dataset.cases for r in c.rounds
    ]
    return texts + [q.text for c in dataset.cases for q in c.questions]


def cost(paths: Sequence[Path], repeats: int, rows: int) -> None:
    """CPU to tokenise ``rows`` texts of each file, each stemmer with its memo (and
    PyStemmer's own cache) empty, interleaved; and the strings whose terms moved."""
    from memstrata.retrieval import tokenize

    for path in paths:
        name = "longmemeval" if ".gz" in path.name or "longmemeval" in path.name else "locomo"
        texts = texts_of(load(name, path, None))[:rows]
        timings: dict[str, list[float]] = {s: [] for s in STEMMERS}
        terms: dict[str, list[list[str]]] = {}
        for _ in range(repeats):
            for stemmer in STEMMERS:
                use_stemmer(stemmer)
                began = time.process_time()
                terms[stemmer] = [tokenize.tokenize(t) for t in texts]
                timings[stemmer].append((time.process_time() - began) * 1000)
        print(f"{path.name}: {len(texts)} texts, {len(tokenize._DEFAULT_TERMS)} distinct words")
        for stemmer, ms in timings.items():
            p95 = statistics.quantiles(ms, n=20, method="inclusive")[-1]
            moved = sum(a != b for a, b in zip(terms[stemmer], terms["light"], strict=True))
            print(
                f"  {stemmer:8s} CPU median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms; "
                f"{moved} of {len(texts)} texts with other terms than light"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("locomo", "longmemeval", "madial", "cost"))
    parser.add_argument("path", type=Path, nargs="+")
    parser.add_argument("--embedding-cache", type=Path, default=None)
    parser.add_argument("--limit", type=int, default=None, help="questions, balanced by type")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--rows", type=int, default=10_000, help="texts a file, for cost")
    parser.add_argument("--one", choices=STEMMERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.dataset == "cost":
        cost(args.path, args.repeats, args.rows)
        return
    args.path = args.path[0]
    if args.one is not None:
        run_one(args.one, load(args.dataset, args.path, args.limit), args.embedding_cache)
        return
    compare(args)


if __name__ == "__main__":
    main()
