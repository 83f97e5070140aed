"""Where a cut may fall: at a grapheme-cluster boundary, never inside what a reader sees
as one character."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memstrata.text import MAX_CLUSTER_CHARS, grapheme_cut

FAMILY = "👨\u200d👩\u200d👧"
CLUSTERS = [
    FAMILY,
    "🇨🇳",
    "👋🏽",
    "e\u0301",
    "क्ष",
    "\r\n",
    "🏴\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
]


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_a_cut_inside_a_cluster_moves_to_its_start(cluster: str) -> None:
    text = "ab" + cluster + "cd"
    for inside in range(3, 2 + len(cluster)):
        assert grapheme_cut(text, inside) == 2, (cluster, inside)
    assert grapheme_cut(text, 2) == 2
    assert grapheme_cut(text, 2 + len(cluster)) == 2 + len(cluster)


def test_two_flags_are_two_clusters() -> None:
    text = "x🇨🇳🇫🇷y"
    assert [grapheme_cut(text, i) for i in range(len(text) + 1)] == [0, 1, 1, 3, 3, 5, 6]


def test_a_cut_always_makes_progress_past_the_floor() -> None:
    # A cluster that starts at the floor is cut where asked: an empty piece is no option.
    assert grapheme_cut(FAMILY + "x", 3) == 3
    assert grapheme_cut("ab" + FAMILY, 4, floor=2) == 4
    marks = "a" + "\u0301" * (3 * MAX_CLUSTER_CHARS) + "b"
    assert grapheme_cut(marks, 2 * MAX_CLUSTER_CHARS) == 2 * MAX_CLUSTER_CHARS


@given(st.text(max_size=40), st.integers(min_value=0, max_value=45))
def test_a_cut_never_moves_forward_or_past_the_floor(text: str, index: int) -> None:
    cut = grapheme_cut(text, index)
    assert cut <= index
    assert cut > 0 or index <= 0
