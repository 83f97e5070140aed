"""Reading an embedding API's answer: pure checks on the JSON and the error body.

Responses are validated strictly, because a malformed vector stored in the database
silently corrupts every later search. The checks know nothing of the client: each takes
``error``, which builds the exception to raise from what went wrong, so every message
keeps the one prefix (URL and model) that ``OpenAICompatibleEmbedder`` gives it.

Which vector length to accept is a rule of its own (``judge_length``): one bad first
answer used to fix the length for the life of the process, so a model whose first answers
were cut short stored short vectors and then refused every correct answer until a restart.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
import numpy as np

from memstrata.config import STORED_VECTOR_DIM
from memstrata.errors import EmbeddingError
from memstrata.retrieval.vector_index import normalise

# Turns "what the API did wrong" into the exception to raise (the client's ``_error``).
ErrorFactory = Callable[[str], EmbeddingError]

# The fewest numbers a vector may have when the model's ``dimensions`` is not configured.
# Text-embedding models answer with 64 numbers or more (multilingual-e5-small 384, OpenAI
# 1536; a Matryoshka model cut short keeps 64 or more in practice), so fewer than half that
# is a broken answer (a proxy that cuts vectors, a single score): refused, never learned. A
# model that really is this small is given its ``dimensions``, which is not held to this.
MIN_LEARNED_DIMENSIONS = 32

# The largest magnitude a stored vector can hold: pgvector stores float4s. A larger finite
# number is the API's fault, not the writer's; stored, PostgreSQL would refuse the whole
# write as a value out of range in the request.
FLOAT4_MAX = float(np.finfo(np.float32).max)


def parse_vectors(payload: object, expected: int, error: ErrorFactory) -> list[list[float]]:
    """The ``expected`` vectors of an OpenAI-style ``{"data": [{"embedding": ...}]}`` body,
    in input order, all of one length that can be stored, each with a direction.

    Whether that length is the model's is ``judge_length``'s question, not this one's.
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
    _check_shape(vectors, error)
    _check_directions(vectors, error)
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
    if not all(-FLOAT4_MAX <= x <= FLOAT4_MAX for x in values):
        raise error(
            f"returned a number beyond float4's range (±{FLOAT4_MAX:.7g}), which a stored "
            f"vector holds, in the embedding of input {position}"
        )
    return values


def _check_shape(vectors: list[list[float]], error: ErrorFactory) -> None:
    sizes = sorted({len(v) for v in vectors})
    if len(sizes) != 1:
        raise error(f"returned embeddings of different lengths {sizes} in one response")
    size = sizes[0]
    if size == 0:
        raise error("returned empty embeddings")
    if size > STORED_VECTOR_DIM:
        raise error(
            f"returned {size}-dimensional embeddings; at most {STORED_VECTOR_DIM} can be "
            "stored, choose a smaller model"
        )


def _check_directions(vectors: list[list[float]], error: ErrorFactory) -> None:
    """Refuse a vector the search index could not rank: all zeros (or too small or too
    large to be made unit length in float32, the index's precision). Such a vector has no
    cosine with anything, so stored it would never rank and, having a vector, never be
    embedded again. Like NaN it is one text's answer (a model may give zeros for a text of
    unknown tokens only), so ``embed_each`` isolates the text and the worker retries it."""
    with np.errstate(over="ignore", under="ignore"):  # what they cause is the answer here
        good, _ = normalise(np.asarray(vectors, dtype=np.float64))
    if not good.all():
        position = int(np.flatnonzero(~good)[0])
        raise error(
            f"returned a vector without a direction (all zeros, or too small or too large "
            f"to normalise) for input {position}"
        )


@dataclass(frozen=True)
class Lengths:
    """What a client knows of its model's vector length.

    ``known``: the length answers must have (``None`` before the first answer, unless
    configured). ``configured``: ``known`` comes from the model's ``dimensions`` and never
    changes. ``candidate``: the other length the last answer had, refused once.
    ``replaced``: lengths ``known`` had before, whose stored vectors are now wrong.
    """

    known: int | None
    configured: bool = False
    candidate: int | None = None
    replaced: frozenset[int] = frozenset()


@dataclass(frozen=True)
class LengthVerdict:
    lengths: Lengths  # what the client knows after this answer
    refusal: str | None = None  # why the answer is refused; None: its vectors are used
    changed_from: int | None = None  # the length this answer replaced (log it)


def judge_length(size: int, lengths: Lengths) -> LengthVerdict:
    """Decide on an answer of ``size``-number vectors.

    A configured length is the authority: any other is refused. Otherwise a length below
    ``MIN_LEARNED_DIMENSIONS`` is refused; the first answer's length is learned; and a
    different length is refused once, then learned when the next answer has it too — a
    length the API keeps giving replaces an earlier one, which may have come from a broken
    answer (the stored vectors of the replaced length are re-embedded by the background
    worker), while one stray answer cannot replace a good length.
    """
    known = lengths.known
    if lengths.configured:
        if size == known:
            return LengthVerdict(lengths)
        return LengthVerdict(
            lengths,
            f"returned {size}-dimensional embeddings, but the configured dimension is {known}",
        )
    if size < MIN_LEARNED_DIMENSIONS:
        return LengthVerdict(
            replace(lengths, candidate=None),
            f"returned {size}-dimensional embeddings, fewer than the {MIN_LEARNED_DIMENSIONS} "
            "any text-embedding model gives: a broken answer (a model that is this small "
            "needs its `dimensions` configured)",
        )
    if known is None or size == known:
        return LengthVerdict(replace(lengths, known=size, candidate=None))
    if size == lengths.candidate:
        learned = Lengths(size, replaced=(lengths.replaced | {known}) - {size})
        return LengthVerdict(learned, changed_from=known)
    return LengthVerdict(
        replace(lengths, candidate=size),
        f"returned {size}-dimensional embeddings, but the earlier dimension is {known} "
        f"({size} replaces it if the next answer has it too)",
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
