"""An embedding API whose vector length changed while memstrata was stopped (the
reviewer's H1: a model swapped, or a proxy cutting vectors, behind the same name).

A new process learns the new length from its first answers and used to know nothing of
the old one: every stored vector of the old length was silently unusable (searches said
"hybrid" with no vector rank, ``pending`` was 0) and never re-embedded. Real PostgreSQL;
the API's lengths come from the fake in ``fault_server.py``, the rows "of the previous
process" are inserted as it stored them.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from sqlalchemy import text

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.errors import EmbeddingError
from memstrata.logs import event_fields
from memstrata.retrieval import length_watch
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.length_watch import majority_length
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.search_warnings import OTHER_LENGTH

from .fault_server import FaultServer
from .healing_support import fault_api_as_embedder  # noqa: F401  (a fixture)
from .stored import insert_rows

pytestmark = pytest.mark.timeout(60)

STORED = 40  # the length the previous process stored
NEW = 32  # the API's length now (the fake's default)
SETTLE_S = 0.3


@pytest.fixture
def fault_dim() -> int:
    return NEW


@pytest.fixture(autouse=True)
def _short_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(length_watch, "LENGTH_SETTLE_S", SETTLE_S)


def stored_before_the_restart(db: Database, user: str, n: int = 3, dim: int = STORED) -> None:
    chunks = [
        NewChunk(f"sessions/s1/{i}", 0, f"{user} keeps bees, note {i}", f"h{i}",
                 embedding=[0.5 + i] + [0.5] * (dim - 1), embedding_model="fake-model")
        for i in range(n)
    ]  # fmt: skip
    insert_rows(db, user, chunks)


def lengths(db: Database) -> list[int | None]:
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT embedding_dim FROM memory_embeddings ORDER BY id"))
        return [dim for (dim,) in rows]


def changes(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [
        f
        for f in map(event_fields, caplog.records)
        if f.get("event") == "embedding.dimension_changed"
    ]


def test_a_length_changed_across_a_restart_is_told_counted_searched_as_bm25_then_re_embedded(
    db: Database,
    fault: FaultServer,
    embedder: OpenAICompatibleEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    stored_before_the_restart(db, "alice")
    stored_before_the_restart(db, "bob", n=2)
    search = SearchService(IndexCache(db.sessions), embedder, query_cache_entries=0)
    healer = VectorHealer(db.sessions, embedder)
    with caplog.at_level("WARNING"):
        found = search.search("alice", "bees")  # the first answer: 32 is learned
        assert healer.run_once().claimed == 0  # not at once: it may be a passing fault
        assert healer.run_once().claimed == 0
    # (b) the query's vector cannot be compared with any stored one: said, and BM25.
    assert (found.mode, found.warnings) == ("bm25", [OTHER_LENGTH])
    assert found.hits and all(h.explain["vector_rank"] is None for h in found.hits)
    # (a) told once, with what holds for every user (no user ids).
    (changed,) = changes(caplog)
    assert {k: changed[k] for k in ("model", "previous", "dimensions", "stored_rows")} == {
        "model": "fake-model",
        "previous": STORED,
        "dimensions": NEW,
        "stored_rows": 5,
    }
    assert changed["configured"] is False and changed["re_embed_after_s"] == SETTLE_S
    assert "user_id" not in changed and "users" not in changed
    # (c) the rows that cannot be searched by meaning are the backlog /readyz shows.
    assert healer.backlog().pending == 5
    time.sleep(SETTLE_S + 0.05)  # the API kept answering 32: the stored length is superseded
    with caplog.at_level("WARNING"):
        assert healer.run_once().embedded == 5
    assert lengths(db) == [NEW] * 5
    assert healer.backlog().pending == 0
    assert len(changes(caplog)) == 1
    again = search.search("alice", "bees")
    assert again.mode == "hybrid" and again.warnings == []
    assert any(h.explain["vector_rank"] for h in again.hits)


def test_an_api_that_goes_back_to_the_stored_length_re_embeds_nothing(
    db: Database, fault: FaultServer, embedder: OpenAICompatibleEmbedder
) -> None:
    """A restart during a passing fault (the intent of
    ``test_a_learned_length_leaves_rows_of_another_plausible_length_alone``): the new
    length is learned, and when the API answers the stored length again before the
    settle time, the stored vectors stay as they are."""
    stored_before_the_restart(db, "alice")
    embedder.embed(["learn"], "passage")  # 32, from the faulty API
    healer = VectorHealer(db.sessions, embedder)
    assert healer.run_once().claimed == 0
    assert healer.backlog().pending == 3
    fault.dim = STORED  # the fault ends
    for _ in range(2):
        with contextlib.suppress(EmbeddingError):  # the first 40: refused once
            embedder.embed(["again"], "passage")
    time.sleep(SETTLE_S + 0.05)
    for _ in range(2):
        assert healer.run_once().claimed == 0
    assert lengths(db) == [STORED] * 3
    assert healer.backlog().pending == 0


def test_a_configured_length_counts_rows_of_another_length_as_pending_before_any_claim(
    db: Database, fault: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The reviewer's ``"dimensions": 256`` run: the rows were re-embedded, but /readyz
    and ``memstrata_embeddings_pending`` said 0 while 1,112 of them waited."""
    stored_before_the_restart(db, "alice")
    spec = EmbeddingModelSpec(name="fake-model", base_url=fault.base_url, dimensions=NEW)
    with OpenAICompatibleEmbedder(spec, max_retries=0) as configured:
        healer = VectorHealer(db.sessions, configured, batch=2)
        with caplog.at_level("WARNING"):
            healer.follow_lengths()
        assert healer.backlog().pending == 3
        (changed,) = changes(caplog)
        assert changed["configured"] is True and changed["re_embed_after_s"] == 0
        assert healer.run_once().embedded == 2
        assert healer.backlog().pending == 1
        assert healer.run_once().embedded == 1
        assert healer.run_once().claimed == 0
        assert healer.backlog().pending == 0
    assert lengths(db) == [NEW] * 3


def test_the_length_most_stored_vectors_have() -> None:
    assert majority_length({}) is None
    assert majority_length({8: 100}) is None  # no model gives 8 numbers
    assert majority_length({384: 10, 256: 3, 8: 50}) == 384
    assert majority_length({384: 3, 256: 3}) == 384  # a tie: the longer
