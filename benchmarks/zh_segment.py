"""Chinese dictionary word segmentation as extra BM25 terms on MADial-Bench — measured.

Chinese is indexed one term per character plus adjacent-character bigrams (module doc of
``retrieval.tokenize``). Whether the words a segmentation dictionary finds add evidence
the bigrams miss: each variant below adds the words ``jieba`` (MIT, pure Python, its own
dictionary and HMM for unknown words, the library's defaults) cuts from every run of two or
more CJK characters, then ``memstrata bench madial --no-peers`` runs unchanged, one process
a variant because the tokeniser memoises terms process-wide. The variants were fixed before
any was scored:

- ``bigrams``: as shipped (unigrams + bigrams); must print ``memstrata bench madial``'s figures;
- ``words``: unigrams + segmented words of two or more characters, no bigrams;
- ``bigrams+words3``: unigrams + bigrams + words of three or more characters (the words
  bigrams do not already cover);
- ``search``: unigrams + the words of jieba's search mode (``cut_for_search``: each word and
  the dictionary words inside it) of two or more characters, no bigrams;
- ``bigrams+search3``: unigrams + bigrams + search-mode words of three or more characters.

The extra terms are added wherever the product asks for bigrams (rows' stored terms and the
query), never to the harness's ``bm25_unigrams`` rows or to a round's date words. ``--cost``
prints instead what segmentation costs: the dictionary load in a cold process (median of 5),
terms per row and BM25 index memory at MADial's size, and tokenising a 10k-row Chinese
history (MADial's events and dialogue lines, cycled; median of 5) per variant, with
``rjieba`` too when it is installed.

    export PYTHONPATH=PATH/TO/site  # where jieba (and, for --cost, rjieba) is installed
    .venv/bin/python benchmarks/zh_segment.py PATH/TO/madial-folder
    .venv/bin/python benchmarks/zh_segment.py PATH/TO/madial-folder --cost
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import unicodedata
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

# name -> (keep bigrams, jieba mode, shortest word kept); None: the product as it is.
VARIANTS: dict[str, tuple[bool, str, int] | None] = {
    "bigrams": None,
    "words": (False, "cut", 2),
    "bigrams+words3": (True, "cut", 3),
    "search": (False, "search", 2),
    "bigrams+search3": (True, "search", 3),
}
ROWS = ("bm25", "hybrid", "hybrid_spec_decay", "hybrid_floor0.9")
HISTORY_ROWS = 10_000
REPEATS = 5


def segmenter(mode: str) -> Callable[[str], Iterable[str]]:
    """jieba's ``cut`` or ``cut_for_search``; ``rjieba`` (jieba-rs, the same dictionary and
    HMM, compiled) for ``rjieba``, a cost-only row."""
    if mode == "rjieba":
        cut: Callable[[str], Iterable[str]] = importlib.import_module("rjieba").cut
        return cut
    jieba = importlib.import_module("jieba")
    jieba.setLogLevel(logging.WARNING)
    cut = jieba.cut_for_search if mode == "search" else jieba.cut
    return cut


def tokenizer(spec: tuple[bool, str, int] | None) -> Callable[..., list[str]]:
    """``retrieval.tokenize.tokenize`` with the variant's words added where bigrams are asked."""
    from memstrata.retrieval import tokenize as rules

    original = rules.tokenize
    if spec is None:
        return original
    keep_bigrams, mode, shortest = spec
    cut = segmenter(mode)
    run_of = rules._CJK_RUN

    def patched(
        text: str,
        stopwords: Container[str] = rules.ENGLISH_STOPWORDS,
        *,
        stem: bool = True,
        cjk_bigrams: bool = rules.CJK_BIGRAMS,
    ) -> list[str]:
        terms = original(text, stopwords, stem=stem, cjk_bigrams=cjk_bigrams and keep_bigrams)
        if cjk_bigrams:
            normal = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
            for run in run_of.findall(normal):
                terms.extend(w for w in cut(run) if len(w) >= shortest)
        return terms

    return patched


def run_one(name: str, path: Path) -> None:
    """Patch the tokeniser in this process, then run the bench CLI as is."""
    from memstrata.cli import main
    from memstrata.retrieval import search
    from memstrata.retrieval import tokenize as rules

    patched = tokenizer(VARIANTS[name])
    rules.tokenize = patched  # terms.py reads the module attribute
    search.tokenize = patched  # type: ignore[attr-defined]  # the query imported the name
    sys.argv = ["memstrata", "bench", "madial", str(path), "--no-peers"]
    main()


def chinese_texts(path: Path) -> tuple[list[str], list[str]]:
    """MADial's event texts, and its events then dialogue lines (the history's material)."""
    from memstrata.bench.madial import _lines, _one

    events = [e["event"] for obj in _lines(_one(path, "memory")) for e in obj.values()]
    lines = [ln for d in _lines(_one(path, "dialogue")) for ln in d["dialogue"]]
    return events, events + lines


def load_seconds(library: str) -> dict[str, float]:
    """The dictionary load in a fresh process, median of 5 (jieba with its prefix-dict cache
    present, as after a first run, and absent; rjieba has no cache)."""
    timed = {
        "jieba": "import jieba,logging;jieba.setLogLevel(logging.WARNING);jieba.initialize()",
        "rjieba": "import rjieba;rjieba.cut('中文')",
    }[library]
    code = f"import time;t=time.perf_counter();{timed};print(time.perf_counter()-t)"
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:  # where jieba keeps its prefix-dict cache
        env = {**os.environ, "TMPDIR": tmp}
        for cache in ("warm", "cold") if library == "jieba" else ("none",):
            runs = []
            for _ in range(REPEATS):
                if cache == "cold":
                    Path(tmp, "jieba.cache").unlink(missing_ok=True)
                start = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", code], capture_output=True, text=True, env=env
                )
                wall = time.perf_counter() - start
                runs.append((float(done.stdout.strip()), wall))
            out[f"{library}_{cache}_load_s"] = round(statistics.median(r[0] for r in runs), 3)
            out[f"{library}_{cache}_process_s"] = round(statistics.median(r[1] for r in runs), 3)
    return out


def cost(path: Path) -> dict[str, Any]:
    from memstrata.retrieval.bm25_index import BM25Index

    events, material = chinese_texts(path)
    history = [material[i % len(material)] for i in range(HISTORY_ROWS)]
    result: dict[str, Any] = {"events": len(events), "distinct_history_texts": len(material)}
    result.update(load_seconds("jieba"))
    costed = dict(VARIANTS)
    try:
        result.update(load_seconds("rjieba"))
        jieba_cut, rjieba_cut = segmenter("cut"), segmenter("rjieba")
        same = sum(list(jieba_cut(t)) == list(rjieba_cut(t)) for t in material)
        result["rjieba_same_cut_as_jieba"] = f"{same} of {len(material)}"
        costed["words/rjieba"] = (False, "rjieba", 2)
    except ValueError:  # no output: rjieba is not installed
        result["rjieba"] = "not installed"
    for name, spec in costed.items():
        tok = tokenizer(spec)
        tok("预热一下词典")  # the load is measured above, not here
        per_row = [tok(text) for text in events]
        tracemalloc.start()
        index: BM25Index[int] = BM25Index()
        for i, terms in enumerate(per_row):
            index.add(i, terms)
        index_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        times = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            for text in history:
                tok(text)
            times.append(time.perf_counter() - start)
        result[name] = {
            "terms_per_event": round(statistics.mean(map(len, per_row)), 1),
            "distinct_terms": len({t for terms in per_row for t in terms}),
            "index_kib": round(index_bytes / 1024, 1),
            "history_10k_s": round(statistics.median(times), 3),
            "history_10k_p95_s": round(max(times), 3),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--cost", action="store_true", help="measure the cost, not recall")
    parser.add_argument("--one", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        run_one(args.one, args.path)
        return
    if args.cost:
        print(json.dumps(cost(args.path)))
        return
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in VARIANTS:
        done = subprocess.run(
            [sys.executable, __file__, str(args.path), "--one", name],
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])["recall"]
    print("| terms | " + " | ".join(f"`{r}` @5 | @10" for r in ROWS) + " |")
    for name, recall in results.items():
        cells = " | ".join(f"{recall[r]['5']:.4f} | {recall[r]['10']:.4f}" for r in ROWS)
        print(f"| {name} | {cells} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
