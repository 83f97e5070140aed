"""Decoding what PostgreSQL sends for ``memory_embeddings`` columns: pure functions."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt


def native_vector(value: Any, dim: int | None) -> npt.NDArray[np.float32] | None:
    """A stored (zero-padded) vector cut back to its model's length ``dim``."""
    if value is None:
        return None
    arr = np.asarray(value, dtype=np.float32)
    return arr[:dim] if dim else arr


def json_column(values: list[str | None]) -> list[Any]:
    """Each value of a ``jsonb::text`` column parsed (None for SQL NULL), in one parse:
    PostgreSQL's text form of a jsonb value is a complete JSON value, so joined by commas
    inside brackets they are one JSON array."""
    parsed: list[Any] = json.loads("[" + ",".join(v or "null" for v in values) + "]")
    return parsed


def parse_vector_binary(value: bytes) -> npt.NDArray[np.float32]:
    """pgvector's binary form: int16 dim, int16 reserved, then big-endian float4s.

    A read-only big-endian view, no copy: the in-memory index converts many at once."""
    return np.frombuffer(value, dtype=">f4", offset=4)
