"""Chinese stop characters in BM25 on MADial-Bench — measured, not shipped.

English words on the stop list are dropped before indexing (LoCoMo measured it); Chinese
keeps every character. Whether dropping the commonest function characters as unigrams
helps the same way: each set below is added to the stop set (their bigrams stay, so
``我的`` still matches), then ``memstrata bench madial`` runs unchanged, one process a set
because the tokeniser memoises its terms process-wide. ``none`` is the product as it is
and must print the same figures as ``memstrata bench madial``.

    .venv/bin/python benchmarks/zh_stopchars.py PATH/TO/madial-folder
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SETS = {
    "none": "",
    "particles": "的了吗呢吧啊呀哦嗯着么",
    "particles+pronouns": "的了吗呢吧啊呀哦嗯着么我你他她它们这那",
    "wide": "的了吗呢吧啊呀哦嗯着么我你他她它们这那是在有和就也都个不很还没又",
}
ROWS = ("bm25", "hybrid", "hybrid_spec_decay", "hybrid_floor0.9")


def run_one(extra: str, path: Path) -> None:
    """Patch the stop set in this process, then run the bench CLI as is."""
    from memstrata.cli import main
    from memstrata.retrieval import tokenize

    stop = frozenset(tokenize.ENGLISH_STOPWORDS | set(extra))
    tokenize.ENGLISH_STOPWORDS = stop  # the memoised fast path reads the module global
    tokenize.tokenize.__defaults__ = (stop,)
    tokenize._DEFAULT_TERMS.clear()
    dropped = [c for c in extra if c in stop]
    assert all(c not in tokenize.tokenize(c + "猫") for c in dropped)
    sys.argv = ["memstrata", "bench", "madial", str(path), "--no-peers"]
    main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--one", choices=tuple(SETS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        run_one(SETS[args.one], args.path)
        return
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in SETS:
        done = subprocess.run(
            [sys.executable, __file__, str(args.path), "--one", name],
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])["recall"]
    print("| stop characters added | " + " | ".join(f"`{r}` @5 | @10" for r in ROWS) + " |")
    for name, recall in results.items():
        cells = " | ".join(f"{recall[r]['5']:.4f} | {recall[r]['10']:.4f}" for r in ROWS)
        print(f"| {name} | {cells} |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
