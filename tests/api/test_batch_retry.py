"""A batch sent again as it was (a client's retry after a timeout) changes nothing: rows
stored without a vector yet keep their ids and the background worker's claims on them."""

from __future__ import annotations

from sqlalchemy import text

from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.db.engine import transaction
from memstrata.retrieval import queue
from memstrata.retrieval.local_server import LocalEmbeddingServer
from tests.api.auth import AuthHeader
from tests.api.test_batch_turns import BATCH, _served, _turn, _with_embeddings


def _ids(db: Database) -> list[tuple[str, int, bool, bool]]:
    """(path, id, has a vector, a lease runs) of alice's rows."""
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT file_path, id, embedding IS NOT NULL,"
                " coalesce(embedding_claimed_until > now(), false)"
                " FROM memory_embeddings WHERE user_id = 'alice' ORDER BY file_path"
            )
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]


TURNS = [_turn("s1", i, f"turn {i}: we talked about kayaks and lemurs") for i in range(6)]


def test_a_background_batch_sent_again_is_unchanged_and_keeps_the_claims(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    with _served(_with_embeddings(settings, embedding_server), db) as (mem, client):
        assert mem.healer is not None and mem.embedder is not None
        mem.healer.stop()  # the rows stay without a vector while the batch is re-sent
        body = {"turns": TURNS, "embed": "background"}
        first = client.post(BATCH, headers=auth("alice"), json=body).json()
        assert (first["inserted"], first["unchanged"], first["deferred"]) == (6, 0, 6)
        with transaction(db.sessions) as session:  # a worker holds half of them
            claimed = queue.claim(session, mem.embedder.name, 3, 120.0)
        assert len(claimed) == 3
        before = _ids(db)
        assert [(has, held) for *_, has, held in before].count((False, True)) == 3

        again = client.post(BATCH, headers=auth("alice"), json=body)
        assert again.status_code == 200, again.text
        result = again.json()
        assert (result["inserted"], result["unchanged"]) == (0, 6)
        assert result["deferred"] == 0  # nothing new left to the worker: it has them
        assert _ids(db) == before  # same ids, no vector yet, the claims still there


def test_an_inline_batch_sent_again_embeds_the_rows_it_kept(
    settings: Settings, db: Database, auth: AuthHeader, embedding_server: LocalEmbeddingServer
) -> None:
    """Inline, a stored row of the same text without a vector is kept (unchanged) and
    given its vector, never replaced by a new row of the same text."""
    with _served(_with_embeddings(settings, embedding_server), db) as (mem, client):
        assert mem.healer is not None
        mem.healer.stop()
        body = {"turns": TURNS, "embed": "background"}
        assert client.post(BATCH, headers=auth("alice"), json=body).json()["inserted"] == 6
        again = client.post(BATCH, headers=auth("alice"), json={"turns": TURNS})
        assert again.status_code == 200, again.text
        result = again.json()
        assert (result["inserted"], result["unchanged"]) == (0, 6)
        assert (result["embedded"], result["embedding_failed"]) == (6, 0)
        rows = _ids(db)
        assert [(p, has) for p, _, has, _ in rows] == [(f"sessions/s1/{i}", True) for i in range(6)]
        third = client.post(BATCH, headers=auth("alice"), json={"turns": TURNS}).json()
        assert (third["inserted"], third["unchanged"], third["embedded"]) == (0, 6, 0)
        assert _ids(db) == rows
