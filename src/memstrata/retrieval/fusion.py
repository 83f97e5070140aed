"""Reciprocal rank fusion of BM25 and vector rankings, with exponential time decay.

RRF combines rankings by position only, so BM25 scores and cosine similarities never
have to be calibrated against each other, and a retriever that is down (no embedding API)
simply contributes an empty ranking. Decay then prefers recent conversation over old
conversation with the same relevance; the resident files (MEMORY / USER / SOUL / AGENTS.md)
are exempt because they are the user's curated, always-current memory, however long ago
they were last edited. Decay re-orders every candidate, as the spec says; the relevance
pool (``relevance_pool``: decay re-orders only the most relevant keys by the undecayed
score, the others follow) is an opt-in departure (``MEMSTRATA_DECAY_POOL``): over every
candidate, a recent row at the bottom of one list (RRF ≈ 1/90) outranks a 150-day-old
first hit (2/61 × 0.03). Every fused item carries the numbers that produced its score so
a surprising result can be explained to the user.

Convex score fusion (``convex_scores``) is an opt-in departure from the spec's RRF
(``MEMSTRATA_SEARCH_FUSION=convex``, docs/BENCHMARKS.md "Score fusion (opt-in)"): it keeps
how far ahead of the rest a list's first hit is, which RRF's ranks forget.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = [
    "CONVEX_BM25_WEIGHT",
    "DAY_SECONDS",
    "HALF_LIFE_DAYS",
    "RESIDENT_FILES",
    "RRF_K",
    "Explained",
    "Fusion",
    "convex_scores",
    "decay_factor",
    "fuse",
    "is_resident",
    "min_max",
    "relevance_pool",
    "rrf_scores",
]

RRF_K = 60  # spec
HALF_LIFE_DAYS = 30.0  # spec
# Ages are in days; timestamps are in seconds.
DAY_SECONDS = 86_400.0
RESIDENT_FILES = frozenset({"memory.md", "user.md", "soul.md", "agents.md"})
# How both lists are combined: the spec's RRF, or convex score fusion (opt-in).
Fusion = Literal["rrf", "convex"]
# BM25's share in convex fusion, fixed at an even split before it was measured (0.3 and
# 0.7 each cost one of the two datasets: docs/BENCHMARKS.md).
CONVEX_BM25_WEIGHT = 0.5

K = TypeVar("K", bound=Hashable)


def rrf_scores(rankings: Sequence[Sequence[K]], k: int = RRF_K) -> dict[K, float]:
    """Sum ``1 / (k + rank)`` over rankings (rank 1 is best); a key repeated within one
    ranking counts only at its best rank. Keys appear in order of first appearance."""
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    scores: dict[K, float] = {}
    for ranking in rankings:
        for key, rank in _first_ranks(ranking).items():
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return scores


def decay_factor(
    age_days: float, half_life_days: float = HALF_LIFE_DAYS, floor: float = 0.0
) -> float:
    """``floor + (1 - floor) * 0.5 ** (age / half_life)``; a ``floor`` above 0 keeps very old
    memories findable. Ages at or below zero (clock skew, future timestamps) give 1.0."""
    if half_life_days <= 0:
        raise ValueError(f"half_life_days must be > 0, got {half_life_days}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"floor must be between 0 and 1, got {floor}")
    if math.isnan(age_days):
        raise ValueError("age_days is NaN")
    if age_days <= 0:
        return 1.0
    return floor + (1.0 - floor) * math.pow(0.5, age_days / half_life_days)


def is_resident(file_path: str | None) -> bool:
    """Whether ``file_path`` is one of the root-level resident memory files."""
    if file_path is None:
        return False
    name = file_path.removeprefix("./").lstrip("/")
    return name.casefold() in RESIDENT_FILES


@dataclass(frozen=True, slots=True)
class Explained(Generic[K]):
    """One fused result and how its score came about (ranks are 1-based, None if absent)."""

    key: K
    score: float
    rrf_score: float
    decay_factor: float
    bm25_rank: int | None
    vector_rank: int | None
    age_days: float | None
    resident: bool
    # The convex fusion score (before decay) when convex fusion ranked; None under RRF.
    convex_score: float | None = None

    @property
    def relevance(self) -> float:
        """The score before decay: the convex score when convex fusion ranked, else RRF."""
        return self.rrf_score if self.convex_score is None else self.convex_score

    def explain(self) -> dict[str, float | int | bool | None]:
        """The per-stage numbers a search hit carries as ``explain`` (``convex_score``
        only when convex fusion ranked: the RRF-ranked shape is unchanged)."""
        out: dict[str, float | int | bool | None] = {
            "bm25_rank": self.bm25_rank,
            "vector_rank": self.vector_rank,
            "rrf_score": self.rrf_score,
            "decay_factor": self.decay_factor,
            "age_days": self.age_days,
            "resident": self.resident,
        }
        if self.convex_score is not None:
            out["convex_score"] = self.convex_score
        return out


def fuse(
    bm25_ranked: Sequence[K],
    vector_ranked: Sequence[K],
    *,
    k: int = RRF_K,
    top_k: int | None = None,
    ages_days: Mapping[K, float | None] | None = None,
    resident: Mapping[K, bool] | None = None,
    half_life_days: float = HALF_LIFE_DAYS,
    floor: float = 0.0,
    decay: bool = True,
    pool: int | None = None,
    scores: tuple[Mapping[K, float], Mapping[K, float]] | None = None,
) -> list[Explained[K]]:
    """Fuse two rankings into at most ``top_k`` explained results, best first.

    A key decays unless ``decay`` is off, it is marked resident, or its age is unknown
    (missing or None in ``ages_days``): an undated chunk is not evidence of staleness.
    With ``pool``, decay orders the ``pool`` most relevant keys only and the rest follow
    them (``relevance_pool``, opt-in); None, the spec's, lets decay order every key. With
    ``scores`` (each list's raw scores: BM25, cosine) keys are scored by ``convex_scores``
    instead of RRF.
    Equal scores are ordered by the better of the two ranks, then by first appearance
    (BM25 ranking first, then vector ranking), so results are reproducible.
    """
    bm25_ranks = _first_ranks(bm25_ranked)
    vector_ranks = _first_ranks(vector_ranked)
    ages = ages_days or {}
    residents = resident or {}
    items: list[tuple[tuple[float, int, int], Explained[K]]] = []
    convex = convex_scores(*scores) if scores is not None else {}
    for order, (key, rrf) in enumerate(rrf_scores([bm25_ranked, vector_ranked], k).items()):
        age = ages.get(key)
        is_res = residents.get(key, False)
        factor = 1.0
        if decay and not is_res and age is not None:
            factor = decay_factor(age, half_life_days, floor)
        bm25_rank = bm25_ranks.get(key)
        vector_rank = vector_ranks.get(key)
        best_rank = min(r for r in (bm25_rank, vector_rank) if r is not None)
        convex_score = convex.get(key, 0.0) if scores is not None else None
        item = Explained(
            key=key,
            score=(rrf if convex_score is None else convex_score) * factor,
            rrf_score=rrf,
            decay_factor=factor,
            bm25_rank=bm25_rank,
            vector_rank=vector_rank,
            age_days=age,
            resident=is_res,
            convex_score=convex_score,
        )
        items.append(((-item.score, best_rank, order), item))
    if decay and pool is not None:
        items = relevance_pool(items, pool)
    else:
        items.sort(key=lambda pair: pair[0])
    ranked = [item for _, item in items]
    return ranked if top_k is None else ranked[: max(top_k, 0)]


def relevance_pool(
    items: Sequence[tuple[tuple[float, int, int], Explained[K]]], pool: int
) -> list[tuple[tuple[float, int, int], Explained[K]]]:
    """``items`` (sort key, fused item) with the ``pool`` most relevant first — by the
    undecayed score, ties as ``fuse`` breaks them — ordered by their decayed score, then
    the others, ordered the same way. Decay decides between relevant rows; it cannot lift
    a recent row that matched poorly over an old answer."""

    def relevance(pair: tuple[tuple[float, int, int], Explained[K]]) -> tuple[float, int, int]:
        _, best_rank, order = pair[0]
        return (-pair[1].relevance, best_rank, order)

    by_relevance = sorted(items, key=relevance)
    cut = max(pool, 0)
    inside, outside = by_relevance[:cut], by_relevance[cut:]
    return sorted(inside, key=lambda p: p[0]) + sorted(outside, key=lambda p: p[0])


def min_max(scores: Mapping[K, float]) -> dict[K, float]:
    """Scores mapped onto [0, 1] within one candidate list (all 1.0 when they are equal)."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    return {key: (s - lo) / (hi - lo) if hi > lo else 1.0 for key, s in scores.items()}


def convex_scores(
    bm25: Mapping[K, float], vector: Mapping[K, float], bm25_weight: float = CONVEX_BM25_WEIGHT
) -> dict[K, float]:
    """``w · bm25' + (1 − w) · cosine'`` over both candidate lists, each side min-max
    normalised within its list (a key absent from a list gets that side's 0). Unlike RRF
    it keeps how far ahead a list's first hit is: a row only one side finds, far better
    than anything else there, is not outranked by rows both sides find mediocre — nor
    rewarded for mere agreement. Keys in order of first appearance, BM25 list first."""
    if not 0.0 <= bm25_weight <= 1.0:
        raise ValueError(f"bm25_weight must be between 0 and 1, got {bm25_weight}")
    nb, nv = min_max(bm25), min_max(vector)
    return {
        key: bm25_weight * nb.get(key, 0.0) + (1.0 - bm25_weight) * nv.get(key, 0.0)
        for key in dict.fromkeys([*bm25, *vector])
    }


def _first_ranks(ranking: Sequence[K]) -> dict[K, int]:
    ranks: dict[K, int] = {}
    for rank, key in enumerate(ranking, start=1):
        ranks.setdefault(key, rank)
    return ranks
