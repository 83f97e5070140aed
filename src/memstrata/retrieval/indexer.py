"""Indexing: memory files and conversation rounds → chunks → embeddings → rows.

How content maps to ``memory_embeddings`` rows:

- A memory file (USER.md, MEMORY.md) → ``file_path`` = the file name, ``chunk_index`` = the
  chunk's position. Re-indexing diffs by content hash: unchanged chunks keep their rows
  and vectors, changed ones are replaced, vanished ones deleted.
- A conversation round → ``file_path`` = ``sessions/<session_id>/<turn_index>``,
  ``chunk_index`` = the part (0 unless the round is longer than one chunk),
  ``created_at`` = the round's timestamp, ``source_ids`` = the round's turn ids
  (default ``<session_id>:<turn_index>``). Re-indexing the same round is a no-op when its
  text is unchanged, and replaces its rows when it changed.
- Other files (daily notes such as ``memory/2026-12-01.md``) → like memory files, but
  they are not resident, so they decay with age like conversations.

Embedding failures never lose a write: the rows are stored with a NULL vector, a warning
is logged, search falls back to BM25 for them, and ``fill_missing`` embeds them later.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import EmbeddingError, InvalidContentError, VectorDimensionError
from memstrata.logs import log_event
from memstrata.memory.kinds import FileKind, validate_user_id
from memstrata.retrieval.chunk import chunk_text
from memstrata.retrieval.embeddings import EmbeddingProvider
from memstrata.retrieval.repository import (
    SESSION_PREFIX,
    EmbeddingRepository,
    NewChunk,
    StoredChunk,
)
from memstrata.retrieval.rounds import (
    Doc,
    OwnRound,
    Round,
    RoundsInvalidError,
    aware,
    check_not_future,
    format_round,
    round_doc,
    session_path,
    stored_round,
    validate_rounds,
)
from memstrata.retrieval.scaffold import drop_scaffold
from memstrata.retrieval.terms import encode_terms
from memstrata.retrieval.vector import pad_vector

__all__ = [
    "SESSION_PREFIX", "IndexReport", "Indexer", "Round", "StagedIndex", "content_hash",
    "format_round", "session_path",
]  # fmt: skip

logger = logging.getLogger(__name__)


@dataclass
class IndexReport:
    file_path: str
    chunks: int = 0
    inserted: int = 0
    deleted: int = 0
    unchanged: int = 0
    embedded: int = 0
    embedding_failed: int = 0
    deferred: int = 0  # stored without a vector on purpose: the background worker embeds it
    embed_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.deleted)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# Stagings of a batch of rounds whose neighbours changed meanwhile, before the last one
# writes without checking (a burst of writers to one session should not starve anyone).
MAX_NEIGHBOUR_ATTEMPTS = 3


class NeighbourChangedError(Exception):
    """A round's neighbour was rewritten between staging and applying (internal)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = paths


def _basis(
    chunks: Sequence[StoredChunk], paths: Iterable[str]
) -> dict[str, frozenset[tuple[int, str]]]:
    found: dict[str, set[tuple[int, str]]] = {p: set() for p in paths}
    for c in chunks:
        found.setdefault(c.file_path or "", set()).add((c.chunk_index or 0, c.content_hash))
    return {p: frozenset(v) for p, v in found.items()}


@dataclass
class StagedIndex:
    """The rows some paths should hold, chunked and embedded; nothing written yet.

    :meth:`apply` runs in the caller's transaction. It re-reads the paths under the user's
    advisory lock, keeps present rows that match a wanted (position, hash) and are fresh,
    inserts the rest with the vectors staged here and deletes the others, so a concurrent
    writer between staging and applying costs at most a re-insert, never a lost row.
    """

    user_id: str
    paths: list[str]
    model: str | None
    rows: list[tuple[int, NewChunk]]  # (report index, the row with its vector if any)
    reports: list[IndexReport]
    may_change: bool  # False: the staged rows equal what was read, nothing to write
    # Paths whose stored rows this staging was built from without writing them all (a
    # round's neighbours: the previous one's text is context, the next one is re-indexed),
    # as (chunk index, content hash) sets. ``apply`` refuses if any of them changed.
    basis: dict[str, frozenset[tuple[int, str]]] = field(default_factory=dict)

    def apply(self, session: Session) -> None:
        """Write the staged rows; ``NeighbourChangedError`` (nothing written) when a path
        of ``basis`` changed since staging: re-stage from what is stored now."""
        repo = EmbeddingRepository(session, self.user_id)
        repo.lock()
        if self.basis:
            now = _basis(repo.chunks_for_paths(sorted(self.basis)), self.basis)
            if now != self.basis:
                changed = sorted(p for p in self.basis if now[p] != self.basis[p])
                raise NeighbourChangedError(changed)
        present = repo.chunks_for_paths(self.paths)
        by_slot = {(c.file_path, c.chunk_index, c.content_hash): c for c in present}
        report_of = {path: n for n, path in enumerate(self.paths)}
        keep_ids: set[int] = set()
        inserts: list[NewChunk] = []
        for n, row in self.rows:
            current = by_slot.get((row.file_path, row.chunk_index, row.content_hash))
            if (
                current is not None
                and current.id not in keep_ids
                and _is_fresh(current, self.model, row.created_at)
            ):
                keep_ids.add(current.id)
                self.reports[n].unchanged += 1
            else:
                inserts.append(row)
                self.reports[n].inserted += 1
        stale = [c for c in present if c.id not in keep_ids]
        for c in stale:
            self.reports[report_of[c.file_path or ""]].deleted += 1
        if inserts or stale:
            repo.delete_ids([c.id for c in stale])
            repo.insert(inserts)
            repo.bump_generation()
        self._log()

    def vectors(self) -> dict[str, list[float]]:
        """The vectors staged here by content hash (reused by a re-staging)."""
        return {r.content_hash: list(r.embedding) for _, r in self.rows if r.embedding is not None}

    def apply_unchanged(self) -> None:
        """Nothing to write: every staged row was already stored."""
        for n, _ in self.rows:
            self.reports[n].unchanged += 1
        self._log()

    def _log(self) -> None:
        for r in self.reports:
            log_event(
                logger,
                "index.updated",
                user_id=self.user_id,
                file_path=r.file_path,
                chunks=r.chunks,
                inserted=r.inserted,
                deleted=r.deleted,
                embedded=r.embedded,
                embedding_failed=r.embedding_failed,
            )


class Indexer:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        embedder: EmbeddingProvider | None = None,
        *,
        chunk_tokens: int = 512,
        context_tokens: int = 128,
        scaffold: Callable[[FileKind], Collection[str]] | None = None,
    ) -> None:
        self._sessions = sessions
        self.embedder = embedder
        # The template paragraphs of each memory file (retrieval.scaffold, the current
        # template's and earlier ones'): they are not indexed.
        self.scaffold = scaffold
        self.chunk_tokens = chunk_tokens
        self.context_tokens = context_tokens

    # -- public API ----------------------------------------------------------------------
    def index_memory_file(self, user_id: str, kind: FileKind, content: str) -> IndexReport:
        """Re-index USER.md / MEMORY.md after a content change (other kinds: no-op)."""
        if not kind.indexed:
            return IndexReport(file_path=kind.filename)
        return self.index_document(user_id, kind.filename, self._own_text(kind, content))

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
        return self.index_rounds(user_id, [turn])[0]

    def index_rounds(
        self, user_id: str, rounds: Sequence[Round], *, embed: bool = True
    ) -> list[IndexReport]:
        """Index many rounds (of any sessions) with batched embedding calls and one
        transaction. All or nothing on validation: if any round is invalid nothing is
        stored and ``RoundsInvalidError.errors`` lists every bad round. An embedding
        failure does not reject anything: the rows are stored without vectors.
        ``embed=False`` stores new rows without calling the embedding API (``deferred``
        in the reports): the background worker (``retrieval.healing``) embeds them, and
        until then they are searched with BM25 — an import that must not wait for
        the embedding API."""
        validate_user_id(user_id)
        valid, errors = validate_rounds(rounds)
        if errors:
            raise RoundsInvalidError(errors, len(rounds))
        reuse: dict[str, list[float]] = {}
        embedded: dict[str, int] = {}
        for attempt in range(MAX_NEIGHBOUR_ATTEMPTS):
            docs, basis = self._round_docs(user_id, valid)
            staged = self._stage(user_id, docs, embed, reuse=reuse)
            if attempt < MAX_NEIGHBOUR_ATTEMPTS - 1:
                staged.basis = basis
            for r in staged.reports:  # what earlier attempts embedded is reused, not lost
                r.embedded += embedded.get(r.file_path, 0)
            try:
                self._apply(staged)
            except NeighbourChangedError as exc:
                # Another writer rewrote a neighbour: its new text would be overwritten
                # with the one read here, or this round's context would be stale.
                log_event(logger, "index.neighbour_changed", user_id=user_id, paths=exc.paths)
                reuse.update(staged.vectors())
                embedded = {r.file_path: r.embedded for r in staged.reports}
                continue
            break
        return staged.reports[: len(valid)]

    def _round_docs(
        self, user_id: str, valid: Sequence[OwnRound]
    ) -> tuple[list[Doc], dict[str, frozenset[tuple[int, str]]]]:
        """The docs of ``valid`` (first, in order) and of the next rounds stored after them,
        and the basis: the neighbours' stored rows they were built from."""
        own: dict[str, OwnRound] = {o.path: o for o in valid}
        # Neighbours in the database: the previous round of each (its text is the
        # context) and the next one (its context is this round, so it is re-indexed).
        wanted = {
            session_path(o.session_id, o.turn_index + d)
            for o in own.values()
            for d in (-1, 1)
            if o.turn_index + d >= 0
        } - set(own)
        # Rounds sent without a timestamp: their stored version, if any (see below).
        undated = {o.path for o in own.values() if not o.dated}
        with self._sessions() as session:
            stored = EmbeddingRepository(session, user_id).chunks_for_paths(
                sorted(wanted | undated)
            )
        by_path: dict[str, list[StoredChunk]] = {}
        for c in stored:
            by_path.setdefault(c.file_path or "", []).append(c)
        found_rounds = {
            path: found for path, cs in by_path.items() if (found := stored_round(cs)) is not None
        }
        neighbours = {path: r for path, r in found_rounds.items() if path in wanted}
        for path in undated:
            # "now" is only the default time of a new turn: the same turn re-sent with
            # the same text and no timestamp keeps its stored time (and so its rows).
            before = found_rounds.get(path)
            if before is not None and before.text == self._round_text(own[path]):
                own[path] = replace(own[path], created_at=before.created_at)

        def previous(o: OwnRound) -> OwnRound | None:
            p = session_path(o.session_id, o.turn_index - 1) if o.turn_index > 0 else ""
            return own.get(p) or neighbours.get(p)

        docs = [
            round_doc(o, previous(o), self.chunk_tokens, self.context_tokens) for o in own.values()
        ]
        for o in list(own.values()):
            after = neighbours.get(session_path(o.session_id, o.turn_index + 1))
            if after is not None:
                docs.append(round_doc(after, o, self.chunk_tokens, self.context_tokens))
        basis = _basis([c for c in stored if (c.file_path or "") in wanted], wanted)
        return docs, basis

    def _round_text(self, o: OwnRound) -> str:
        """A round's own text as ``stored_round`` rebuilds it from its rows."""
        return "\n\n".join(chunk_text(o.text, self.chunk_tokens))

    def count_missing(self, user_id: str) -> int:
        """Rows of ``user_id`` still without a vector of this indexer's model."""
        if self.embedder is None:
            return 0
        with self._sessions() as session:
            return EmbeddingRepository(session, user_id).count_missing(self.embedder.name)

    def fill_missing(self, user_id: str, batch: int = 256) -> int:
        """Embed rows stored without a vector (or by another model). Returns rows embedded."""
        if self.embedder is None:
            return 0
        done = 0
        while True:
            with self._sessions() as session:
                todo = EmbeddingRepository(session, user_id).missing_embeddings(
                    self.embedder.name, batch
                )
            if not todo:
                return done
            vectors, error = self._embed([c.chunk_text for c in todo], user_id)
            if all(v is None for v in vectors):
                log_event(
                    logger, "index.fill.failed", logging.WARNING, user_id=user_id, error=error
                )
                return done
            with transaction(self._sessions) as session:
                repo = EmbeddingRepository(session, user_id)
                repo.lock()
                got = {c.id: v for c, v in zip(todo, vectors, strict=True) if v is not None}
                stored = repo.replace_vectors(got, self.embedder.name)
            done += stored
            log_event(logger, "index.fill", user_id=user_id, embedded=stored)

    def stage_memory_file(self, user_id: str, kind: FileKind, content: str) -> StagedIndex:
        """Chunk and embed a memory file's new text without writing anything.

        The memory-file service calls this outside any lock or transaction and then
        :meth:`StagedIndex.apply` inside the one transaction that stores the file, so the
        text and its rows commit together and nobody waits on an embedding call.
        """
        validate_user_id(user_id)
        texts = chunk_text(self._own_text(kind, content), self.chunk_tokens)
        return self._stage(user_id, [Doc(kind.filename, texts, None, None)])

    # -- internals -------------------------------------------------------------------------
    def _own_text(self, kind: FileKind, content: str) -> str:
        """The file's text without the paragraphs it still shares with its template (both
        ways of indexing a memory file go through here)."""
        if self.scaffold is None:
            return content
        try:
            return drop_scaffold(content, self.scaffold(kind))
        except OSError as exc:  # no template to compare with: index everything
            log_event(logger, "index.no_template", logging.WARNING, error=str(exc))
            return content

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
    ) -> StagedIndex:
        reports = [IndexReport(file_path=d.file_path, chunks=len(d.texts)) for d in docs]
        paths = [d.file_path for d in docs]
        with self._sessions() as session:
            existing = EmbeddingRepository(session, user_id).chunks_for_paths(
                paths, with_vectors=True
            )
        model = self.embedder.name if self.embedder is not None else None
        reusable: dict[str, Any] = dict(reuse or {})
        reusable.update(
            (c.content_hash, c.vector)
            for c in existing
            if c.vector is not None and c.embedding_model == model
        )
        by_slot = {(c.file_path, c.chunk_index, c.content_hash): c for c in existing}

        kept: list[tuple[int, NewChunk]] = []  # rows expected to stay, with their vectors
        pending: list[tuple[int, NewChunk]] = []  # (report index, row without vector yet)
        for n, doc in enumerate(docs):
            for i, body in enumerate(doc.texts):
                digest = content_hash(body)
                row = NewChunk(
                    file_path=doc.file_path,
                    chunk_index=i,
                    chunk_text=body,
                    content_hash=digest,
                    created_at=doc.created_at,
                    source_ids=doc.source_ids,
                    context=doc.contexts[i] if doc.contexts else None,
                )
                current = by_slot.get((doc.file_path, i, digest))
                if current is not None and _is_fresh(current, model, doc.created_at):
                    vector = None if current.vector is None else current.vector.tolist()
                    kept.append((n, replace(row, embedding=vector, embedding_model=model)))
                    continue
                # Terms only for rows to insert, and here, not inside the transaction. A kept
                # row is only inserted if a concurrent writer replaced it meanwhile; the
                # repository makes its terms then.
                pending.append((n, replace(row, bm25_terms=encode_terms(body))))

        vectors = self._vectors_for(user_id, pending, reusable, reports, embed)
        embedded = [
            (
                n,
                replace(
                    row,
                    embedding=vectors.get(row.content_hash),
                    embedding_model=model if row.content_hash in vectors else None,
                ),
            )
            for n, row in pending
        ]
        may_change = bool(pending) or len(kept) != len(existing)
        return StagedIndex(user_id, paths, model, kept + embedded, reports, may_change)

    def _vectors_for(
        self,
        user_id: str,
        pending: Sequence[tuple[int, NewChunk]],
        reusable: dict[str, Any],
        reports: list[IndexReport],
        embed: bool = True,
    ) -> dict[str, list[float]]:
        """Vectors by content hash: reused when known, else embedded in one batched call
        (or, when not ``embed``, left to the background worker and counted as deferred)."""
        vectors: dict[str, list[float]] = {
            row.content_hash: [float(x) for x in reusable[row.content_hash]]
            for _, row in pending
            if row.content_hash in reusable
        }
        todo: dict[str, str] = {}
        for _, row in pending:
            if row.content_hash not in vectors:
                todo.setdefault(row.content_hash, row.chunk_text)
        if not todo or self.embedder is None:
            return vectors
        per_report = Counter(n for n, row in pending if row.content_hash in todo)
        if not embed:
            for n, count in per_report.items():
                reports[n].deferred += count
            return vectors
        started = time.perf_counter()
        got, error = self._embed(list(todo.values()), user_id)
        seconds = time.perf_counter() - started
        embedded = {h: v for h, v in zip(todo, got, strict=True) if v is not None}
        failed = Counter(
            n for n, row in pending if row.content_hash in todo and row.content_hash not in embedded
        )
        for n, count in per_report.items():
            reports[n].embed_seconds = seconds / len(per_report)
            reports[n].embedding_failed += failed[n]
            reports[n].embedded += count - failed[n]
            if failed[n]:
                reports[n].warnings.append(error)
        vectors.update(embedded)
        return vectors

    def _embed(self, texts: list[str], user_id: str) -> tuple[list[list[float] | None], str]:
        """One vector or None per text. An embedder with ``embed_each`` isolates bad texts;
        the rows of failed texts are stored without a vector and healed later."""
        assert self.embedder is not None
        each = getattr(self.embedder, "embed_each", None)
        try:
            if each is not None:
                results = each(texts, "passage")
            else:
                results = self.embedder.embed(texts, "passage")
            if len(results) != len(texts):
                raise EmbeddingError(f"got {len(results)} vectors for {len(texts)} texts")
        except (EmbeddingError, VectorDimensionError) as exc:
            results = [exc] * len(texts)
        vectors: list[list[float] | None] = []
        errors: list[str] = []
        kinds: list[str] = []
        for result in results:
            if isinstance(result, list):
                try:
                    pad_vector(result)  # validates length and finiteness before storing
                    vectors.append(result)
                    continue
                except VectorDimensionError as exc:
                    result = exc
            vectors.append(None)
            errors.append(str(result))
            kinds.append(type(result).__name__)
        if not errors:
            return vectors, ""
        log_event(
            logger,
            "embedding.failed",
            logging.WARNING,
            user_id=user_id,
            model=self.embedder.name,
            batch_size=len(texts),
            failed=len(errors),
            error=errors[0],
        )
        # The caller (an end user, an agent) learns what happened and the error's kind; the
        # cause, which names the embedding API's address, goes to the log above only.
        message = (
            f"embedding failed for {len(errors)} of {len(texts)} text(s), stored without "
            f"vectors (BM25 only until re-embedded; {kinds[0]})"
        )
        return vectors, message


def _is_fresh(c: StoredChunk, model: str | None, created_at: datetime | None) -> bool:
    """A row can stay as is when its vector is current (or no model is configured) and,
    for dated content, its timestamp is the requested one."""
    if created_at is not None and c.created_at != aware(created_at):
        return False
    return model is None or (c.embedding_dim is not None and c.embedding_model == model)


def _check_path(file_path: str) -> None:
    if not isinstance(file_path, str) or not file_path.strip() or len(file_path) > 255:
        raise InvalidContentError("file_path must be a non-empty string of at most 255 characters")
    if "\x00" in file_path:
        raise InvalidContentError("file_path must not contain NUL characters")
