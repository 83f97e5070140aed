"""The library's composition root: build every service once from one ``Settings``.

Entry points (CLI, the FastAPI app factory, tests, a host platform) call
``Memstrata.open(settings)`` and pass the result down; nothing is created at import time.
Parts can be swapped through the keyword arguments (a platform's own sandbox provider, an
embedding provider, a model registry). The sandbox provider, given or default, is wrapped
with a deadline on every call (``sandbox.timed``, ``MEMSTRATA_SANDBOX_TIMEOUT_S``).
"""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from memstrata.agent.pool import AgentPool
from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import ClosableSessions, Database
from memstrata.db.disk import DiskWatch, local_paths
from memstrata.errors import (
    BackgroundEmbeddingUnavailableError,
    InvalidContentError,
    NoSandboxDirectoryError,
    RuntimeClosedError,
)
from memstrata.logs import log_event
from memstrata.memory.erase import Erasure, UserEraser
from memstrata.memory.kinds import USER_FILE_KINDS, validate_user_id
from memstrata.memory.store import MemoryStore
from memstrata.memory.templates import TemplateSet, default_template_dir
from memstrata.memory.users import UserSummary, holds_anything, list_users
from memstrata.retrieval.cache import IndexCache
from memstrata.retrieval.embedding_registry import ModelRegistry, build_embedder, embedder_for
from memstrata.retrieval.embeddings import EmbeddingProvider, OpenAICompatibleEmbedder
from memstrata.retrieval.healing import VectorHealer
from memstrata.retrieval.indexer import Indexer
from memstrata.retrieval.ranking import DecayPolicy
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.search import SearchService
from memstrata.retrieval.session_ids import check_session_id
from memstrata.retrieval.snapshot import SnapshotWriter
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.state_reader import state_reader, while_open
from memstrata.retrieval.template_history import TemplateScaffold
from memstrata.retrieval.tokenize import count_tokens
from memstrata.retrieval.warmer import IndexWarmer
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.build import build_sandboxes
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.sync import SyncService
from memstrata.sandbox.timed import TimedSandboxProvider
from memstrata.skills.loader import SkillLoader
from memstrata.skills.service import SkillService

logger = logging.getLogger(__name__)


class _FromSettings(Enum):
    """``embedder=`` not given: build it from the settings (``None`` means BM25 only)."""

    TOKEN = "from settings"


FROM_SETTINGS = _FromSettings.TOKEN
# How long stop_background() waits for the re-embedding worker to finish its batch.
HEALER_STOP_S = 2.0
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
class Memstrata:
    """Every service of one process, built once (use :meth:`open`; ``with`` closes it)."""

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
        try:
            return cls._assemble(
                settings,
                db,
                sandboxes,
                _embedder(settings, embedder, embedding_spec, registry),
                skill_loader,
                owns_db=database is None,
            )
        except BaseException:
            if database is None:  # ours: an embedded server would outlive the failure
                db.close()
            raise

    @classmethod
    def _assemble(
        cls,
        settings: Settings,
        db: Database,
        sandboxes: SandboxProvider | None,
        provider: EmbeddingProvider | None,
        skill_loader: SkillLoader | None,
        *,
        owns_db: bool,
    ) -> Memstrata:
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
        )
        store = MemoryStore(sessions, templates, settings.max_content_bytes, indexer=indexer)
        cache = IndexCache(
            sessions,
            settings.search_cache_users,
            settings.search_cache_bytes,
            SnapshotWriter(sessions, settings.index_snapshot_min_rows),
            # The check before every search, on the reader of the database's own engine.
            states=while_open(state_reader(db.engine).read, sessions),
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

    async def open_agent_session(
        self,
        user_id: str,
        *,
        token_limit: int,
        session_id: str | None = None,
        count: Callable[[str], int] = count_tokens,
    ) -> AgentSession:
        """Start an agent session: sandbox-first sync, the memory part of the system
        prompt (``prompt_budget_ratio`` of ``token_limit``), round tracking, and the memory
        tools with ``memory_search`` bound to this runtime's search. ``count``: the
        model's token counter for the budget (e.g. ``lambda t: len(enc.encode(t))`` with
        tiktoken); the default is memstrata's estimate (``retrieval.tokenize``), which
        counts Chinese under cl100k."""
        self._check_open()
        return await open_agent_session(
            self.sync,
            user_id,
            token_limit=token_limit,
            ratio=self.settings.prompt_budget_ratio,
            session_id=session_id,
            searcher=self.search,
            count=count,
        )

    def import_rounds(
        self, user_id: str, rounds: Sequence[Round], *, background: bool = False
    ) -> list[IndexReport]:
        """Index conversation rounds of any sessions — a live batch or an imported history
        — as ``POST /api/memory/conversations/turns:batch`` does: validated all or
        nothing (``RoundsInvalidError``), one transaction. ``background=False`` embeds
        them before returning and then warms the user's index when enough rows came in
        (``retrieval.warmer``); ``background=True`` stores them without vectors and wakes
        the background worker, which embeds them and warms the index once caught up.
        ``BackgroundEmbeddingUnavailableError`` (a ValueError) when no worker would
        embed them. Arguments of the wrong type (``rounds`` not a list, ``background``
        not a bool) are an ``InvalidContentError``, before anything is read or written."""
        self._check_open()
        if not isinstance(background, bool):
            raise InvalidContentError(
                f"background must be True or False, got {reprlib.repr(background)}"
            )
        if background and not self.embeds_in_background:
            raise BackgroundEmbeddingUnavailableError(
                "embed=background needs the background embedding worker, which does not run "
                "in this server (it needs an OpenAI-compatible embedding API and "
                "MEMSTRATA_EMBEDDING_HEAL=true); send embed=inline"
            )
        reports = self.indexer.index_rounds(user_id, rounds, embed=not background)
        if self.healer is not None and any(r.deferred for r in reports):
            self.healer.wake()
        if not background:
            # Deferred rows are replaced as the worker embeds them, so warming now would
            # load and snapshot rows about to go: the worker warms once it has caught up.
            self.search.warm(user_id)
        return reports

    def reindex_memory_files(self, user_id: str) -> int:
        """Index each stored memory file of ``user_id`` again under today's rules (rows of
        paragraphs still equal to the template's, indexed by releases before they were
        left out, are dropped); unchanged chunks keep their vectors. How many files."""
        count = 0
        for kind in USER_FILE_KINDS:
            stored = self.store.get_memory_file(user_id, kind) if kind.indexed else None
            if stored is not None:
                self.indexer.index_memory_file(user_id, kind, stored.content)
                count += 1
        return count

    def erase_user(self, user_id: str) -> Erasure:
        """Erase everything memstrata holds of ``user_id`` (a GDPR erasure request,
        docs/DEPLOY.md "Erasing a user"): in one transaction the user's memory files,
        search rows, index snapshots and skill switches, with the index generation bumped
        so every process's cached index drops them at its next use; then the AgentPool
        invalidation (NOTIFY), this process's search index of the user, and the user's
        sandboxes through the provider's ``erase_user`` hook (skipped, and logged, for a
        provider without one). Safe while the user is active: a concurrent write lands
        before the erase and is erased, or after it as a new user's first write
        (``memory.erase``). Idempotent. Blocking: an async host calls it in a worker
        thread. ``SandboxError`` when the sandbox cannot be removed (the message says
        whether the rows are erased already; running it again finishes the job)."""
        self._check_open()
        # The hook is the host's provider's.
        eraser = UserEraser(self.db_sessions, self._provider, pool=self.pool, search=self.search)
        return eraser.erase(user_id)

    def sandbox_directory(self, user_id: str, session_id: str | None = None) -> Path:
        """The directory of ``user_id``'s sandbox, or of their session ``session_id``'s,
        with the local provider (``MEMSTRATA_SANDBOX_ROOT``): what a platform mounts into
        the agent's container as its workspace. Named by the provider's own rule (ids
        escaped, ``sandbox.dir_names``); it exists once a session opened it
        (``open_agent_session``). A session id no session may have is an
        ``InvalidContentError``; ``NoSandboxDirectoryError`` when the runtime was opened
        with a host's own provider, whose sandboxes memstrata knows no path of."""
        self._check_open()
        if session_id is not None:
            check_session_id(session_id)
        provider = self._provider
        if not isinstance(provider, LocalSandboxProvider):
            raise NoSandboxDirectoryError(
                f"this runtime's sandboxes are the host's own {type(provider).__name__}, "
                "not memstrata's local directories: it knows where its sandboxes are"
            )
        return provider.directory_for(user_id, session_id)

    @property
    def _provider(self) -> SandboxProvider:
        """The provider inside the deadline wrapper: the host's, or the local one."""
        sandboxes = self.sandboxes
        return sandboxes.inner if isinstance(sandboxes, TimedSandboxProvider) else sandboxes

    def holds_user(self, user_id: str) -> bool:
        """Whether ``list_users`` lists ``user_id`` (index lookups, not a pass over every
        user): a mistyped id holds nothing."""
        self._check_open()
        with self.db_sessions() as session:
            return holds_anything(session, validate_user_id(user_id))

    def list_users(self) -> list[UserSummary]:
        """Every user with a memory file, a search row or a skill switch, by id, with how
        many of each (``memstrata user list``)."""
        self._check_open()
        with self.db_sessions() as session:
            return list_users(session)

    @property
    def embeds_in_background(self) -> bool:
        """Rows stored without a vector get one: the worker runs here (or there is no
        embedding API, so nothing is ever deferred)."""
        if self.embedder is None:
            return True
        return self.healer is not None and self.settings.embedding_heal

    def start_background(self) -> None:
        """Start the background workers — the database monitor (reconnects, restarts a dead
        embedded server) and the re-embedding of rows without a vector (off with
        ``MEMSTRATA_EMBEDDING_HEAL=false``); a server calls this once, ``close()`` stops
        them."""
        self.db.monitor.start()
        if self.healer is not None and self.settings.embedding_heal:
            self.healer.start()

    def stop_background(self) -> None:
        if self.healer is not None:
            # Briefly: a server stopping spends its shutdown budget on the requests it cut
            # off. A worker still in an embedding call is left to it (a daemon); stop()
            # gives its claimed rows back anyway, so another worker takes them at once (a
            # process that dies instead has its claims taken back by the next round of any
            # worker, retrieval.claimer; the lease is the fallback for a worker that could
            # not hold its lock).
            self.healer.stop(timeout_s=HEALER_STOP_S)
        if "monitor" in self.db.__dict__:
            self.db.monitor.stop()
        if self.search.warmer is not None:
            self.search.warmer.close()  # before the writer: a warm may schedule a write
        if self.search.cache.snapshots is not None:
            self.search.cache.snapshots.close()

    async def drain(self, timeout_s: float) -> int:
        """For a server whose grace has passed, before it closes this runtime: send no more
        passage embeddings — those already sent run to their end, the writes it cut off
        commit their text (vectors healed later) instead of queueing behind a slow
        embedding API; queries are not affected — and wait up to ``timeout_s`` for the
        memory-file edits still under way, those whose request was cancelled included
        (they finish in a task of their own); returns how many still run. ``memstrata
        serve`` does this on SIGTERM; a host app that mounts memstrata calls it in its own
        shutdown, from its event loop (docs/API.md, "Stopping")."""
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            self.embedder.stop_bulk()
        running = await self.sync.settle(timeout_s)
        if running:
            log_event(
                logger,
                "shutdown.writes_abandoned",
                logging.WARNING,
                running=running,
                waited_s=round(timeout_s, 3),
            )
        return running

    def close(self) -> None:
        """Stop the background workers, release the database (and the embedded server,
        if any) unless it was the caller's (``open(database=...)``), and refuse every later
        call with ``RuntimeClosedError``; a second call does nothing."""
        if self.db_sessions.closed:
            return
        self.stop_background()
        self.db_sessions.close()  # after the workers, whose last batch may still write
        self.disk.detach()  # ``db`` may be the caller's and outlive this runtime
        self.pool.close()
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            self.embedder.close()
        if self.owns_db:
            self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        refuse_if_closed(self.db_sessions)


def _embedder(
    settings: Settings,
    embedder: EmbeddingProvider | Literal[_FromSettings.TOKEN] | None,
    spec: EmbeddingModelSpec | None,
    registry: ModelRegistry | None,
) -> EmbeddingProvider | None:
    if embedder is not FROM_SETTINGS:
        return embedder
    if spec is not None:
        return embedder_for(spec, settings)
    return build_embedder(settings, registry)
