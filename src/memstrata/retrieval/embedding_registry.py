"""Choosing and building the embedder: the model registry first, the settings as fallback.

Spec §4: vectors come from an external embedding API, the model registry first and the
settings as fallback; with no API configured, search degrades to BM25 only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

import httpx

from memstrata.config import EmbeddingModelSpec, Settings, is_blank
from memstrata.errors import EmbeddingError
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder

# The name this warning was logged under before the registry left embeddings.py; log
# filters and operators' configurations select it by that name.
logger = logging.getLogger("memstrata.retrieval.embeddings")

NO_EMBEDDING_API_MESSAGE = (
    "No embedding API configured — set MEMSTRATA_EMBEDDING_BASE_URL or register a model; "
    "searching with BM25 only."
)


class ModelRegistry(Protocol):
    """Where named embedding models are looked up; ``None`` name means "the default"."""

    def resolve(self, name: str | None) -> EmbeddingModelSpec | None: ...


class SettingsModelRegistry:
    """The registry from ``MEMSTRATA_EMBEDDING_MODELS``; the first model is the default."""

    def __init__(self, models: Sequence[EmbeddingModelSpec]) -> None:
        self.models = list(models)

    def resolve(self, name: str | None) -> EmbeddingModelSpec | None:
        if name is None:
            return self.models[0] if self.models else None
        return next((m for m in self.models if m.name == name), None)


def resolve_embedding_spec(
    settings: Settings, registry: ModelRegistry | None = None
) -> EmbeddingModelSpec | None:
    """Pick the embedding model: the registry first, the plain settings as fallback.

    Returns ``None`` (and logs why) when nothing is configured, which means BM25-only
    search. A half configuration (a model name with no registry entry and no base URL, or
    a base URL with no model name) raises ``EmbeddingError`` with the fix, since guessing
    would store vectors under a wrong model name.
    """
    if registry is None:
        registry = SettingsModelRegistry(settings.embedding_models)
    spec = registry.resolve(settings.embedding_model)
    if spec is not None:
        return spec
    if settings.embedding_base_url:
        if not settings.embedding_model or is_blank(settings.embedding_model):
            raise EmbeddingError(
                "MEMSTRATA_EMBEDDING_BASE_URL is set but MEMSTRATA_EMBEDDING_MODEL is not; "
                "set the model name the API expects"
            )
        return EmbeddingModelSpec(
            name=settings.embedding_model,
            base_url=settings.embedding_base_url,
            api_key=settings.embedding_api_key,
        )
    if settings.embedding_model:
        raise EmbeddingError(
            f"MEMSTRATA_EMBEDDING_MODEL={settings.embedding_model!r} is not a registered model "
            "and MEMSTRATA_EMBEDDING_BASE_URL is not set; register the model in "
            "MEMSTRATA_EMBEDDING_MODELS or set the base URL"
        )
    logger.warning(NO_EMBEDDING_API_MESSAGE)
    return None


def build_embedder(
    settings: Settings,
    registry: ModelRegistry | None = None,
    client: httpx.Client | None = None,
) -> OpenAICompatibleEmbedder | None:
    """The composition root's one call: an embedder for the configured model, or ``None``."""
    spec = resolve_embedding_spec(settings, registry)
    if spec is None:
        return None
    return embedder_for(spec, settings, client)


def embedder_for(
    spec: EmbeddingModelSpec, settings: Settings, client: httpx.Client | None = None
) -> OpenAICompatibleEmbedder:
    """The client for ``spec`` with every embedding setting applied."""
    return OpenAICompatibleEmbedder(
        spec,
        timeout_s=settings.embedding_timeout_s,
        max_retries=settings.embedding_max_retries,
        batch_size=settings.embedding_batch_size,
        batch_tokens=settings.embedding_batch_tokens,
        bulk_wait_s=settings.embedding_bulk_wait_s,
        client=client,
        query_timeout_s=settings.embedding_query_timeout_s,
        timeout_per_text_s=settings.embedding_timeout_per_text_s,
        breaker=CircuitBreaker(
            settings.embedding_breaker_threshold, settings.embedding_breaker_cooldown_s
        ),
        bulk_slots=settings.embedding_bulk_concurrency,
        express_tokens=settings.embedding_express_tokens,
        express_share=settings.embedding_express_share,
    )
