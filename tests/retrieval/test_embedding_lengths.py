"""The embedding client's vector lengths on the fake API of ``fault_server.py``: the
configured and the learned length, zero vectors, vectors the index cannot normalise."""

from __future__ import annotations

import logging

import httpx
import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.errors import EmbeddingError, EmbeddingUnavailableError
from memstrata.logs import event_fields
from memstrata.retrieval.embedding_answer import (
    MIN_LEARNED_DIMENSIONS,
    Lengths,
    judge_length,
    parse_vectors,
)
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder

from .fault_embedder import fault_embedder
from .fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)


def test_dimension_must_match_the_configured_dimension(fault: FaultServer) -> None:
    with (
        fault_embedder(fault, dimensions=16) as embedder,
        pytest.raises(EmbeddingError, match="32-dimensional embeddings, but the configured"),
    ):
        embedder.embed(["a"], "query")


def test_a_new_length_replaces_the_learned_one_when_two_answers_in_a_row_have_it(
    fault: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The length was learned from the first answer for good, so an API whose first
    answers were cut short was refused ever after, until a restart."""
    with fault_embedder(fault) as embedder:
        embedder.embed(["a"], "query")
        assert embedder.dimensions == 32
        fault.dim = 40
        with pytest.raises(EmbeddingOutageError, match=r"earlier dimension is 32 \(40 replaces"):
            embedder.embed(["a"], "query")
        with caplog.at_level(logging.WARNING):
            assert [len(v) for v in embedder.embed(["a", "b"], "passage")] == [40, 40]
        assert embedder.dimensions == 40
        assert embedder.lengths.replaced == frozenset({32})
    (changed,) = [
        f
        for f in map(event_fields, caplog.records)
        if f.get("event") == "embedding.dimension_changed"
    ]
    assert (changed["model"], changed["previous"], changed["dimensions"]) == ("fake-model", 32, 40)


def test_one_stray_length_does_not_replace_the_learned_one(fault: FaultServer) -> None:
    with fault_embedder(fault) as embedder:
        embedder.embed(["a"], "query")
        for _ in range(2):  # 40, 32, 40, 32: never two 40s in a row
            fault.dim = 40
            with pytest.raises(EmbeddingOutageError, match="earlier dimension is 32"):
                embedder.embed(["a"], "query")
            fault.dim = 32
            embedder.embed(["a"], "query")
        assert embedder.dimensions == 32


def test_a_configured_dimension_is_never_replaced(fault: FaultServer) -> None:
    fault.dim = 40
    with fault_embedder(fault, dimensions=32) as embedder:
        for _ in range(3):
            with pytest.raises(EmbeddingOutageError, match="the configured dimension is 32"):
                embedder.embed(["a"], "query")
        assert embedder.dimensions == 32


def test_vectors_shorter_than_any_model_gives_are_refused_unless_configured(
    fault: FaultServer,
) -> None:
    fault.dim = 8
    with fault_embedder(fault) as embedder:
        for _ in range(3):  # consistent, and still refused
            with pytest.raises(EmbeddingOutageError, match=r"8-dimensional .* fewer than the 32"):
                embedder.embed(["a"], "query")
        assert embedder.dimensions is None
        fault.dim = 384  # the API is fixed: its first good answer is learned
        assert len(embedder.embed(["a"], "query")[0]) == 384
    with fault_embedder(fault, dimensions=8) as small:  # a model that really is this small
        fault.dim = 8
        assert len(small.embed(["a"], "query")[0]) == 8


def test_a_wrong_length_fails_the_call_at_once_without_splitting(fault: FaultServer) -> None:
    """A length is the API's, not a text's: halves would be refused alike."""
    fault.dim = 8
    with fault_embedder(fault, max_retries=0) as embedder:
        results = embedder.embed_each(["a", "b", "c", "d"], "passage")
    assert all(isinstance(r, EmbeddingOutageError) for r in results)
    assert len(fault.requests) == 1


def test_a_zero_vector_costs_only_its_text(fault: FaultServer) -> None:
    """A model may answer zeros for one text (only unknown tokens): that text alone is
    left without a vector, retried later like a NaN; the others are embedded."""
    fault.mode = "zero-bad"
    with fault_embedder(fault, max_retries=0) as embedder:
        results = embedder.embed_each(["fine", "a BAD text", "also fine"], "passage")
    fine, bad, also = results
    assert isinstance(fine, list) and isinstance(also, list)
    assert isinstance(bad, EmbeddingUnavailableError)
    assert not isinstance(bad, EmbeddingOutageError)
    assert "without a direction" in str(bad)


def _answer(*vectors: list[float]) -> dict[str, object]:
    return {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}


def _error(what: str) -> EmbeddingError:
    return EmbeddingUnavailableError(what)


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        (0.0, r"without a direction .* for input 1"),
        (1e-30, r"without a direction .* for input 1"),
        # Refused before its direction is looked at: a stored vector holds float4s.
        (1e39, r"beyond float4's range .* of input 1"),
    ],
    ids=["zeros", "squares-underflow-float32", "beyond-float32"],
)
def test_a_vector_the_index_cannot_normalise_is_refused(value: float, refusal: str) -> None:
    with pytest.raises(EmbeddingError, match=refusal):
        parse_vectors(_answer([0.5] * 32, [value] * 32), 2, _error)


def test_one_number_beyond_float4_is_refused_though_the_vector_has_a_direction() -> None:
    """In float64 such a vector normalises, so the direction check let it through to the
    insert, where PostgreSQL refused the whole write as a value out of range."""
    with pytest.raises(EmbeddingError, match=r"beyond float4's range .* of input 0"):
        parse_vectors(_answer([0.5] * 31 + [1e39]), 1, _error)


def test_a_vector_with_one_nonzero_number_is_kept() -> None:
    assert parse_vectors(_answer([0.0] * 31 + [1e-3]), 1, _error) == [[0.0] * 31 + [1e-3]]


def test_judge_length_rules() -> None:
    fresh = Lengths(None)
    assert judge_length(MIN_LEARNED_DIMENSIONS - 1, fresh).refusal is not None
    learned = judge_length(384, fresh)
    assert (learned.refusal, learned.lengths) == (None, Lengths(384))
    once = judge_length(768, learned.lengths)
    assert once.refusal is not None and once.lengths == Lengths(384, candidate=768)
    twice = judge_length(768, once.lengths)
    assert twice.refusal is None and twice.changed_from == 384
    assert twice.lengths == Lengths(768, replaced=frozenset({384}))
    # Back again: the length returned to is no longer a replaced one.
    back = judge_length(384, judge_length(384, twice.lengths).lengths)
    assert back.lengths == Lengths(384, replaced=frozenset({768}))
    # A broken answer in between: the two answers are not in a row.
    broken = judge_length(8, once.lengths)
    assert broken.lengths.candidate is None
    assert judge_length(768, broken.lengths).refusal is not None
    configured = Lengths(8, configured=True)
    assert judge_length(8, configured).refusal is None
    assert judge_length(384, judge_length(384, configured).lengths).refusal is not None


def test_vectors_longer_than_the_stored_dimension_are_refused(fault: FaultServer) -> None:
    fault.dim = 3072
    with (
        fault_embedder(fault) as embedder,
        pytest.raises(EmbeddingError, match=r"3072-dimensional .* at most 2560"),
    ):
        embedder.embed(["a"], "query")


def test_injected_client_is_left_open_for_its_owner(fault: FaultServer) -> None:
    client = httpx.Client()
    spec = EmbeddingModelSpec(name="m", base_url=fault.base_url)
    with OpenAICompatibleEmbedder(spec, client=client) as embedder:
        embedder.embed(["a"], "query")
    assert not client.is_closed
    client.close()
