"""Recall@5 / @10 per variant, summed over questions and printed the way ``memstrata
bench`` prints it (a line per variant, then one JSON object), for the scripts here that
rank memstrata's candidates their own way (``feedback.py``, ``segmented_query.py``).
Scripts import it as ``benchmarks.recall_sums`` after putting the repository root on
``sys.path``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memstrata.bench.harness import KS

if TYPE_CHECKING:
    from memstrata.bench.harness import Dataset, Question


class RecallSums:
    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.sums: dict[str, dict[int, float]] = {}
        self.questions = 0

    def add(self, question: Question, ranked: dict[str, Sequence[Sequence[str]]]) -> None:
        """One question's rankings: for each variant, the source ids each hit covers."""
        from memstrata.bench import harness

        self.questions += 1
        for name, covered in ranked.items():
            units = harness.distinct_units(covered, self.dataset.unit)
            per_k = self.sums.setdefault(name, {})
            for k in KS:
                how = self.dataset.scores[0]
                per_k[k] = per_k.get(k, 0.0) + harness.score(units, question.gold, k, how)

    def report(self) -> None:
        n = max(self.questions, 1)
        table = {v: {str(k): round(s / n, 4) for k, s in ks.items()} for v, ks in self.sums.items()}
        for name, ks in table.items():
            print(f"{name:20s} @5 {ks['5']:.4f}  @10 {ks['10']:.4f}")
        print(json.dumps({"questions": self.questions, "recall": table}))
