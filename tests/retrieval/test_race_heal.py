"""What a batch of rounds that lost the race for its neighbours reports, and embeds, when the
embedding API fails some of its texts.

Each staging of the batch embeds outside the user's lock; another writer rewrites a
neighbour before each passage batch (the hook of ``test_neighbour_races``), here on the
fake API of ``fault_server.py``, which refuses the texts holding "BAD" or answers 500 on
demand. The batch's report counts every text whose embedding failed during the call, once,
unless a later staging (or the embedding after the last staging's commit) embedded it: a
failure used to be dropped with the staging that saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest
from sqlalchemy.orm import Session

from memstrata.db.database import Database
from memstrata.retrieval.embeddings import Embedded, EmbeddingKind, OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import MAX_NEIGHBOUR_ATTEMPTS, Indexer
from memstrata.retrieval.rounds import Doc, Round, session_path
from memstrata.retrieval.staging import StagedIndex

from .fault_embedder import fault_embedder
from .fault_server import FaultServer
from .test_neighbour_races import (
    USER,
    WHEN,
    RacingEmbedder,
    assert_texts_as_if_reindexed,
    rows_by_path,
)

# One passage batch per staging, and one after the last staging's commit.
LOST_EVERY_RACE_CALLS = MAX_NEIGHBOUR_ATTEMPTS + 1


class RacingEachEmbedder(RacingEmbedder):
    """``RacingEmbedder`` with ``embed_each``, which the indexer prefers: the fake API's
    refusal of one text then fails that text alone."""

    inner: OpenAICompatibleEmbedder

    def embed_each(
        self,
        texts: Sequence[str],
        kind: EmbeddingKind = "passage",
        *,
        deadline: float | None = None,
    ) -> list[Embedded]:
        if kind == "passage":
            self.calls += 1
            self.race(self.calls)
        return self.inner.embed_each(texts, kind, deadline=deadline)


@pytest.fixture
def api(fault: FaultServer) -> Iterator[OpenAICompatibleEmbedder]:
    with fault_embedder(fault, max_retries=0) as embedder:
        yield embedder


def seed(db: Database, api: OpenAICompatibleEmbedder) -> Indexer:
    """Rounds 0 and 1 of session "s", and the indexer of the other writer."""
    other = Indexer(db.sessions, api)
    other.index_turn(USER, "s", 0, "round 0 about kayaks", "", WHEN)
    other.index_turn(USER, "s", 1, "round 1 about ponies", "", WHEN)
    return other


def row_of(db: Database, turn: int) -> tuple[str, bool]:
    (row,) = rows_by_path(db)[session_path("s", turn)]
    return row.chunk_text, row.vector is not None


@pytest.mark.timeout(120)
def test_a_text_refused_on_every_staging_is_counted_once_and_left_for_the_worker(
    db: Database, fault: FaultServer, api: OpenAICompatibleEmbedder
) -> None:
    fault.mode = "reject-bad"
    other = seed(db, api)

    def race(n: int) -> None:  # the next round, re-indexed by the batch, rewritten
        other.index_turn(USER, "s", 1, f"round 1 rewritten, version {n}", "", WHEN)

    racing = RacingEachEmbedder(api, race)
    indexer = Indexer(db.sessions, racing)

    (report,) = indexer.index_rounds(USER, [Round("s", 0, "round 0 is BAD", "", WHEN)])

    # Refused by each staging and after the commit: one text, one failure, and the row is
    # left for the background worker, not counted as deferred on top.
    assert (report.embedding_failed, report.deferred, report.embedded) == (1, 0, 0)
    assert report.warnings
    assert racing.calls == LOST_EVERY_RACE_CALLS
    assert row_of(db, 0) == ("User: round 0 is BAD", False)
    assert_texts_as_if_reindexed(db, indexer)


@pytest.mark.timeout(120)
def test_a_text_embedded_after_the_commit_is_not_a_failure(
    db: Database, fault: FaultServer, api: OpenAICompatibleEmbedder
) -> None:
    other = seed(db, api)

    def race(n: int) -> None:
        fault.mode = "ok"  # the other writer's own texts get vectors
        other.index_turn(USER, "s", 1, f"round 1 rewritten, version {n}", "", WHEN)
        fault.mode = "500" if n <= MAX_NEIGHBOUR_ATTEMPTS else "ok"

    racing = RacingEachEmbedder(api, race)
    indexer = Indexer(db.sessions, racing)

    (report,) = indexer.index_rounds(USER, [Round("s", 0, "round 0 about canoes", "", WHEN)])

    # Failed on all three stagings, embedded after the commit, with no worker running.
    assert row_of(db, 0) == ("User: round 0 about canoes", True)
    assert indexer.count_missing(USER) == 0
    assert (report.embedding_failed, report.deferred, report.embedded) == (0, 0, 1)
    assert racing.calls == LOST_EVERY_RACE_CALLS
    assert_texts_as_if_reindexed(db, indexer)


@pytest.mark.timeout(120)
def test_a_failure_of_an_earlier_staging_is_counted(
    db: Database, fault: FaultServer, api: OpenAICompatibleEmbedder
) -> None:
    other = seed(db, api)

    def race(n: int) -> None:  # the previous round, this round's context, rewritten once
        if n == 1:
            other.index_turn(USER, "s", 0, "round 0 rewritten", "", WHEN)
        fault.mode = "500" if n == 1 else "ok"

    racing = RacingEachEmbedder(api, race)
    indexer = Indexer(db.sessions, racing)

    (report,) = indexer.index_rounds(USER, [Round("s", 1, "round 1 about horses", "", WHEN)])

    # The first staging's text (the old context) failed and lost its race; the second
    # staging's text, another one, was embedded and stored.
    assert racing.calls == 2
    assert (report.embedding_failed, report.deferred, report.embedded) == (1, 0, 1)
    assert report.warnings
    assert row_of(db, 1) == ("User: round 0 rewritten\nUser: round 1 about horses", True)
    assert_texts_as_if_reindexed(db, indexer)


class RacingIndexer(Indexer):
    """An indexer after whose every read of the neighbours outside the lock ``race`` runs:
    with ``embed=False`` there is no embedding call for the embedder's hook to race."""

    def __init__(self, db: Database, embedder: RacingEmbedder, race: Callable[[], None]) -> None:
        super().__init__(db.sessions, embedder)
        self.race = race

    def _stage(
        self,
        user_id: str,
        docs: Sequence[Doc],
        embed: bool = True,
        *,
        reuse: dict[str, list[float]] | None = None,
        session: Session | None = None,
        deadline: float | None = None,
    ) -> StagedIndex:
        if session is None:  # never under the lock: the other writer would wait forever
            self.race()
        return super()._stage(user_id, docs, embed, reuse=reuse, session=session, deadline=deadline)


@pytest.mark.timeout(120)
def test_a_background_batch_that_lost_every_race_calls_no_embedding_api(
    db: Database, fault: FaultServer, api: OpenAICompatibleEmbedder
) -> None:
    other = seed(db, api)
    versions = iter(range(1, 100))

    def race() -> None:
        other.index_turn(USER, "s", 0, f"round 0 rewritten, version {next(versions)}", "", WHEN)

    counting = RacingEachEmbedder(api, lambda n: None)
    indexer = RacingIndexer(db, counting, race)

    (report,) = indexer.index_rounds(
        USER, [Round("s", 1, "round 1 about horses", "", WHEN)], embed=False
    )

    assert counting.calls == 0  # embed=False: the background worker's, even after the race
    assert (report.deferred, report.embedded, report.embedding_failed) == (1, 0, 0)
    text, has_vector = row_of(db, 1)
    assert text == f"User: round 0 rewritten, version {MAX_NEIGHBOUR_ATTEMPTS}\n" + (
        "User: round 1 about horses"
    )
    assert not has_vector
    assert_texts_as_if_reindexed(db, indexer)
