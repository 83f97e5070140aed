"""Plain helpers for the stored vector column.

``memory_embeddings.embedding`` is ``vector(2560)`` whatever model produced the vector (spec
§2), so shorter vectors are right-padded with zeros. Zero padding leaves dot products and
norms unchanged, so cosine similarity between two padded vectors from the same model equals
the similarity of the originals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memstrata.config import STORED_VECTOR_DIM
from memstrata.errors import VectorDimensionError


def pad_vector(v: Sequence[float], dim: int = STORED_VECTOR_DIM) -> list[float]:
    """Return ``v`` as a list of ``dim`` floats, right-padded with ``0.0``.

    Raises ``VectorDimensionError`` for a vector longer than ``dim``, an empty vector, or a
    NaN / infinite component: PostgreSQL would reject the first and pgvector would store the
    others, poisoning every distance computed against them.
    """
    if dim < 1:
        raise ValueError(f"dim must be positive, got {dim}")
    size = len(v)
    if size == 0:
        raise VectorDimensionError("cannot store an empty vector; the embedding API returned none")
    if size > dim:
        raise VectorDimensionError(
            f"vector has {size} dimensions, more than the {dim} the embedding column stores; "
            f"use an embedding model with at most {dim} dimensions"
        )
    out = [float(x) for x in v]
    for i, x in enumerate(out):
        if not math.isfinite(x):
            raise VectorDimensionError(
                f"vector component {i} is {x}; only finite numbers can be stored"
            )
    out.extend([0.0] * (dim - size))
    return out
