"""A re-embedding worker in a process of its own, for the tests that kill it.

``python -m tests.retrieval.claiming_worker DATABASE_URL EMBEDDING_BASE_URL`` starts a
``VectorHealer`` (as ``memstrata serve`` does) and runs until it is killed. The tests point
it at a fake API that answers slowly, so the rows it claims stay claimed while it lives.
"""

from __future__ import annotations

import sys
import time

from memstrata.config import EmbeddingModelSpec
from memstrata.db.engine import make_engine, make_session_factory
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer


def main() -> None:
    database_url, base_url = sys.argv[1:3]
    engine = make_engine(database_url)
    spec = EmbeddingModelSpec(name="fake-model", base_url=base_url)
    with OpenAICompatibleEmbedder(spec, max_retries=0, timeout_s=120.0) as embedder:
        healer = VectorHealer(make_session_factory(engine), embedder, batch=8, interval_s=0.1)
        healer.start()
        print("started", flush=True)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main()
