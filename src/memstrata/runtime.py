"""The library's composition root: build every service once from one ``Settings``.

Entry points (CLI, the FastAPI app factory, tests, a host platform) call
``Memstrata.open(settings)`` and pass the result down; nothing is created at import time.
Parts can be swapped through the keyword arguments (a platform's own sandbox provider, an
embedding provider, a model registry).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from memstrata.agent.pool import AgentPool
from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.config import Settings
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

logger = logging.getLogger(__name__)


@dataclass
class Memstrata:
    settings: Settings
    db: Database
    templates: TemplateSet
    store: MemoryStore
    # [fields: each service adds its typed field here, with a default of None only if optional]
    sandboxes: SandboxProvider = field(init=False)
    pool: AgentPool[Any] = field(init=False)
    sync: SyncService = field(init=False)
    skills: SkillService = field(init=False)
    embedder: EmbeddingProvider | None = field(default=None, init=False)
    indexer: Indexer = field(init=False)
    search: SearchService = field(init=False)

    @classmethod
    def open(cls, settings: Settings | None = None, **parts: Any) -> Memstrata:
        settings = settings or Settings()
        db = parts.pop("database", None) or Database.open(settings)
        templates = TemplateSet(settings.template_dir or default_template_dir())
        store = MemoryStore(db.sessions, templates, settings.max_content_bytes)
        mem = cls(settings, db, templates, store)
        # [retrieval wiring]
        mem.embedder = _embedder(settings, parts)
        mem.indexer = Indexer(
            db.sessions,
            mem.embedder,
            chunk_tokens=settings.chunk_tokens,
            context_tokens=settings.conversation_context_tokens,
        )
        mem.search = SearchService(
            IndexCache(db.sessions, settings.search_cache_users, settings.search_cache_bytes),
            mem.embedder,
            rrf_k=settings.rrf_k,
            candidate_multiplier=settings.candidate_multiplier,
            decay=DecayPolicy(True, settings.decay_half_life_days, settings.decay_floor),
            vector_backend=settings.vector_backend,
        )
        # [sandbox/sync/agent wiring]
        mem.sandboxes = parts.pop("sandboxes", None) or LocalSandboxProvider(
            settings.resolved_sandbox_root
        )
        # The listener thread starts on the pool's first get(): only processes that cache
        # agents need to hear invalidations.
        mem.pool = AgentPool(db.engine)
        mem.sync = SyncService(
            store,
            mem.sandboxes,
            indexer=mem.indexer,
            pool=mem.pool,
            templates=templates,
        )
        # [skills wiring]
        mem.skills = SkillService(
            parts.pop("skill_loader", None) or SkillLoader(settings.skill_dirs), db.sessions
        )
        if parts:
            mem.close()
            raise TypeError(f"Memstrata.open() got unexpected parts: {', '.join(sorted(parts))}")
        return mem

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
        # [close hooks]
        if hasattr(self, "pool"):  # unset when built without open()
            self.pool.close()
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            self.embedder.close()
        self.db.close()


def _embedder(settings: Settings, parts: dict[str, Any]) -> EmbeddingProvider | None:
    """``embedder=`` wins, then ``embedding_spec=`` (e.g. a local server's), then settings
    (``registry=`` consulted first). None means BM25-only search."""
    if "embedder" in parts:
        provider: EmbeddingProvider | None = parts.pop("embedder")
        return provider
    spec = parts.pop("embedding_spec", None)
    if spec is not None:
        return OpenAICompatibleEmbedder(
            spec,
            timeout_s=settings.embedding_timeout_s,
            max_retries=settings.embedding_max_retries,
            batch_size=settings.embedding_batch_size,
        )
    registry: ModelRegistry | None = parts.pop("registry", None)
    return build_embedder(settings, registry)
