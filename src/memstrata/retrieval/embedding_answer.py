"""Reading an embedding API's answer: pure checks on the JSON and the error body.

Responses are validated strictly, because a malformed vector stored in the database
silently corrupts every later search. The checks know nothing of the client: each takes
``error``, which builds the exception to raise from what went wrong, so every message
keeps the one prefix (URL and model) that ``OpenAICompatibleEmbedder`` gives it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import httpx

from memstrata.config import STORED_VECTOR_DIM
from memstrata.errors import EmbeddingError

# Turns "what the API did wrong" into the exception to raise (the client's ``_error``).
ErrorFactory = Callable[[str], EmbeddingError]


def parse_vectors(
    payload: object,
    expected: int,
    dimensions: int | None,
    configured: bool,
    error: ErrorFactory,
) -> list[list[float]]:
    """The ``expected`` vectors of an OpenAI-style ``{"data": [{"embedding": ...}]}`` body,
    in input order.

    ``dimensions`` is the length every vector must have (``None``: not known yet);
    ``configured`` says whether it came from the model spec rather than an earlier answer.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("data"), list):
        raise error("returned JSON without a 'data' list")
    items: list[object] = payload["data"]
    if len(items) != expected:
        raise error(f"returned {len(items)} embedding(s) for {expected} input(s)")
    if not all(isinstance(item, dict) and "embedding" in item for item in items):
        raise error("returned a 'data' item without an 'embedding'")
    entries: list[dict[str, Any]] = [item for item in items if isinstance(item, dict)]
    ordered = _order_by_index(entries, error)
    vectors = [_vector(entry["embedding"], i, error) for i, entry in enumerate(ordered)]
    _check_dimensions(vectors, dimensions, configured, error)
    return vectors


def _order_by_index(entries: list[dict[str, Any]], error: ErrorFactory) -> list[dict[str, Any]]:
    # OpenAI documents `index` as the input position; servers may answer out of order.
    indexes = [entry.get("index") for entry in entries]
    if all(index is None for index in indexes):
        return entries
    if sorted(i for i in indexes if type(i) is int) != list(range(len(entries))):
        raise error(f"returned indexes {indexes}, not a permutation of the inputs")
    return sorted(entries, key=lambda entry: int(entry["index"]))


def _vector(raw: object, position: int, error: ErrorFactory) -> list[float]:
    if not isinstance(raw, list):
        raise error(
            f"returned a {type(raw).__name__} embedding for input {position}, not a list "
            "of numbers (base64 encoding is not supported)"
        )
    # bool is an int subclass and json never yields other numeric types.
    if not all(type(x) is float or type(x) is int for x in raw):
        raise error(f"returned a non-numeric value in the embedding of input {position}")
    values = [float(x) for x in raw]
    if not all(math.isfinite(x) for x in values):
        raise error(f"returned NaN or infinity in the embedding of input {position}")
    return values


def _check_dimensions(
    vectors: list[list[float]], dimensions: int | None, configured: bool, error: ErrorFactory
) -> None:
    sizes = sorted({len(v) for v in vectors})
    if len(sizes) != 1:
        raise error(f"returned embeddings of different lengths {sizes} in one response")
    size = sizes[0]
    if size == 0:
        raise error("returned empty embeddings")
    if dimensions is not None and size != dimensions:
        expected = "configured" if configured else "earlier"
        raise error(
            f"returned {size}-dimensional embeddings, but the {expected} dimension is {dimensions}"
        )
    if size > STORED_VECTOR_DIM:
        raise error(
            f"returned {size}-dimensional embeddings; at most {STORED_VECTOR_DIM} can be "
            "stored, choose a smaller model"
        )


def error_detail(response: httpx.Response) -> str:
    """The server's own explanation, OpenAI-style if possible, cut short for a log line."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        message = payload["error"].get("message")
        if isinstance(message, str) and message:
            return message[:300]
    return response.text[:300] or response.reason_phrase
