"""``EmbeddingRepository.nearest`` (the pgvector backend) ranks vectors of the query's
length only, as the in-memory index does.

Every vector is stored padded to 2560 numbers, so a row of another length (stored before
the API's length changed, waiting to be re-embedded) has a cosine with the padded query
too: a meaningless one, which ranked it — here above the row that matches.
"""

from __future__ import annotations

import numpy as np

from memstrata.db.database import Database
from memstrata.retrieval.records import NewChunk
from memstrata.retrieval.repository import EmbeddingRepository

MODEL = "test-model"


def unit(values: np.ndarray) -> list[float]:
    return [float(x) for x in values / np.linalg.norm(values)]


def test_rows_of_another_length_are_not_ranked(db: Database) -> None:
    rng = np.random.default_rng(7)
    query = rng.normal(size=48)
    near = query + rng.normal(scale=0.5, size=48)  # same length, cosine ~0.9
    # 64 numbers whose first 48 are the query's: padded, its cosine with the query is ~1.
    other_length = np.concatenate([query, rng.normal(scale=0.05, size=16)])
    with db.sessions() as session:
        repo = EmbeddingRepository(session, "alice")
        repo.insert(
            [
                NewChunk("MEMORY.md", i, text, f"h{i}", embedding=unit(v), embedding_model=MODEL)
                for i, (text, v) in enumerate([("same length", near), ("old length", other_length)])
            ]
        )
        session.commit()
        ids = {c.chunk_text: c.id for c in repo.load()}
        found = repo.nearest(unit(query), MODEL, 5)
        assert [key for key, _ in found] == [ids["same length"]]
        assert found[0][1] > 0.8
        # The ids filter (sources, as_of) still narrows what is left.
        assert repo.nearest(unit(query), MODEL, 5, ids=[ids["old length"]]) == []
        assert [k for k, _ in repo.nearest(unit(query), MODEL, 5, ids=list(ids.values()))] == [
            ids["same length"]
        ]
