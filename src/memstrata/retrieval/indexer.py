"""Indexing: memory files and conversation rounds → chunks → embeddings → rows.

How content maps to ``memory_embeddings`` rows:

- A memory file (USER.md, MEMORY.md) → ``file_path`` = the file name, ``chunk_index`` = the
  chunk's position. Re-indexing diffs by content hash: unchanged chunks keep their rows
  and vectors, changed ones are replaced, vanished ones deleted. A chunk whose text is
  stored at another position (an entry inserted above it moved it down) gets a new row
  with the stored row's vector, copied in the database: not embedded, read or sent again.
- A conversation round → ``file_path`` = ``sessions/<session_id>/<turn_index>``,
  ``chunk_index`` = the part (0 unless the round is longer than one chunk),
  ``created_at`` = the round's timestamp, ``source_ids`` = the round's turn ids
  (default ``<session_id>:<turn_index>``). Re-indexing the same round is a no-op when its
  text is unchanged (a row still without a vector keeps its id and a worker's claim on
  it; an inline write gives it its vector), and replaces its rows when it changed.
- Other files (daily notes such as ``memory/2026-12-01.md``) → like memory files, but
  they are not resident, so they decay with age like conversations.

Embedding failures never lose a write: the rows are stored with a NULL vector, a warning
is logged, search falls back to BM25 for them, and the background worker
(``retrieval.healing``) or ``fill_missing`` (``memstrata reindex``) embeds them later.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from functools import partial

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import DatabaseUnavailableError, InvalidContentError
from memstrata.logs import log_event, log_failure
from memstrata.memory.kinds import FileKind, validate_user_id
from memstrata.retrieval.chunk import CHUNK_TOKENS, CONTEXT_TOKENS, MemoryChunking, chunk_text
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.entry_chunks import entry_chunks
from memstrata.retrieval.file_budget import FileBudget, RoundsWrite
from memstrata.retrieval.fill import count_missing, fill_missing
from memstrata.retrieval.passage_vectors import embed_and_store
from memstrata.retrieval.records import SESSION_PREFIX
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.round_docs import Basis, paths_to_read, round_docs
from memstrata.retrieval.rounds import (
    Doc,
    OwnRound,
    Round,
    check_not_future,
    checked_rounds,
    format_round,
    rounds_invalid,
    session_path,
)
from memstrata.retrieval.scaffold import drop_scaffold
from memstrata.retrieval.stage_docs import stage_docs
from memstrata.retrieval.staging import IndexReport, NeighbourChangedError, StagedIndex, has_vector
from memstrata.text import unstorable_text

__all__ = ["SESSION_PREFIX", "Indexer", "Round", "format_round", "session_path"]

logger = logging.getLogger(__name__)


# Stagings of a batch of rounds, each embedded outside the user's lock and refused when a
# neighbour changed meanwhile. The last is never refused (a burst of writers to one session
# must not starve anyone) nor written stale: if it lost the race too, its docs are built
# again under the lock and written unembedded where no staging embedded their text, then
# embedded once the transaction has committed, outside the lock (``Indexer._apply_last``).
MAX_NEIGHBOUR_ATTEMPTS = 3


class Indexer:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        embedder: EmbeddingProvider | None = None,
        *,
        chunk_tokens: int = CHUNK_TOKENS,
        context_tokens: int = CONTEXT_TOKENS,
        scaffold: Callable[[FileKind], Collection[str]] | None = None,
        memory_chunking: MemoryChunking = "paragraphs",
        database_check: Callable[[], None] | None = None,
    ) -> None:
        self._sessions = sessions
        # Asked before each embedding request of a write; raises while the database is
        # known lost (``Database.refuse_if_lost``, handed over by the runtime): a 200-turn
        # batch went on embedding for its whole budget (16.5 s) after a fast shutdown,
        # then answered the same 503.
        self.database_check = database_check
        self.embedder = embedder
        # The template paragraphs of each memory file (retrieval.scaffold, the current
        # template's and earlier ones'): they are not indexed.
        self.scaffold = scaffold
        self.chunk_tokens = chunk_tokens
        self.context_tokens = context_tokens
        # How USER.md and MEMORY.md are cut (MEMSTRATA_MEMORY_CHUNKING); anything else,
        # conversation rounds included, always by paragraphs.
        self.memory_chunking = memory_chunking
        # How long a memory-file write embeds before it answers: off until the runtime
        # starts the background worker (``Memstrata.start_background``).
        self.file_budget = FileBudget()

    # -- public API ----------------------------------------------------------------------
    def index_memory_file(self, user_id: str, kind: FileKind, content: str) -> IndexReport:
        """Re-index USER.md / MEMORY.md after a content change (other kinds: no-op)."""
        if not kind.indexed:
            return IndexReport(file_path=kind.filename)
        validate_user_id(user_id)
        texts = self._memory_chunks(kind, content)
        return self._replace(user_id, [Doc(kind.filename, texts, None, None)])[0]

    def index_document(
        self, user_id: str, file_path: str, content: str, created_at: datetime | None = None
    ) -> IndexReport:
        """Index any file's text under ``file_path`` (memory files, daily notes)."""
        validate_user_id(user_id)
        _check_path(file_path)
        if created_at is not None:
            created_at = check_not_future(created_at)
        texts = chunk_text(content, self.chunk_tokens)
        return self._replace(user_id, [Doc(file_path, texts, created_at, None)])[0]

    def index_turn(
        self,
        user_id: str,
        session_id: str,
        turn_index: int,
        user_message: str,
        assistant_reply: str = "",
        timestamp: datetime | None = None,
        source_ids: Sequence[str] | None = None,
    ) -> IndexReport:
        """Index one conversation round; idempotent for the same round and text."""
        turn = Round(session_id, turn_index, user_message, assistant_reply, timestamp, source_ids)
        return self.index_rounds(user_id, [turn], write="turn")[0]

    def index_rounds(
        self,
        user_id: str,
        rounds: Sequence[Round],
        *,
        embed: bool = True,
        write: RoundsWrite = "batch",
    ) -> list[IndexReport]:
        """Index many rounds (of any sessions) with batched embedding calls and one
        transaction. All or nothing on validation: if any round is invalid nothing is
        stored and ``RoundsInvalidError.errors`` lists every bad round. An embedding
        failure does not reject anything: the rows are stored without vectors.
        ``embed=False`` stores new rows without calling the embedding API (``deferred``
        in the reports): the background worker (``retrieval.healing``) embeds them, and
        until then they are searched with BM25 — an import that must not wait for
        the embedding API. Where that worker runs, an embedding write spends at most the
        file budget (``retrieval.file_budget``) embedding: the rest is ``deferred`` too,
        counted under ``write`` (the route: a batch, or one turn) on ``/metrics``."""
        validate_user_id(user_id)
        valid, refused = checked_rounds(rounds)
        if refused:
            raise rounds_invalid(refused, len(rounds))
        deadline = self.file_budget.deadline() if embed else None
        reuse: dict[str, list[float]] = {}
        earlier: StagedIndex | None = None
        for attempt in range(MAX_NEIGHBOUR_ATTEMPTS):
            docs, basis = self._round_docs(user_id, valid)
            staged = self._stage(user_id, docs, embed, reuse=reuse, deadline=deadline)
            staged.basis = basis
            if earlier is not None:  # what it embedded is reused, and what failed counted
                staged.count_earlier(earlier)
            try:
                if attempt < MAX_NEIGHBOUR_ATTEMPTS - 1:
                    self._apply(staged)
                else:
                    last = embed and deadline is None  # a budget leaves it to the worker
                    staged = self._apply_last(user_id, valid, staged, reuse, last)
            except NeighbourChangedError as exc:
                # Another writer rewrote a neighbour: its new text would be overwritten
                # with the one read here, or this round's context would be stale.
                log_event(logger, "index.neighbour_changed", user_id=user_id, paths=exc.paths)
                reuse.update(staged.vectors())
                earlier = staged
                continue
            break
        reports = staged.reports[: len(valid)]
        if deadline is not None:
            self.file_budget.rounds_written(user_id, reports, write)
        return reports

    def _apply_last(
        self,
        user_id: str,
        valid: Sequence[OwnRound],
        staged: StagedIndex,
        reuse: dict[str, list[float]],
        embed: bool,
    ) -> StagedIndex:
        """Apply the last staging or, if a neighbour changed since it was read, docs built
        again from the rows stored now, under the lock and in the same transaction: no
        writer can come in between. No embedding call under the lock: a text no staging
        embedded (nor any stored row holds) is stored without a vector and, when
        ``embed``, embedded once that transaction has committed (``_embed_deferred``).
        Returns the staging written."""
        if not staged.may_change:
            staged.apply_unchanged()
            return staged
        with transaction(self._sessions) as session:
            try:
                staged.apply(session)  # takes the lock; refuses before writing anything
                return staged
            except NeighbourChangedError as exc:
                log_event(
                    logger, "index.neighbour_changed", user_id=user_id, paths=exc.paths, last=True
                )
            docs, _ = self._round_docs(user_id, valid, session)
            known = {**reuse, **staged.vectors()}
            rebuilt = self._stage(user_id, docs, False, reuse=known, session=session)
            rebuilt.count_earlier(staged)
            rebuilt.apply(session)
        if embed:
            self._embed_deferred(rebuilt)
        return rebuilt

    def _embed_deferred(self, staged: StagedIndex) -> None:
        """Embed the rows ``staged`` (committed) stored without a vector, outside the lock:
        they were left to the background worker, which a library that never starts one
        does not have. Each vector goes to its row only if the row is still there
        (``embed_and_store``); what fails stays for the worker, counted in the reports."""
        wanted = {(r.file_path, r.content_hash) for _, r in staged.rows if r.embedding is None}
        if self.embedder is None or not wanted:
            return
        started = time.perf_counter()
        user_id = staged.user_id
        try:
            with self._sessions() as session:
                present = EmbeddingRepository(session, user_id).chunks_for_paths(staged.paths)
            todo = [
                c
                for c in present
                if (c.file_path, c.content_hash) in wanted and not has_vector(c, staged.model)
            ]
            embedded, stored, error = (
                embed_and_store(self._sessions, self.embedder, user_id, todo, self.database_check)
                if todo  # else a writer replaced them all since the commit
                else (set(), 0, "")
            )
        except (SQLAlchemyError, DatabaseUnavailableError) as exc:
            # The batch is stored (its answer stays 200): the worker embeds the rest.
            log_failure(logger, "index.deferred.embed_failed", exc, user_id=user_id)
            return
        staged.count_embedded_after(todo, embedded, error, time.perf_counter() - started)
        log_event(logger, "index.deferred.embedded", user_id=user_id, rows=len(todo), stored=stored)

    def _reading(self, session: Session | None) -> AbstractContextManager[Session]:
        """``session`` (the last attempt's, under the lock) or a short one of its own."""
        return nullcontext(session) if session is not None else self._sessions()

    def _round_docs(
        self, user_id: str, valid: Sequence[OwnRound], session: Session | None = None
    ) -> tuple[list[Doc], Basis]:
        """The docs of ``valid`` and of their next rounds (``round_docs``), from the
        neighbours' rows read in ``session`` if given."""
        with self._reading(session) as reading:
            stored = EmbeddingRepository(reading, user_id).chunks_for_paths(paths_to_read(valid))
        return round_docs(valid, stored, self.chunk_tokens, self.context_tokens)

    def count_missing(self, user_id: str, *, held: bool | None = None) -> int:
        """Rows of ``user_id`` still without a vector of this indexer's model: all, or
        (``held``) those a claim holds now, or (``held=False``) those none holds."""
        if self.embedder is None:
            return 0
        return count_missing(self._sessions, user_id, self.embedder.name, held=held)

    def count_held(self, user_id: str) -> int:
        """Of ``count_missing``'s rows, those a claim holds now (``queue.HELD``): a
        worker or another reindex embedding them, not a worker's retry pause."""
        return self.count_missing(user_id, held=True)

    def fill_missing(
        self,
        user_id: str,
        batch: int = 256,
        *,
        progress: Callable[[int, int], None] | None = None,
        wait_s: float = 0.0,
        waiting: Callable[[int, float], None] | None = None,
    ) -> int:
        """Embed rows stored without a vector (or by another model), leaving the rows a
        running server's worker holds to it, and waiting up to ``wait_s`` for those
        (``retrieval.fill``). Returns rows embedded."""
        if self.embedder is None:
            return 0
        return fill_missing(
            self._sessions,
            self.embedder,
            user_id,
            batch,
            progress=progress,
            wait_s=wait_s,
            waiting=waiting,
        )

    def stage_memory_file(
        self, user_id: str, kind: FileKind, content: str, *, embed: bool = True
    ) -> StagedIndex:
        """Chunk and embed a memory file's new text without writing anything.

        The memory-file service calls this outside any lock or transaction and then
        :meth:`StagedIndex.apply` inside the one transaction that stores the file, so the
        text and its rows commit together and nobody waits on an embedding call.
        ``embed=False``: rows without new vectors (the background worker's).
        """
        validate_user_id(user_id)
        deadline = self.file_budget.deadline()  # the chunking counts too: the caller waits
        texts = self._memory_chunks(kind, content)
        docs = [Doc(kind.filename, texts, None, None)]
        staged = self._stage(user_id, docs, embed, deadline=deadline)
        staged.after_commit = partial(
            self.file_budget.written, user_id, kind.filename, staged.reports[0]
        )
        return staged

    def template_paragraphs(self, kind: FileKind) -> Collection[str] | None:
        """The paragraphs of a ``kind`` file left out as the template's (``scaffold``: the
        current template's and the earlier ones', ``retrieval.template_history``), as
        ``retrieval.scaffold`` compares them; None when there is nothing to compare with
        (no ``scaffold``, or the current template cannot be read: logged), and every
        paragraph is indexed. The agent tools' rewrite guard exempts the same paragraphs
        (``agent.removals.template_paragraphs``)."""
        if self.scaffold is None:
            return None
        try:
            return self.scaffold(kind)
        except OSError as exc:
            log_event(logger, "index.no_template", logging.WARNING, error=str(exc))
            return None

    # -- internals -------------------------------------------------------------------------
    def _memory_chunks(self, kind: FileKind, content: str) -> list[str]:
        """The chunks of a memory file without what it still shares with its template
        (both ways of indexing a memory file go through here): its paragraphs, and when
        cut by entries its entries too."""
        scaffold = self.template_paragraphs(kind)
        if self.memory_chunking == "entries":  # the cut needs the lines as they are
            return entry_chunks(content, self.chunk_tokens, scaffold=scaffold or ())
        own = content if scaffold is None else drop_scaffold(content, scaffold)
        return chunk_text(own, self.chunk_tokens)

    def _replace(self, user_id: str, docs: Sequence[Doc], embed: bool = True) -> list[IndexReport]:
        staged = self._stage(user_id, docs, embed)
        self._apply(staged)
        return staged.reports

    def _apply(self, staged: StagedIndex) -> None:
        if staged.may_change:
            with transaction(self._sessions) as session:
                staged.apply(session)
        else:
            staged.apply_unchanged()

    def _stage(
        self,
        user_id: str,
        docs: Sequence[Doc],
        embed: bool = True,
        *,
        reuse: dict[str, list[float]] | None = None,
        session: Session | None = None,
        deadline: float | None = None,
    ) -> StagedIndex:
        reading = self._reading(session)
        return stage_docs(
            reading,
            self.embedder,
            user_id,
            docs,
            embed,
            reuse=reuse,
            deadline=deadline,
            guard=self.database_check,
        )


def _check_path(file_path: str) -> None:
    if not isinstance(file_path, str) or not file_path.strip() or len(file_path) > 255:
        raise InvalidContentError(
            "file_path must be a non-empty string of at most 255 characters", field="file_path"
        )
    if (problem := unstorable_text(file_path, "file_path")) is not None:
        raise InvalidContentError(problem, field="file_path")
