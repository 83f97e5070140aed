"""The library's runtime: one ``Memstrata`` per process, every service built once from one
``Settings`` (the composition root of each entry point).

Entry points (CLI, the FastAPI app factory, tests, a host platform) call
``Memstrata.open(settings)`` and pass the result down; nothing is created at import time.
Parts can be swapped through the keyword arguments (a platform's own sandbox provider, an
embedding provider, a model registry). How the services are built and wired is
:mod:`memstrata.runtime_assembly`; here are the calls a host makes on them, the background
workers, and shutting down (``close``, ``drain``, ``with`` and ``async with``).
"""

from __future__ import annotations

import asyncio
import logging
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from memstrata.agent.session import AgentSession, open_agent_session
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.errors import (
    BackgroundEmbeddingUnavailableError,
    InvalidContentError,
    NoSandboxDirectoryError,
)
from memstrata.logs import log_event
from memstrata.memory.erase import Erasure, UserEraser
from memstrata.memory.kinds import USER_FILE_KINDS, validate_user_id
from memstrata.memory.users import UserSummary, holds_anything, list_users
from memstrata.retrieval.embedding_registry import ModelRegistry
from memstrata.retrieval.embeddings import EmbeddingProvider, OpenAICompatibleEmbedder
from memstrata.retrieval.heal_wake import WorkerWake
from memstrata.retrieval.rounds import Round
from memstrata.retrieval.session_ids import check_session_id
from memstrata.retrieval.snapshot_backfill import SnapshotBackfill
from memstrata.retrieval.staging import IndexReport
from memstrata.retrieval.tokenize import count_tokens
from memstrata.retrieval.worker_presence import NO_WORKER, WorkerPresence

# ``X as X``: re-exported, for the hosts and tests that import them from here.
from memstrata.runtime_assembly import CLOSED_MESSAGE as CLOSED_MESSAGE
from memstrata.runtime_assembly import FROM_SETTINGS as FROM_SETTINGS
from memstrata.runtime_assembly import (
    FromSettings,
    Services,
    assemble,
    check_open_arguments,
    choose_embedder,
)
from memstrata.runtime_assembly import refuse_if_closed as refuse_if_closed
from memstrata.runtime_exit import forget_at_exit, stopped_at_exit, to_the_end
from memstrata.sandbox.base import SandboxProvider
from memstrata.sandbox.local import LocalSandboxProvider
from memstrata.sandbox.timed import TimedSandboxProvider
from memstrata.skills.loader import SkillLoader
from memstrata.worker_watch import BackgroundHealth, WorkerWatch, again

logger = logging.getLogger(__name__)


# How long stop_background() waits for the re-embedding worker to finish its batch.
HEALER_STOP_S = 2.0


def drain_timeout_s(settings: Settings) -> float:
    """How long the end of an ``async with`` block waits for the edits still under way: one
    passage embedding call at its timeout with a full batch (5 + 1 × 8 = 13 s with the
    defaults), the bound ``memstrata serve`` gives them after its grace. An edit in its
    embedding call then lands within it (``drain`` sends no further call)."""
    per_batch = settings.embedding_timeout_per_text_s * settings.embedding_batch_size
    return settings.embedding_timeout_s + per_batch


@dataclass(frozen=True)
class Memstrata(Services):
    """Every service of one process, built once (use :meth:`open`; ``with`` closes it,
    ``async with`` drains it first and closes it off the event loop)."""

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        database: Database | None = None,
        sandboxes: SandboxProvider | None = None,
        embedder: EmbeddingProvider | Literal[FromSettings.TOKEN] | None = FROM_SETTINGS,
        embedding_spec: EmbeddingModelSpec | None = None,
        registry: ModelRegistry | None = None,
        skill_loader: SkillLoader | None = None,
    ) -> Memstrata:
        """Build the runtime. ``embedder`` wins (``None``: BM25-only search), then
        ``embedding_spec`` (e.g. a local server's), then the settings (``registry``
        consulted first). A wrong type of argument is a ``TypeError`` naming it, before
        anything is built or started."""
        settings = Settings() if settings is None else settings
        check_open_arguments(
            settings, database, sandboxes, embedder, embedding_spec, registry, skill_loader
        )
        db = database or Database.open(settings)
        try:
            return assemble(
                cls,
                settings,
                db,
                sandboxes,
                choose_embedder(settings, embedder, embedding_spec, registry),
                skill_loader,
                owns_db=database is None,
            )
        except BaseException:
            if database is None:  # ours: an embedded server would outlive the failure
                db.close()
            raise

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
        # Here, before the sync: a bad id would reach the sandbox provider, which refuses
        # it as a sandbox failure (two WARNINGs) before the store refuses it.
        validate_user_id(user_id)
        return await open_agent_session(
            self.sync,
            user_id,
            token_limit=token_limit,
            ratio=self.settings.prompt_budget_ratio,
            session_id=session_id,
            searcher=self.search,
            count=count,
            floor_share=self.settings.prompt_floor_share,
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
        embed them (``embeds_in_background``). Arguments of the wrong type (``rounds`` not a
        list, ``background`` not a bool) are an ``InvalidContentError``, before anything is
        read or written."""
        self._check_open()
        validate_user_id(user_id)
        if not isinstance(background, bool):
            raise InvalidContentError(
                f"background must be True or False, got {reprlib.repr(background)}",
                field="background",
            )
        if background and not self.embeds_in_background:
            raise BackgroundEmbeddingUnavailableError(NO_WORKER)
        reports = self.indexer.index_rounds(user_id, rounds, embed=not background)
        if any(r.deferred for r in reports):  # worker off here on purpose (HEAL=false): None
            self.worker_wake.rows_waiting(self.healer if self.settings.embedding_heal else None)
        if not background:
            # Deferred rows are replaced as the worker embeds them, so warming now would
            # load and snapshot rows about to go: the worker warms once it has caught up.
            self.search.warm(user_id)
        return reports

    def reindex_memory_files(self, user_id: str) -> int:
        """Index each stored memory file of ``user_id`` again under today's rules (rows of
        paragraphs still equal to the template's, indexed by releases before they were
        left out, are dropped); unchanged chunks keep their vectors. How many files."""
        self._check_open()
        validate_user_id(user_id)
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
        validate_user_id(user_id)
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
        """Rows stored without a vector get one: the worker may run here (or there is no
        embedding API, so nothing is ever deferred), or a process on this database runs
        it — the workers share one queue (``worker_presence``, asked every few seconds)."""
        if self.embedder is None or (self.healer is not None and self.settings.embedding_heal):
            return True
        return self.worker_presence.anywhere()

    @cached_property
    def worker_presence(self) -> WorkerPresence:
        return WorkerPresence(self.db.engine)

    @cached_property
    def worker_wake(self) -> WorkerWake:
        return WorkerWake(self.db.engine)

    def start_background(self) -> None:
        """Start the background workers — the database monitor (reconnects, restarts a dead
        embedded server), the re-embedding of rows without a vector (off with
        ``MEMSTRATA_EMBEDDING_HEAL=false``) and one pass writing the missing index
        snapshots (``MEMSTRATA_INDEX_SNAPSHOT_BACKFILL``); a server calls this once,
        ``close()`` stops them. ``RuntimeClosedError`` after ``close()``."""
        self._check_open()
        stopped_at_exit(self)
        monitor = self.db.monitor
        monitor.start()
        self.workers.watch("database-monitor", lambda: monitor.running, again(monitor))
        if self.healer is not None and self.settings.embedding_heal:
            self.healer.start()
            healer = self.healer
            self.workers.watch("embedding-healer", lambda: healer.running, again(healer))
            # Only now may a memory-file write leave passages to the worker (file_budget).
            self.indexer.file_budget.start(self.settings.embedding_file_budget_s, self.healer.wake)
        if self.settings.index_snapshot_backfill and self.settings.index_snapshot_min_rows > 0:
            self.snapshot_backfill.start()  # one pass, not watched: it ends by itself

    @cached_property
    def snapshot_backfill(self) -> SnapshotBackfill:
        """The pass ``start_background`` makes over the users without an index snapshot."""
        return SnapshotBackfill(
            self.db.engine.url.render_as_string(hide_password=False),
            self.search.model,
            self.settings.index_snapshot_min_rows,
            logging.getLevelName(logging.getLogger("memstrata").getEffectiveLevel()),
            self.settings.log_json,
        )

    @cached_property
    def workers(self) -> WorkerWatch:
        """The background threads ``start_background`` started, watched (``worker_watch``)."""
        return WorkerWatch()

    def check_background(self) -> BackgroundHealth | None:
        """Start again a background thread that died; what ``/readyz`` then tells
        (``"background"``): a host without the HTTP API calls this now and then."""
        return self.workers.check()

    def stop_background(self) -> None:
        forget_at_exit(self)
        self.workers.forget()  # first: a check meanwhile must not start them again
        self.indexer.file_budget.stop()
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
        if "snapshot_backfill" in self.__dict__:
            self.snapshot_backfill.stop()
        if "worker_wake" in self.__dict__:
            self.worker_wake.close()  # sends what waits to be sent
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
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            # First: a worker call that outlives stop_background()'s wait then ends with
            # its request in flight, sending none on the client closed below (a client of
            # the caller's is not closed, and the worker would go on sending).
            self.embedder.stop_bulk()
        self.stop_background()
        self.db_sessions.close()  # after the workers, whose last batch may still write
        self.disk.detach()  # ``db`` may be the caller's and outlive this runtime
        self.pool.close()
        if isinstance(self.embedder, OpenAICompatibleEmbedder):
            self.embedder.close()
        if self.owns_db:
            self.db.close()

    def __enter__(self) -> Self:
        self._check_open()  # a closed runtime given back would refuse every call inside
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """The shutdown docs/LIBRARY.md asks for, in order: ``drain`` (the edits still
        under way, those whose caller was cancelled included, land first), then ``close``
        in a worker thread: stopping the background workers and an embedded PostgreSQL
        takes a tenth of a second and more, which on the loop would stall every task. A
        cancellation that comes while it closes is raised once the close has ended."""
        try:
            if not self.db_sessions.closed:
                await self.drain(drain_timeout_s(self.settings))
        finally:
            await to_the_end(asyncio.to_thread(self.close))

    def _check_open(self) -> None:
        refuse_if_closed(self.db_sessions)
