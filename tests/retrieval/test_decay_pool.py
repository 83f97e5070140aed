"""With the opt-in relevance pool (``MEMSTRATA_DECAY_POOL``), time decay re-orders only
the pool (``fusion.relevance_pool``, ``ranking.decay_pool``): the most relevant rows by
RRF, max(3 × top_k, 30) of them. The default, decay over every candidate as the spec says,
is in tests/retrieval/test_decay_every_candidate.py.

Pure ranking over hand-made candidates, so every rank and age is known: with decay over
every candidate, a recent row from the bottom of a list outranks an old first hit.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memstrata.retrieval.fusion import fuse
from memstrata.retrieval.ranking import Candidates, DecayPolicy, decay_pool, rank
from memstrata.retrieval.rows import Row

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SPEC_DECAY = DecayPolicy(True, 30.0, 0.0)
NO_DECAY = DecayPolicy(enabled=False)


def row(key: int, age_days: float) -> Row:
    created = (NOW - timedelta(days=age_days)).timestamp()
    return Row(
        key, f"sessions/s/{key}", 0, f"turn {key}", created, "conversation", (f"s:{key}",), None
    )


def conversation(old: int, recent: int) -> Candidates:
    """``old`` rows 150 days old that both lists rank first (key 0 the best match), then
    ``recent`` rows from today at the bottom of both lists: 30 a side for 30 + 30."""
    keys = list(range(old + recent))
    rows = {k: row(k, 150.0 if k < old else 0.0) for k in keys}
    return Candidates(keys, list(keys), rows, "hybrid")


POOLED = -1  # keys_of's default: the pool the setting gives ``top_k``


def keys_of(
    found: Candidates, top_k: int, decay: DecayPolicy, pool: int | None = POOLED
) -> list[int]:
    """The ranked keys with the relevance pool on (``decay_pool(top_k)`` unless ``pool``
    says otherwise; None: decay over every candidate)."""
    depth = decay_pool(top_k) if pool == POOLED else pool
    hits = rank(found, top_k=top_k, as_of=NOW, decay=decay, pool=depth)
    return [int(h.source_ids[0].removeprefix("s:")) for h in hits]


def test_the_pool_is_one_sides_depth_under_decay() -> None:
    assert [decay_pool(k) for k in (1, 5, 10, 11, 50)] == [30, 30, 30, 33, 150]
    assert decay_pool(5, multiplier=4, minimum=10) == 20


def test_an_old_exact_match_beats_recent_weak_matches_outside_the_pool() -> None:
    found = conversation(old=40, recent=20)
    # The 30 most relevant rows are all old: decay orders them, the recent rows that only
    # came 41st–60th in both lists stay behind them.
    assert keys_of(found, 5, SPEC_DECAY) == [0, 1, 2, 3, 4]
    # Decay over every candidate (the spec's default, or a pool as deep as all 60) puts the
    # recent ones first.
    assert keys_of(found, 5, SPEC_DECAY, pool=60) == [40, 41, 42, 43, 44]
    assert keys_of(found, 5, SPEC_DECAY, pool=None) == [40, 41, 42, 43, 44]


def test_decay_still_decides_between_relevant_rows() -> None:
    """Within the pool the spec's rule holds: a slightly less relevant recent row wins."""
    rows = {0: row(0, 150.0), 1: row(1, 0.0)}
    found = Candidates([0, 1], [0, 1], rows, "hybrid")
    assert keys_of(found, 2, SPEC_DECAY) == [1, 0]
    hits = rank(found, top_k=2, as_of=NOW, decay=SPEC_DECAY, pool=decay_pool(2))
    assert hits[1].score == pytest.approx(2 / 61 * 0.5**5)


def test_rows_beyond_the_pool_follow_it_rather_than_vanish() -> None:
    found = conversation(old=40, recent=20)
    ranked = keys_of(found, 60, SPEC_DECAY, pool=30)
    assert ranked[:30] == list(range(30))
    assert sorted(ranked[30:]) == list(range(30, 60)) and len(ranked) == 60
    # Outside the pool, decay still orders: the recent rows before the old ones.
    assert ranked[30:50] == list(range(40, 60))


@pytest.mark.parametrize("old", [10, 25, 40])
def test_the_first_five_do_not_depend_on_top_k_under_decay(old: int) -> None:
    found = conversation(old=old, recent=60 - old)
    assert keys_of(found, 5, SPEC_DECAY) == keys_of(found, 10, SPEC_DECAY)[:5]


@pytest.mark.parametrize("pool", [None, 1, 30, 60])
def test_decay_off_ranks_by_rrf_whatever_the_pool(pool: int | None) -> None:
    found = conversation(old=40, recent=20)
    assert keys_of(found, 60, NO_DECAY, pool=pool) == list(range(60))
    plain = fuse(found.bm25, found.vector, decay=False)
    assert fuse(found.bm25, found.vector, decay=False, pool=pool) == plain


def test_fuse_without_a_pool_decays_every_key_as_before() -> None:
    ages = {k: 150.0 if k < 40 else 0.0 for k in range(60)}
    keys = list(range(60))
    ranked = [r.key for r in fuse(keys, keys, ages_days=ages)]
    assert ranked[:20] == list(range(40, 60))
