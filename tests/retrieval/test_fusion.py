from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memstrata.retrieval.fusion import Explained, decay_factor, fuse, is_resident, rrf_scores


class TestRrf:
    def test_sums_reciprocal_ranks_with_k_60(self) -> None:
        assert rrf_scores([["a", "b", "c"], ["c", "a"]]) == {
            "a": 1 / 61 + 1 / 62,
            "b": 1 / 62,
            "c": 1 / 63 + 1 / 61,
        }

    def test_rank_one_and_rank_three(self) -> None:
        assert rrf_scores([["x"], ["y", "z", "x"]])["x"] == pytest.approx(0.0322665, abs=1e-7)
        assert rrf_scores([["x"], ["y", "z", "x"]])["x"] == 1 / 61 + 1 / 63

    def test_custom_k(self) -> None:
        assert rrf_scores([["a", "b"]], k=0) == {"a": 1.0, "b": 0.5}

    def test_repeated_key_counts_at_its_best_rank_once(self) -> None:
        assert rrf_scores([["a", "b", "a"]]) == {"a": 1 / 61, "b": 1 / 62}

    def test_keys_in_order_of_first_appearance(self) -> None:
        assert list(rrf_scores([["b", "a"], ["c", "a"]])) == ["b", "a", "c"]

    def test_empty(self) -> None:
        assert rrf_scores([]) == {}
        assert rrf_scores([[], []]) == {}

    def test_negative_k_rejected(self) -> None:
        with pytest.raises(ValueError, match="k must be >= 0"):
            rrf_scores([["a"]], k=-1)


class TestDecay:
    @pytest.mark.parametrize(
        ("age", "expected"),
        [(0.0, 1.0), (30.0, 0.5), (60.0, 0.25), (90.0, 0.125), (15.0, 2**-0.5)],
    )
    def test_halves_every_30_days(self, age: float, expected: float) -> None:
        assert decay_factor(age) == pytest.approx(expected, abs=1e-15)

    @pytest.mark.parametrize(("age", "expected"), [(0.0, 1.0), (30.0, 0.75), (60.0, 0.625)])
    def test_floor_bounds_the_decay(self, age: float, expected: float) -> None:
        assert decay_factor(age, floor=0.5) == pytest.approx(expected, abs=1e-15)

    def test_custom_half_life(self) -> None:
        assert decay_factor(7.0, half_life_days=7.0) == pytest.approx(0.5, abs=1e-15)

    def test_a_half_life_of_a_day_or_less_is_a_half_life(self) -> None:
        assert decay_factor(1.0, half_life_days=1.0) == 0.5
        assert decay_factor(0.25, half_life_days=0.5) == pytest.approx(2**-0.5, abs=1e-15)

    @pytest.mark.parametrize("age", [0.5, 1.0])
    def test_decay_starts_at_once_not_after_a_day(self, age: float) -> None:
        # Only ages at or below zero are exempt: a turn from this morning is already a
        # little less fresh than one from a minute ago.
        assert decay_factor(age) == pytest.approx(0.5 ** (age / 30), abs=1e-15)
        assert decay_factor(age) < 1.0

    def test_a_floor_of_one_keeps_every_age_whole(self) -> None:
        assert decay_factor(365.0, floor=1.0) == 1.0

    @pytest.mark.parametrize("age", [-0.5, -400.0])
    def test_future_timestamps_do_not_decay(self, age: float) -> None:
        assert decay_factor(age) == 1.0
        assert decay_factor(age, floor=0.3) == 1.0

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"half_life_days": 0.0}, "half_life_days must be > 0"),
            ({"floor": 1.5}, "floor must be between 0 and 1"),
            ({"floor": -0.1}, "floor must be between 0 and 1"),
        ],
    )
    def test_bad_parameters_rejected(self, kwargs: dict[str, float], message: str) -> None:
        with pytest.raises(ValueError, match=message):
            decay_factor(1.0, **kwargs)

    def test_nan_age_rejected(self) -> None:
        with pytest.raises(ValueError, match="NaN"):
            decay_factor(math.nan)


class TestResident:
    @pytest.mark.parametrize(
        "path",
        [
            "MEMORY.md",
            "USER.md",
            "SOUL.md",
            "AGENTS.md",
            "memory.md",
            "User.MD",
            "./SOUL.md",
            "/AGENTS.md",
        ],
    )
    def test_root_memory_files(self, path: str) -> None:
        assert is_resident(path)

    @pytest.mark.parametrize(
        "path",
        [
            None,
            "",
            "sessions/abc",
            "memory/2026-12-01.md",
            "notes/MEMORY.md",
            "MEMORY.md.bak",
            "TOOLS.md",
            # Names that only end like a resident file.
            "XMEMORY.md",
            "old-USER.md",
        ],
    )
    def test_everything_else(self, path: str | None) -> None:
        assert not is_resident(path)


class TestFuse:
    def test_explains_every_score(self) -> None:
        results = fuse(["a", "b"], ["b", "c"], ages_days={"a": 30.0, "b": 0.0, "c": None})
        assert results == [
            Explained(
                key="b",
                score=1 / 62 + 1 / 61,
                rrf_score=1 / 62 + 1 / 61,
                decay_factor=1.0,
                bm25_rank=2,
                vector_rank=1,
                age_days=0.0,
                resident=False,
            ),
            Explained(
                key="c",
                score=1 / 62,
                rrf_score=1 / 62,
                decay_factor=1.0,  # unknown age: no decay
                bm25_rank=None,
                vector_rank=2,
                age_days=None,
                resident=False,
            ),
            Explained(
                key="a",
                score=0.5 / 61,
                rrf_score=1 / 61,
                decay_factor=0.5,
                bm25_rank=1,
                vector_rank=None,
                age_days=30.0,
                resident=False,
            ),
        ]

    def test_explain_names_every_stage(self) -> None:
        """The shape a search hit's ``explain`` carries (docs/API.md), RRF-ranked."""
        (result,) = fuse(["a"], ["a"], ages_days={"a": 30.0})
        assert result.explain() == {
            "bm25_rank": 1,
            "vector_rank": 1,
            "rrf_score": 2 / 61,
            "decay_factor": 0.5,
            "age_days": 30.0,
            "resident": False,
        }

    def test_resident_files_are_exempt_from_decay(self) -> None:
        ages = {"MEMORY.md#0": 300.0, "turn-1": 300.0}
        results = fuse(
            ["turn-1", "MEMORY.md#0"], [], ages_days=ages, resident={"MEMORY.md#0": True}
        )
        assert [(r.key, r.decay_factor, r.resident) for r in results] == [
            ("MEMORY.md#0", 1.0, True),
            ("turn-1", pytest.approx(2**-10), False),
        ]
        assert results[0].score == 1 / 62

    def test_floor_and_half_life_are_passed_through(self) -> None:
        (result,) = fuse(["a"], [], ages_days={"a": 10.0}, half_life_days=10.0, floor=0.5)
        assert result.decay_factor == pytest.approx(0.75, abs=1e-15)
        assert result.score == pytest.approx(0.75 / 61, abs=1e-15)

    def test_decay_can_be_switched_off(self) -> None:
        (result,) = fuse(["a"], [], ages_days={"a": 60.0}, decay=False)
        assert (result.decay_factor, result.score) == (1.0, 1 / 61)

    def test_future_age_does_not_boost(self) -> None:
        (result,) = fuse([], ["a"], ages_days={"a": -3.0})
        assert (result.decay_factor, result.score) == (1.0, 1 / 61)

    def test_top_k_and_custom_k(self) -> None:
        results = fuse(["a", "b", "c"], ["c"], k=0, top_k=2)
        assert [(r.key, r.score) for r in results] == [("c", 1 / 3 + 1.0), ("a", 1.0)]
        assert fuse(["a"], ["b"], top_k=0) == []

    def test_ties_by_best_rank_then_first_appearance(self) -> None:
        # k = 0: z, x and y all score exactly 1.0; x's best rank is only 2.
        results = fuse(["z", "x"], ["y", "x"], k=0)
        assert [(r.key, r.score) for r in results] == [("z", 1.0), ("y", 1.0), ("x", 1.0)]

    def test_bm25_only_degradation(self) -> None:
        results = fuse(["a", "b"], [])
        assert [(r.key, r.bm25_rank, r.vector_rank) for r in results] == [
            ("a", 1, None),
            ("b", 2, None),
        ]

    def test_empty(self) -> None:
        assert fuse([], []) == []

    def test_results_are_frozen(self) -> None:
        (result,) = fuse(["a"], [])
        with pytest.raises(dataclasses.FrozenInstanceError):
            result.score = 2.0  # type: ignore[misc]


# Up to ten keys ranked by each list, each of an age from today to five half-lives.
_ranking = st.lists(st.integers(0, 9), max_size=10, unique=True)
_ages = st.lists(st.sampled_from([None, 0.0, 10.0, 45.0, 150.0]), min_size=10, max_size=10)


class TestRelevancePool:
    @given(_ranking, _ranking, _ages, st.integers(0, 12))
    # No pool to keep: the most relevant key, 150 days old, goes after a recent one.
    @example([0, 1], [0, 1], [150.0, 0.0, *[None] * 8], 0)
    def test_decay_orders_the_most_relevant_keys_then_the_rest(
        self, bm25: list[int], vector: list[int], ages: list[float | None], pool: int
    ) -> None:
        """``pool`` keys, the most relevant by RRF, come first, each part ordered by its
        decayed score: no key outside the pool is more relevant than one inside it."""
        ranked = fuse(bm25, vector, ages_days=dict(enumerate(ages)), pool=pool)
        assert sorted(r.key for r in ranked) == sorted({*bm25, *vector})
        inside, outside = ranked[:pool], ranked[pool:]
        if inside and outside:
            assert min(r.rrf_score for r in inside) >= max(r.rrf_score for r in outside)
        for part in (inside, outside):
            assert [r.score for r in part] == sorted((r.score for r in part), reverse=True)
