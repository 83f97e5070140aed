"""How a runtime is built: every service from one ``Settings``, wired once.

``Memstrata.open`` (:mod:`memstrata.runtime`, the facade a host calls) picks the embedding
provider (:func:`choose_embedder`) and has :func:`assemble` build the rest: the closable
session factory every service shares (so a closed runtime refuses every call, with
:data:`CLOSED_MESSAGE`), the index and search, the memory store, the sandboxes (the
provider, given or default, wrapped with a deadline on every call: ``sandbox.timed``,
``MEMSTRATA_SANDBOX_TIMEOUT_S``), sync, skills, the disk watch and the background
re-embedding worker. :class:`Services` is what it builds; ``Memstrata`` adds the calls.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, Literal, TypeVar

from memstrata.agent.pool import AgentPool
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import ClosableSessions, Database
from memstrata.db.disk import DiskWatch, local_paths
from memstrata.errors import RuntimeClosedError
from memstrata.memory.kinds import USER_FILE_KINDS
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embedding_registry import ModelRegistry, build_embedder, embedder_for
from memstrata.retrieval.embeddings import EmbeddingProvider, OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.snapshot import SnapshotWriter
from memstrata.retrieval.state_reader import state_reader, while_open
from memstrata.retrieval.template_history import TemplateScaffold
from memstrata.retrieval.warmer import IndexWarmer
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.build import build_sandboxes
from memstrata.sandbox.sync import SyncService
from memstrata.skills.loader import SkillLoader
from memstrata.skills.service import SkillService


class FromSettings(Enum):
    """``embedder=`` not given: build it from the settings (``None`` means BM25 only)."""

    TOKEN = "from settings"


FROM_SETTINGS = FromSettings.TOKEN
# What every call on a closed runtime raises (RuntimeClosedError), whichever service.
CLOSED_MESSAGE = "this Memstrata was closed; open a new one with Memstrata.open(...)"


def refuse_if_closed(sessions: ClosableSessions) -> None:
    """The one rule of a closed runtime: ``RuntimeClosedError`` once its session factory is
    closed. Each session refuses by it; the runtime's own calls and the services that
    take no session first (search, which embeds the query before it reads the database,
    and the agent pool) check it through ``open_check``."""
    if sessions.closed:
        raise RuntimeClosedError(sessions.message)


@dataclass(frozen=True)
class Services:
    """Every service of one process, built once by :func:`assemble`."""

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
    # The session factory over ``db.sessions`` that every service above uses (the
    # background re-embedding worker excepted): ``close()`` closes it, so each of their
    # calls then raises RuntimeClosedError (``db`` itself may be the caller's, shared with
    # other runtimes, and stays usable).
    db_sessions: ClosableSessions
    # Is a disk it writes to full (the data directory's, the sandbox root's, the
    # database's)? What /readyz says (memstrata.db.disk).
    disk: DiskWatch
    healer: VectorHealer | None = None
    # Whether ``close()`` closes ``db`` too: the runtime opened it. A caller's ``database=``
    # may be shared with other runtimes (its embedded server, say), and stays open.
    owns_db: bool = True


S = TypeVar("S", bound=Services)


def assemble(
    cls: type[S],
    settings: Settings,
    db: Database,
    sandboxes: SandboxProvider | None,
    provider: EmbeddingProvider | None,
    skill_loader: SkillLoader | None,
    *,
    owns_db: bool,
) -> S:
    """Build every service on ``db`` with ``provider`` (``None``: BM25-only search), as a
    ``cls`` (``Memstrata``); ``owns_db``: whether its ``close()`` closes ``db`` too."""
    templates = TemplateSet(settings.template_dir or default_template_dir())
    sessions = ClosableSessions(db.sessions, CLOSED_MESSAGE)
    open_check = partial(refuse_if_closed, sessions)
    # Every new user is provisioned from these: a missing one is a start-up error,
    # not a 500 for each new user. AGENTS.md may be missing (sync reports it).
    templates.check(USER_FILE_KINDS)
    scaffold = TemplateScaffold(sessions, templates)
    scaffold.record(k for k in USER_FILE_KINDS if k.indexed)  # SOUL.md is not indexed
    indexer = Indexer(
        sessions,
        provider,
        chunk_tokens=settings.chunk_tokens,
        context_tokens=settings.conversation_context_tokens,
        scaffold=scaffold.keys,
        memory_chunking=settings.memory_chunking,
        database_check=db.refuse_if_lost,
    )
    store = MemoryStore(
        sessions,
        templates,
        settings.max_content_bytes,
        indexer=indexer,
        same_text_stale_version=settings.same_text_stale_version,
    )
    cache = IndexCache(
        sessions,
        settings.search_cache_users,
        settings.search_cache_bytes,
        SnapshotWriter(sessions, settings.index_snapshot_min_rows),
        # The check before every search, on the reader of the database's own engine;
        # refused at once while the database is lost, not after a frozen server's connect
        # timeout for each search queued on the user's index.
        states=while_open(db.unless_lost(state_reader(db.engine).read), sessions),
        database_check=db.refuse_if_lost,  # before a load, a cold one's too
    )
    search = SearchService(
        cache,
        provider,
        rrf_k=settings.rrf_k,
        candidate_multiplier=settings.candidate_multiplier,
        min_candidates=settings.min_candidates,
        min_candidates_decay=settings.min_candidates_decay,
        query_cache_entries=settings.query_cache_entries,
        decay=DecayPolicy(settings.decay, settings.decay_half_life_days, settings.decay_floor),
        vector_backend=settings.vector_backend,
        fusion=settings.search_fusion,
        decay_pool=settings.decay_pool,
        warmer=IndexWarmer(cache) if settings.index_warm_after_import else None,
        open_check=open_check,
    )
    # The query-embedding cache's bound is its share of the same byte budget.
    cache.share_budget(search.embedder)
    sandbox_provider = build_sandboxes(settings, sandboxes)
    # The listener thread starts on the pool's first get(): only processes that cache
    # agents need to hear invalidations.
    pool: AgentPool[Any] = AgentPool(db.engine, open_check=open_check)
    sync = SyncService(store, sandbox_provider, pool=pool, templates=templates)
    skills = SkillService(skill_loader or SkillLoader(settings.skill_dirs), sessions)
    pgdata = None if db.embedded is None else db.embedded.pgdata
    disk = DiskWatch(local_paths(settings, pgdata, local_sandboxes=sandboxes is None))
    healer = None
    if isinstance(provider, OpenAICompatibleEmbedder):
        healer = VectorHealer(
            # Not ``sessions``: a batch that outlives stop_background() (an embedding
            # call still running) stores its vectors, or fails as a database error.
            db.sessions,
            provider,
            interval_s=settings.embedding_heal_interval_s,
            max_attempts=settings.embedding_heal_max_attempts,
            on_caught_up=search.warm,
        )
    disk.attach(db.engine)  # last: nothing below fails and leaves it on a caller's db
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
        db_sessions=sessions,
        disk=disk,
        healer=healer,
        owns_db=owns_db,
    )


def check_open_arguments(
    settings: object,
    database: object,
    sandboxes: object,
    embedder: object,
    embedding_spec: object,
    registry: object,
    skill_loader: object,
) -> None:
    """``TypeError`` naming the first argument of ``Memstrata.open`` that is not of its
    type, what was given and what is expected; before anything is built or started. A
    provider is taken by its methods (a ``Protocol``, as ``TimedSandbox`` checks its
    results): each must be there and callable, the hooks it may leave out too if present."""
    problem = (
        _not_a("settings", settings, Settings, "memstrata.config.Settings")
        or _not_a(
            "database",
            database,
            Database,
            "memstrata.db.database.Database (from Database.open(settings)) or None",
            optional=True,
        )
        or _not_a_provider(
            "sandboxes",
            sandboxes,
            "a sandbox provider, an object with a method for_user(user_id, session_id=None) "
            "returning a Sandbox (memstrata.sandbox.base.SandboxProvider), or None",
            ("for_user",),
            ("erase_user", "hold_session", "claim_session"),
        )
        or _not_a_provider(
            "embedder",
            None if embedder is FROM_SETTINGS else embedder,
            "an embedding provider, an object with a name and a method embed(texts, kind) "
            "(memstrata.retrieval.embeddings.EmbeddingProvider), or None for BM25-only "
            "search",
            ("embed",),
        )
        or _not_a(
            "embedding_spec",
            embedding_spec,
            EmbeddingModelSpec,
            "memstrata.config.EmbeddingModelSpec or None",
            optional=True,
        )
        or _not_a_provider(
            "registry",
            registry,
            "a model registry, an object with a method resolve(name) "
            "(memstrata.retrieval.embedding_registry.ModelRegistry), or None",
            ("resolve",),
        )
        or _not_a(
            "skill_loader",
            skill_loader,
            SkillLoader,
            "memstrata.skills.loader.SkillLoader or None",
            optional=True,
        )
    )
    if problem is not None:
        raise TypeError(f"Memstrata.open: {problem}")


def _not_a(
    name: str, value: object, cls: type, expected: str, *, optional: bool = False
) -> str | None:
    if isinstance(value, cls) or (optional and value is None):
        return None
    return f"{name} must be a {expected}, got {_given(value)}"


def _not_a_provider(
    name: str,
    value: object,
    expected: str,
    methods: tuple[str, ...],
    hooks: tuple[str, ...] = (),
) -> str | None:
    if value is None:
        return None
    for method in methods + hooks:
        found = getattr(value, method, None)
        if found is None and method in hooks:
            continue
        kind = type(value).__name__
        if found is None:
            return f"{name} must be {expected}; got {kind}, which has no {method}"
        if not callable(found):
            return (
                f"{name} must be {expected}; got {kind}, whose {method} is a "
                f"{type(found).__name__}, not a method"
            )
    return None


def _given(value: object) -> str:
    """What a caller gave: its type, and a short repr of a plain value."""
    kind = type(value).__name__
    return f"{kind} {reprlib.repr(value)}" if isinstance(value, str | int | float) else kind


def choose_embedder(
    settings: Settings,
    embedder: EmbeddingProvider | Literal[FromSettings.TOKEN] | None,
    spec: EmbeddingModelSpec | None,
    registry: ModelRegistry | None,
) -> EmbeddingProvider | None:
    """The embedding provider of ``Memstrata.open``: ``embedder`` when given (``None``:
    BM25-only search), then ``spec``'s, then the settings' (``registry`` consulted first)."""
    if embedder is not FROM_SETTINGS:
        return embedder
    if spec is not None:
        return embedder_for(spec, settings)
    return build_embedder(settings, registry)
