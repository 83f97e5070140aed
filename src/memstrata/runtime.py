"""The library's composition root: build every service once from one ``Settings``.

Entry points (CLI, the FastAPI app factory, tests, a host platform) call
``Memstrata.open(settings)`` and pass the result down; nothing is created at import time.
Parts can be swapped through the keyword arguments (a platform's own sandbox provider, an
embedding provider, a model registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from memstrata.agent.pool import AgentPool
from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embeddings import (
    EmbeddingProvider,
    ModelRegistry,
    OpenAICompatibleEmbedder,
    build_embedder,
)
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.search import DecayPolicy, SearchService
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from memstrata.skills.loader import SkillLoader
from memstrata.skills.service import SkillService


class _FromSettings(Enum):
    """``embedder=`` not given: build it from the settings (``None`` means BM25 only)."""

    TOKEN = "from settings"


FROM_SETTINGS = _FromSettings.TOKEN


@dataclass(frozen=True)
class Memstrata:
    """Every service of one process, built once (use :meth:`open`)."""

    settings: Settings
    db: Database
    templates: TemplateSet
    embedder: EmbeddingProvider | None
    indexer: Indexer
    store: MemoryStore
    search: SearchService
    sandboxes: SandboxProvider
    pool: AgentPool[Any]
    sync: SyncService
    skills: SkillService

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        database: Database | None = None,
        sandboxes: SandboxProvider | None = None,
        embedder: EmbeddingProvider | Literal[_FromSettings.TOKEN] | None = FROM_SETTINGS,
        embedding_spec: EmbeddingModelSpec | None = None,
        registry: ModelRegistry | None = None,
        skill_loader: SkillLoader | None = None,
    ) -> Memstrata:
        """Build the runtime. ``embedder`` wins (``None``: BM25-only search), then
        ``embedding_spec`` (e.g. a local server's), then the settings (``registry``
        consulted first)."""
        settings = settings or Settings()
        db = database or Database.open(settings)
        templates = TemplateSet(settings.template_dir or default_template_dir())
        provider = _embedder(settings, embedder, embedding_spec, registry)
        indexer = Indexer(
            db.sessions,
            provider,
            chunk_tokens=settings.chunk_tokens,
            context_tokens=settings.conversation_context_tokens,
        )
        store = MemoryStore(db.sessions, templates, settings.max_content_bytes, indexer=indexer)
        search = SearchService(
            IndexCache(db.sessions, settings.search_cache_users, settings.search_cache_bytes),
            provider,
            rrf_k=settings.rrf_k,
            candidate_multiplier=settings.candidate_multiplier,
            decay=DecayPolicy(True, settings.decay_half_life_days, settings.decay_floor),
            vector_backend=settings.vector_backend,
        )
        sandbox_provider = sandboxes or LocalSandboxProvider(settings.resolved_sandbox_root)
        # The listener thread starts on the pool's first get(): only processes that cache
        # agents need to hear invalidations.
        pool: AgentPool[Any] = AgentPool(db.engine)
        sync = SyncService(store, sandbox_provider, pool=pool, templates=templates)
        skills = SkillService(skill_loader or SkillLoader(settings.skill_dirs), db.sessions)
        return cls(
            settings=settings,
            db=db,
            templates=templates,
            embedder=provider,
            indexer=indexer,
            store=store,
            search=search,
            sandboxes=sandbox_provider,
            pool=pool,
            sync=sync,
            skills=skills,
        )

    async def open_agent_session(
        self, user_id: str, *, token_limit: int, session_id: str | None = None
    ) -> AgentSession:
        """Start an agent session: sandbox-first sync, the memory part of the system
        prompt (``prompt_budget_ratio`` of ``token_limit``), round tracking, and the memory
        tools with ``memory_search`` bound to this runtime's search."""
        return await open_agent_session(
            self.sync,
            user_id,
            token_limit=token_limit,
            ratio=self.settings.prompt_budget_ratio,
            session_id=session_id,
            searcher=self.search,
        )

    def close(self) -> None:
        self.pool.close()
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            self.embedder.close()
        self.db.close()


def _embedder(
    settings: Settings,
    embedder: EmbeddingProvider | Literal[_FromSettings.TOKEN] | None,
    spec: EmbeddingModelSpec | None,
    registry: ModelRegistry | None,
) -> EmbeddingProvider | None:
    if embedder is not FROM_SETTINGS:
        return embedder
    if spec is not None:
        return OpenAICompatibleEmbedder(
            spec,
            timeout_s=settings.embedding_timeout_s,
            max_retries=settings.embedding_max_retries,
            batch_size=settings.embedding_batch_size,
        )
    return build_embedder(settings, registry)
