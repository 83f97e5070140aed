"""Staged index writes: the rows some paths should hold, built outside any transaction and
applied inside the caller's (``Indexer`` stages; the memory-file service applies USER/MEMORY
rows in the transaction that stores the file).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from memstrata.logs import log_event
from memstrata.retrieval.records import NewChunk, StoredChunk
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rounds import aware

# The indexer's events (index.updated) keep the indexer's logger name.
logger = logging.getLogger("memstrata.retrieval.indexer")


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


class NeighbourChangedError(Exception):
    """A round's neighbour was rewritten between staging and applying (internal)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(", ".join(paths))
        self.paths = paths


def basis_of(
    chunks: Sequence[StoredChunk], paths: Iterable[str]
) -> dict[str, frozenset[tuple[int, str]]]:
    """Each path's stored (chunk index, content hash) pairs (empty for a path without rows)."""
    found: dict[str, set[tuple[int, str]]] = {p: set() for p in paths}
    for c in chunks:
        found.setdefault(c.file_path or "", set()).add((c.chunk_index or 0, c.content_hash))
    return {p: frozenset(v) for p, v in found.items()}


@dataclass
class StagedIndex:
    """The rows some paths should hold, chunked and embedded; nothing written yet.

    :meth:`apply` runs in the caller's transaction. It re-reads the paths under the user's
    advisory lock, keeps present rows that match a wanted (position, hash) and are fresh
    (giving a kept row without a vector the one staged for it, if any), inserts the rest
    with the vectors staged here (or, for a row staged without one, the vector of a
    present row of the same text, copied in the database) and deletes the others, so a
    concurrent writer between staging and applying costs at most a re-insert, never a
    lost row.
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
    # (path, content hash) of the texts whose embedding failed, here or in an earlier
    # staging of the same call (``count_earlier``), and that nothing embedded since: each
    # counted once in its path's ``embedding_failed``.
    failed: set[tuple[str, str]] = field(default_factory=set)
    # Run by ``committed``: a memory-file write's budget (``retrieval.file_budget``) counts
    # and logs the rows it left to the background worker, and wakes it.
    after_commit: Callable[[], None] | None = None

    def committed(self) -> None:
        """The caller's transaction that applied these rows has committed."""
        if self.after_commit is not None:
            self.after_commit()

    def apply(self, session: Session) -> None:
        """Write the staged rows; ``NeighbourChangedError`` (nothing written) when a path
        of ``basis`` changed since staging: re-stage from what is stored now."""
        repo = EmbeddingRepository(session, self.user_id)
        repo.lock()
        if self.basis:
            now = basis_of(repo.chunks_for_paths(sorted(self.basis)), self.basis)
            if now != self.basis:
                changed = sorted(p for p in self.basis if now[p] != self.basis[p])
                raise NeighbourChangedError(changed)
        present = repo.chunks_for_paths(self.paths)
        by_slot = {(c.file_path, c.chunk_index, c.content_hash): c for c in present}
        report_of = {path: n for n, path in enumerate(self.paths)}
        keep_ids: set[int] = set()
        inserts: list[NewChunk] = []
        fill: dict[int, list[float]] = {}  # kept rows given the vector staged for them
        for n, row in self.rows:
            current = by_slot.get((row.file_path, row.chunk_index, row.content_hash))
            if (
                current is not None
                and current.id not in keep_ids
                and is_fresh(current, row.created_at)
            ):
                keep_ids.add(current.id)
                self.reports[n].unchanged += 1
                if row.embedding is not None and not has_vector(current, self.model):
                    fill[current.id] = list(row.embedding)
            else:
                inserts.append(row)
                self.reports[n].inserted += 1
        stale = [c for c in present if c.id not in keep_ids]
        for c in stale:
            self.reports[report_of[c.file_path or ""]].deleted += 1
        gone = [c.id for c in stale]
        if inserts or stale:
            copies = with_sources(inserts, present, self.model)
            if any(source is not None for source, _ in copies):
                # A source may sit where a row goes (an entry moved down by one inserted
                # above it): parked, copied from, then deleted.
                repo.park(gone)
                repo.insert_copies(copies)
                repo.delete_ids(gone)
            else:
                repo.delete_ids(gone)
                repo.insert(inserts)
            repo.bump_generation()
        if fill and self.model is not None:
            repo.replace_vectors(fill, self.model)
        self._log()

    def count_earlier(self, earlier: StagedIndex) -> None:
        """Count in the reports what an earlier staging of the same paths embedded (a
        re-staging reuses its vectors, ``vectors``, instead of embedding again) and the
        texts whose embedding failed there: a failure lost with its staging left a report
        that said nothing failed. A text this staging embedded, or whose failure it
        counted already, is not counted again."""
        done = {r.file_path: r for r in earlier.reports}
        for r in self.reports:
            before = done.get(r.file_path)
            r.embedded += before.embedded if before is not None else 0
        carried = earlier.failed - self.failed
        if not carried:  # the usual case; under the lock for a rebuilt last staging
            return
        report_of = dict(zip(self.paths, self.reports, strict=True))
        mine = {r.content_hash for _, r in self.rows if r.embedding is not None}
        for path, digest in sorted(carried):
            report = report_of.get(path)
            if report is None or digest in mine:
                continue
            report.embedding_failed += 1
            self.failed.add((path, digest))
            said = done[path].warnings if path in done else []
            report.warnings.extend(w for w in said if w not in report.warnings)

    def count_embedded_after(
        self, rows: Sequence[StoredChunk], embedded: Collection[int], error: str, seconds: float
    ) -> None:
        """Count the rows this staging stored without a vector (``deferred``) and that were
        embedded after its commit (``Indexer._embed_deferred``), ``rows`` being those still
        there: none is deferred any more. Each is embedded (a text whose earlier failure was
        counted is no longer a failure) or failed (counted once per text), the row then left
        to the background worker; a row replaced meanwhile is its new writer's."""
        report_of = dict(zip(self.paths, self.reports, strict=True))
        touched = {c.file_path or "" for c in rows} & set(report_of)
        for r in self.reports:
            r.deferred = 0
        for c in rows:
            report = report_of.get(c.file_path or "")
            if report is None:
                continue
            key = (c.file_path or "", c.content_hash)
            if c.id in embedded:
                report.embedded += 1
                if key in self.failed:
                    self.failed.discard(key)
                    report.embedding_failed -= 1
                continue
            if key not in self.failed:
                self.failed.add(key)
                report.embedding_failed += 1
            if error and error not in report.warnings:
                report.warnings.append(error)
        for path in touched:
            report_of[path].embed_seconds += seconds / len(touched)

    def vectors(self) -> dict[str, list[float]]:
        """The vectors staged here by content hash (reused by a re-staging)."""
        return {r.content_hash: list(r.embedding) for _, r in self.rows if r.embedding is not None}

    def apply_unchanged(self) -> None:
        """Nothing to write: every staged row was already stored."""
        for n, _ in self.rows:
            self.reports[n].unchanged += 1
        self._log()

    def _log(self) -> None:
        # One line per write at INFO, however many rounds it held: a line per row made an
        # import of 10k rounds 10k lines, two thirds of a busy server's log. The per-file
        # lines stay at DEBUG.
        for r in self.reports:
            log_event(
                logger,
                "index.updated.file",
                logging.DEBUG,
                user_id=self.user_id,
                file_path=r.file_path,
                chunks=r.chunks,
                inserted=r.inserted,
                deleted=r.deleted,
                embedded=r.embedded,
                embedding_failed=r.embedding_failed,
            )
        if not self.reports:
            return
        single = self.reports[0].file_path if len(self.reports) == 1 else None
        log_event(
            logger,
            "index.updated",
            user_id=self.user_id,
            file_path=single,
            files=len(self.reports),
            chunks=sum(r.chunks for r in self.reports),
            inserted=sum(r.inserted for r in self.reports),
            deleted=sum(r.deleted for r in self.reports),
            embedded=sum(r.embedded for r in self.reports),
            embedding_failed=sum(r.embedding_failed for r in self.reports),
        )


def is_fresh(c: StoredChunk, created_at: datetime | None) -> bool:
    """A row of the wanted text can stay when, for dated content, its timestamp is the
    requested one. With or without a vector: a row still waiting for one (a background
    import, a failed or deferred embedding) is kept, never replaced by a row of the same
    text — that threw away the worker's claim on it and made a client's retry of the
    same batch answer "inserted" for every row. A write that embeds gives it its vector
    in place (``StagedIndex.apply``); otherwise the worker does."""
    return created_at is None or c.created_at == aware(created_at)


def has_vector(c: StoredChunk, model: str | None) -> bool:
    """Whether a stored row holds a vector of ``model`` (none without a model)."""
    return model is not None and c.embedding_dim is not None and c.embedding_model == model


def with_sources(
    rows: Sequence[NewChunk], present: Sequence[StoredChunk], model: str | None
) -> list[tuple[int | None, NewChunk]]:
    """Each row to insert, with the id of a present row whose vector it takes (the row
    has none of its own, and that row holds the same text with a vector of ``model``):
    text that only moved, or a kept row a concurrent writer replaced, is never embedded
    or sent again. None: the row is inserted as it is."""
    by_hash = {c.content_hash: c.id for c in present if has_vector(c, model)}
    return [(by_hash.get(r.content_hash) if r.embedding is None else None, r) for r in rows]
