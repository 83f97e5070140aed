from __future__ import annotations

import math

import numpy as np
import pytest

from memstrata.config import STORED_VECTOR_DIM
from memstrata.errors import VectorDimensionError
from memstrata.retrieval.vector import pad_vector


def test_short_vector_is_right_padded_with_zeros_to_the_stored_dimension() -> None:
    padded = pad_vector([0.25, -1.0, 3])

    assert len(padded) == STORED_VECTOR_DIM == 2560
    assert padded[:3] == [0.25, -1.0, 3.0]
    assert padded[3:] == [0.0] * (STORED_VECTOR_DIM - 3)
    assert all(type(x) is float for x in padded)


def test_vector_of_exactly_the_stored_dimension_is_unchanged() -> None:
    v = [float(i) for i in range(STORED_VECTOR_DIM)]
    assert pad_vector(v) == v


def test_custom_dimension() -> None:
    assert pad_vector((1.0, 2.0), dim=4) == [1.0, 2.0, 0.0, 0.0]


def test_numpy_input_is_accepted() -> None:
    padded = pad_vector(np.array([0.5, 0.5], dtype=np.float32), dim=3)  # type: ignore[arg-type]
    assert padded == [0.5, 0.5, 0.0]


def test_padding_preserves_cosine_similarity() -> None:
    a, b = [0.3, -0.4, 0.5], [0.1, 0.9, -0.2]

    def cos(x: list[float], y: list[float]) -> float:
        return float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))

    assert cos(pad_vector(a), pad_vector(b)) == pytest.approx(cos(a, b), abs=1e-12)


def test_longer_vector_is_refused_with_both_sizes_in_the_message() -> None:
    with pytest.raises(VectorDimensionError, match=r"3072 dimensions, more than the 2560"):
        pad_vector([0.1] * 3072)


def test_one_too_long_is_refused() -> None:
    with pytest.raises(VectorDimensionError):
        pad_vector([0.0] * 5, dim=4)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_component_is_refused(bad: float) -> None:
    with pytest.raises(VectorDimensionError, match="component 1"):
        pad_vector([0.1, bad, 0.2])


def test_empty_vector_is_refused() -> None:
    with pytest.raises(VectorDimensionError, match="empty"):
        pad_vector([])


def test_vector_dimension_error_is_a_value_error() -> None:
    # Callers that only know the builtin types still catch it.
    with pytest.raises(ValueError):
        pad_vector([0.0] * 3, dim=2)


def test_non_positive_dim_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="dim must be positive"):
        pad_vector([1.0], dim=0)
