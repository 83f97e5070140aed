"""Per-user index snapshots: a large user's first search without rebuilding its index.

A cold load of 10k rows spent its time de-TOASTing padded vectors, building a Python object
per row and counting BM25 terms (docs/BENCHMARKS.md). A snapshot is the conversation part of
a loaded index as one binary value — unit vectors at native length as one float32 matrix,
BM25 postings as flat arrays, texts joined — written off the request path after a large
load. The next cold load (a restart, an eviction, another replica) reads that one value and
then applies what changed since through the cache's usual reconciliation: rows are
immutable, so every row the snapshot holds is exact while it lives, rows above ``max_id``
are loaded, and rows deleted since are found by counting.

Only conversation rows go in. They are append-only in practice, while memory files and
documents are rewritten often and stay read from their rows. Deleting a conversation row
drops the user's snapshots in the same transaction, and a snapshot is only stored while
every row in it exists (both under the user's advisory lock), so a snapshot never keeps
a turn's text after its row is gone. A snapshot made under other tokeniser rules or
another format is ignored and replaced.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import log_event, log_failure
from memstrata.retrieval import terms as bm25_terms
from memstrata.retrieval.bm25_index import BM25Index
from memstrata.retrieval.bm25_postings import BM25Arrays
from memstrata.retrieval.gcpause import cyclic_gc_paused
from memstrata.retrieval.jobs import KeyedJobs
from memstrata.retrieval.records import is_conversation_path
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.rows import Row
from memstrata.retrieval.snapshot_repository import SnapshotRepository, StoredSnapshot

logger = logging.getLogger(__name__)

# Bump whenever encode() changes what it writes. 2: unit vectors from the one
# normalisation (``vector_index.normalise``); version 1 mixed two that rounded differently.
# 3: each row's ``context_chars`` (a hit's ``explain`` says how much is context).
FORMAT_VERSION = 3
# A write waits until no index load has run for this long (loads come in bursts) ...
SETTLE_S = 1.0
# ... but not longer than this, so a busy process still gets its snapshots.
MAX_SETTLE_WAIT_S = 30.0
# A payload above this is not stored (PostgreSQL's bytea limit is 1 GiB; 10k rows of a
# 384-d model are ~19 MB).
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024
_SEP = "\x00"  # PostgreSQL text cannot hold NUL, so no stored string contains it


def format_key() -> str:
    """Names the payload format and the BM25 rules its postings were made under."""
    return f"{FORMAT_VERSION}.{bm25_terms.signature()}"


def model_key(model: str | None) -> str:
    return model or ""


def should_write(uncovered_rows: int, min_rows: int) -> bool:
    """Write a snapshot once this many conversation rows of a loaded index are not in the
    stored one (all of them when there is none); 0 or less switches snapshots off."""
    return min_rows > 0 and uncovered_rows >= min_rows


@dataclass(frozen=True)
class Contents:
    rows: list[Row]  # in id order
    bm25: BM25Arrays[int]  # keys are the rows' ids
    vector_ids: list[int]
    vectors: npt.NDArray[np.float32]  # unit rows, one per vector id
    max_id: int


class SnapshotError(ValueError):
    """A stored payload that cannot be read; the cache loads from the rows instead."""


def encode(
    rows: Sequence[Row],
    terms: Sequence[Sequence[str]],
    vector_ids: Sequence[int],
    vectors: npt.NDArray[np.float32],
) -> bytes:
    """One payload for ``rows`` (id order), their BM25 terms, and the unit vectors of
    ``vector_ids``. Builds the postings here, off the request path."""
    if not all(r.source == "conversation" for r in rows):
        raise ValueError("only conversation rows go into a snapshot")
    index: BM25Index[int] = BM25Index()
    index.add_many([(r.id, t) for r, t in zip(rows, terms, strict=True)])
    bm25 = index.to_arrays()
    arrays: dict[str, npt.NDArray[np.generic]] = {
        "ids": np.array([r.id for r in rows], dtype=np.int64),
        "created": np.array([r.created_at for r in rows], dtype=np.float64),
        "chunk_index": np.array(
            [-1 if r.chunk_index is None else r.chunk_index for r in rows], dtype=np.int64
        ),
        "context_chars": np.array([r.context_chars for r in rows], dtype=np.int64),
        "paths": _blob([r.file_path or "" for r in rows]),
        "texts": _blob([r.text for r in rows]),
        "models": _blob([r.model or "" for r in rows]),
        "source_ids": np.frombuffer(json.dumps([r.source_ids for r in rows]).encode(), np.uint8),
        "bm25_terms": _blob(bm25.terms),
        "bm25_doc_terms": _blob(bm25.doc_terms),
        "bm25_lengths": bm25.lengths,
        "bm25_starts": bm25.starts,
        "bm25_slots": bm25.slots,
        "bm25_tfs": bm25.tfs,
        "vector_ids": np.array(vector_ids, dtype=np.int64),
        "vectors": np.ascontiguousarray(vectors, dtype=np.float32),
    }
    out = io.BytesIO()
    np.savez(out, **arrays)  # type: ignore[arg-type]
    return out.getvalue()


def decode(payload: bytes, max_id: int) -> Contents:
    """The payload's contents; raises ``SnapshotError`` for anything malformed."""
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            a = {name: data[name] for name in data.files}
        ids = a["ids"].tolist()
        n = len(ids)
        paths = _unblob(a["paths"], n)
        texts = _unblob(a["texts"], n)
        models = _unblob(a["models"], n)
        source_ids = json.loads(a["source_ids"].tobytes())
        created = a["created"].tolist()
        chunk_index = a["chunk_index"].tolist()
        context_chars = a["context_chars"].tolist()
        if not (len(created) == len(chunk_index) == len(source_ids) == len(context_chars) == n):
            raise SnapshotError("row columns of different lengths")
        if not all(map(is_conversation_path, paths)):
            raise SnapshotError("a snapshot row is not a conversation row")
        conversation = "conversation"  # all a snapshot holds (checked above)
        rows = [
            Row(i, p, None if c < 0 else c, t, at, conversation, tuple(s), m or None, x)
            for i, p, c, t, at, s, m, x in zip(
                ids,
                paths,
                chunk_index,
                texts,
                created,
                source_ids,
                models,
                context_chars,
                strict=True,
            )
        ]
        starts = a["bm25_starts"]
        bm25 = BM25Arrays(
            keys=ids,
            doc_terms=_unblob(a["bm25_doc_terms"], n),
            lengths=a["bm25_lengths"],
            terms=_unblob(a["bm25_terms"], len(starts) - 1),
            starts=starts,
            slots=a["bm25_slots"],
            tfs=a["bm25_tfs"],
        )
        vector_ids = a["vector_ids"].tolist()
        vectors = a["vectors"]
        if vectors.ndim != 2 or len(vectors) != len(vector_ids):
            raise SnapshotError("vectors and their ids differ in number")
    except SnapshotError:
        raise
    except (ValueError, KeyError, OSError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise SnapshotError(f"unreadable index snapshot: {exc}") from exc
    return Contents(rows, bm25, vector_ids, vectors, max_id)


def _blob(strings: Sequence[str]) -> npt.NDArray[np.uint8]:
    joined = _SEP.join(strings)
    if joined.count(_SEP) != max(len(strings) - 1, 0):
        raise ValueError("a string to snapshot holds a NUL character")
    return np.frombuffer(joined.encode(), dtype=np.uint8)


def _unblob(blob: npt.NDArray[np.uint8], count: int) -> list[str]:
    if count == 0:
        return []
    parts = blob.tobytes().decode().split(_SEP)
    if len(parts) != count:
        raise SnapshotError(f"expected {count} strings, found {len(parts)}")
    return parts


# Takes an ``Export`` from a live index under its lock (``UserIndex.export``); None when
# there is nothing to write any more. It finds the index when it runs rather than holding
# it: a queued job can wait a long time (``_wait_for_quiet``, and the jobs ahead of it).
Exporter = Callable[[], "Export | None"]
# Whether a queued write is still worth making (its index still held): asked while the
# job waits, so a job for an evicted index gives up its turn instead of waiting it out.
Wanted = Callable[[], bool]


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Export:
    """What a writer took from a loaded index under its lock (cheap: references)."""

    user_id: str
    model: str | None
    rows: list[Row]
    terms: list[Sequence[str]]
    vector_ids: list[int]
    vectors: npt.NDArray[np.float32]
    max_id: int


class SnapshotWriter:
    """Writes snapshots on one background thread, one pending job per user and model.

    ``export`` runs on that thread and takes what it needs from the live index (the
    caller passes a function that looks the index up and takes its lock); encoding and
    the database write run without the lock. Failures are logged with the user and never
    reach a request.
    """

    def __init__(
        self, sessions: sessionmaker[Session], min_rows: int, settle_s: float = SETTLE_S
    ) -> None:
        self.sessions = sessions
        self.min_rows = min_rows
        self.settle_s = settle_s
        self._loading = 0
        self._last_load_end = 0.0
        self._quiet = threading.Condition()
        self._jobs: KeyedJobs[tuple[str, str | None], tuple[Exporter, Wanted]] = KeyedJobs(
            "memstrata-index-snapshots", self._job, self._failed
        )
        self.written = 0
        self.failed = 0

    def schedule(
        self, user_id: str, model: str | None, export: Exporter, wanted: Wanted = _always
    ) -> None:
        self._jobs.submit((user_id, model), (export, wanted))

    @contextmanager
    def loading(self) -> Iterator[None]:
        """Marks an index load: writes wait until loads have been quiet for ``settle_s``."""
        with self._quiet:
            self._loading += 1
        try:
            yield
        finally:
            with self._quiet:
                self._loading -= 1
                self._last_load_end = time.monotonic()
                self._quiet.notify_all()

    def _wait_for_quiet(self, wanted: Wanted) -> bool:
        """A write competes with loads for the CPU and the database (a first search right
        after a write took ~2× as long), and loads come in bursts (a restart, a deploy):
        let a burst finish, but never wait longer than ``MAX_SETTLE_WAIT_S``. False as
        soon as the write is not ``wanted`` any more (asked outside ``_quiet``: it may
        take the cache's lock)."""
        give_up = time.monotonic() + MAX_SETTLE_WAIT_S
        while wanted():
            with self._quiet:
                now = time.monotonic()
                quiet_for = now - self._last_load_end
                if now >= give_up or (self._loading == 0 and quiet_for >= self.settle_s):
                    return True
                wait = self.settle_s - quiet_for if self._loading == 0 else self.settle_s
                self._quiet.wait(timeout=min(max(wait, 0.01), give_up - now))
        return False

    def idle(self, timeout: float = 30.0) -> bool:
        """Wait until no job is pending (tests, benchmarks); False on timeout."""
        return self._jobs.idle(timeout)

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the queued writes, waiting at most ``timeout_s`` for them."""
        self._jobs.close(timeout_s)

    def _job(self, _: tuple[str, str | None], job: tuple[Exporter, Wanted]) -> None:
        export, wanted = job
        if self._wait_for_quiet(wanted):
            self._write(export)

    def _failed(self, key: tuple[str, str | None], exc: Exception) -> None:
        log_failure(logger, "index.snapshot.failed", exc, user_id=key[0])
        self.failed += 1

    def _write(self, export: Exporter) -> None:
        began = time.perf_counter()
        taken = export()
        if taken is None or not taken.rows:
            return
        # The vectors and texts alone are a lower bound of the payload: a user whose
        # snapshot cannot be stored is not encoded again every MIN_ROWS new turns.
        at_least = taken.vectors.nbytes + sum(len(r.text) for r in taken.rows)
        payload = b""
        if at_least <= MAX_PAYLOAD_BYTES:
            with cyclic_gc_paused():  # as for a load: many small objects, none in a cycle
                payload = encode(taken.rows, taken.terms, taken.vector_ids, taken.vectors)
        if not payload or len(payload) > MAX_PAYLOAD_BYTES:
            log_event(
                logger,
                "index.snapshot.too_large",
                logging.WARNING,
                user_id=taken.user_id,
                bytes=len(payload) or at_least,
                max_bytes=MAX_PAYLOAD_BYTES,
            )
            return
        stored = StoredSnapshot(format_key(), taken.max_id, len(taken.rows), payload)
        with transaction(self.sessions) as session:
            EmbeddingRepository(session, taken.user_id).lock()
            saved = SnapshotRepository(session, taken.user_id).save_snapshot(
                model_key(taken.model), stored, [r.id for r in taken.rows]
            )
        if saved:
            self.written += 1
        log_event(
            logger,
            "index.snapshot.saved" if saved else "index.snapshot.skipped",
            user_id=taken.user_id,
            rows=len(taken.rows),
            bytes=len(payload),
            ms=round((time.perf_counter() - began) * 1000, 1),
        )
