"""Self-healing vectors: a background worker that re-embeds what the API missed.

Rows stored without a vector (the API was down, hung or timed out during the write), with
another model's vector (a model change) or with a vector of the model that has a wrong
length (``wrong_lengths``) are re-embedded as soon as the API answers again, for every
user, without a restart or a manual command. The work queue is the
``memory_embeddings`` table itself (:mod:`memstrata.retrieval.queue`): rows are leased
with ``FOR UPDATE SKIP LOCKED``, so several processes can run a worker and none embeds a
row twice. A running worker records its token with each claim, the key of an advisory lock
it holds (:mod:`memstrata.retrieval.claimer`): the claims of a worker that died are taken
back by the next round of any worker, and a stopping worker gives its rows back, instead
of both waiting out the lease. A text the API rejects (HTTP 4xx) — or that keeps failing
while other texts succeed, ``max_attempts`` times — is marked with the error and never
retried.

Embedding happens outside any transaction; the vectors are written back per user under
the user's lock as new rows (rows are immutable, see the repository), skipping rows a
writer replaced meanwhile.

The worker also watches the API for the operator: it embeds a probe text when it starts
(``embedding.unreachable_at_start`` / ``embedding.configuration_refused`` when that fails:
a wrong URL or ``dimensions`` otherwise showed only once traffic came), and again when it
has nothing to claim while a circuit waits for its probe, so a circuit closes, and
``/readyz`` says so, when the API is back, without traffic. And it compares the API's
length with the length most stored vectors of the model have
(:mod:`memstrata.retrieval.length_watch`): a change across a restart used to turn semantic
search off with no signal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import psycopg
from sqlalchemy import Engine
from sqlalchemy.exc import DataError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.errors import EmbeddingError, EmbeddingRejectedError, VectorDimensionError
from memstrata.logs import describe, log_event, log_failure
from memstrata.retrieval import claimer, queue
from memstrata.retrieval.embeddings import (
    EmbeddingKind,
    EmbeddingLengthError,
    EmbeddingOutageError,
    OpenAICompatibleEmbedder,
)
from memstrata.retrieval.length_watch import LengthWatch
from memstrata.retrieval.repository import EmbeddingRepository
from memstrata.retrieval.vector import pad_vector

logger = logging.getLogger(__name__)

# A claimed row is someone's for this long; a worker that dies mid-batch loses its lease.
# The fallback: a dead worker's claims end at once when its lock is gone (claimer).
LEASE_S = 120.0
# A claim whose every text the API refused: the worker pauses this long, doubling up to
# REFUSED_PAUSE_MAX_S while it goes on (see _refused_whole).
REFUSED_PAUSE_S = 60.0
REFUSED_PAUSE_MAX_S = 900.0
# During such a pause the probe text is tried this often, and the claim's rows are given
# back for this long: once the configuration is fixed, healing resumes within it, not at
# the end of a pause that may have grown to 15 minutes.
RESUME_PROBE_S = 10.0
# Embedded when every text of a claim was refused, to tell a refused request from refused
# texts: any API that works embeds it.
PROBE_TEXT = "memory"
# ``start`` waits this long at most for the start-up probe's answer, so a server's first
# ``/readyz`` already knows whether the API answers (a hung API delays the start this much).
START_PROBE_WAIT_S = 2.0


def start_failure(error: EmbeddingError) -> tuple[str, str]:
    """The event to log when the start-up probe fails with ``error``, and what to check."""
    if isinstance(error, EmbeddingLengthError):
        return (
            "embedding.configuration_refused",
            "the model's `dimensions` in MEMSTRATA_EMBEDDING_MODELS (or the model the API "
            "serves under this name)",
        )
    if isinstance(error, EmbeddingRejectedError):
        return (
            "embedding.configuration_refused",
            "the model's `name` and input types in MEMSTRATA_EMBEDDING_MODELS (or "
            "MEMSTRATA_EMBEDDING_MODEL): the API refused the probe text",
        )
    return (
        "embedding.unreachable_at_start",
        "the model's `base_url` and `api_key` in MEMSTRATA_EMBEDDING_MODELS (or "
        "MEMSTRATA_EMBEDDING_BASE_URL / _API_KEY), and that the embedding server runs",
    )


def sort_results(
    todo: Sequence[queue.Claimed], results: Sequence[object], max_attempts: int
) -> tuple[dict[int, list[float]], list[tuple[int, str | None]], list[int]]:
    """What one claim's embedding answers mean for its rows: the usable ``vectors`` by row
    id; the ``failures`` (row id, the error when the row is given up on, else ``None``: one
    more attempt counted); the rows to ``release`` uncounted, because the API was down
    (an outage, or no text of the claim succeeded) and it was not the text's fault."""
    vectors: dict[int, list[float]] = {}
    failures: list[tuple[int, str | None]] = []
    release: list[int] = []
    any_success = any(isinstance(r, list) for r in results)
    for claimed, result in zip(todo, results, strict=True):
        if isinstance(result, list):
            try:
                pad_vector(result)
            except VectorDimensionError as exc:
                failures.append((claimed.id, f"unusable vector: {exc}"))
            else:
                vectors[claimed.id] = result
        elif isinstance(result, EmbeddingRejectedError):
            failures.append((claimed.id, str(result)))
        elif isinstance(result, EmbeddingOutageError) or not any_success:
            release.append(claimed.id)
        elif claimed.attempts + 1 >= max_attempts:
            failures.append(
                (claimed.id, f"gave up after {claimed.attempts + 1} attempts: {result}")
            )
        else:
            failures.append((claimed.id, None))
    return vectors, failures, release


@dataclass
class HealReport:
    claimed: int = 0
    embedded: int = 0
    failed: int = 0
    given_up: int = 0
    released: int = 0


class VectorHealer:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        embedder: OpenAICompatibleEmbedder,
        *,
        batch: int = 32,
        interval_s: float = 2.0,
        max_attempts: int = 5,
        on_caught_up: Callable[[str], None] | None = None,
        model_live_s: float = queue.MODEL_LIVE_S,
    ) -> None:
        self._sessions = sessions
        # Called with a user whose last waiting row just got its vector (the runtime warms
        # that user's index: an import with deferred embedding is then ready to search).
        self.on_caught_up = on_caught_up
        self.embedder = embedder
        self.batch = batch
        self.interval_s = interval_s
        self.max_attempts = max_attempts
        # Whom the claims serve next; kept between runs (run_once is called by one thread).
        self._turns = queue.PendingUsers()
        # Rows whose vector has a wrong length are found by reading the table (no index
        # covers the length), so they are looked for once per process and per rule
        # (``wrong_lengths``: the client's length changed), until none is left.
        self._relength = queue.PendingUsers()
        self._lengths_checked: queue.WrongLength | None = None
        self.lengths = LengthWatch(sessions, embedder, self._probe)
        self._probed = threading.Event()  # the start-up probe has its answer
        self._start_failed_at: float | None = None  # time.monotonic()
        self._next_idle_probe = 0.0
        self.model_live_s = model_live_s
        self._target: str | None = None  # the model the vectors move to, last we looked
        self._told_not_running = False
        self._paused_until = 0.0  # time.monotonic(); see _refused_whole
        self._pause_s = 0.0
        self._next_probe = 0.0  # time.monotonic() of the next probe during a pause
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # Held while the worker runs (start .. stop); a healer driven by run_once alone
        # claims on the lease. No engine to connect with: the lease alone too.
        bind = sessions.kw.get("bind")
        self.claimer = (
            claimer.ClaimerLock(partial(claimer.outside_pool, bind))
            if isinstance(bind, Engine)
            else None
        )

    # -- one round ---------------------------------------------------------------------
    def run_once(self) -> HealReport:
        """Claim one batch, embed it, write back what worked, record what did not."""
        report = HealReport()
        with transaction(self._sessions) as session:  # even while the API fails: we run
            target = queue.announce_model(session, self.embedder.name, self.model_live_s)
        self._note_target(target)
        if not self.embedder.breaker.allow_peek():
            return report  # the API is failing: don't take rows another worker could do
        if self._still_paused():
            return report  # the API refused every text of the last claim (_refused_whole)
        self._note_reachable()
        self.lengths.follow()
        if self._stop.is_set():
            return report  # stopping: claim nothing that stop() would not give back
        token = None if self.claimer is None else self.claimer.token()
        wrong: list[queue.Claimed] = []
        with transaction(self._sessions) as session:
            self._reclaim(session)
            todo = queue.claim(
                session,
                self.embedder.name,
                self.batch,
                LEASE_S,
                users=self._turns,
                missing_only=target != self.embedder.name,
                claimer=token,
            )
            if len(todo) < self.batch and target == self.embedder.name:
                wrong = self._claim_wrong_length(session, self.batch - len(todo), token)
                todo += wrong
        if token is not None and todo and todo[0].claimed_by is None and self.claimer is not None:
            self.claimer.lost()  # the claim found the lock gone: rows on the lease alone
        report.claimed = len(todo)
        if not todo:
            self._idle_probe()
            return report
        results = self.embedder.embed_each([c.chunk_text for c in todo], "passage")
        if self._refused_whole(todo, results):
            report.released = len(todo)
            return report
        vectors, failures, release = sort_results(todo, results, self.max_attempts)
        report.embedded, unwritable = self._write_back(todo, vectors)
        self.lengths.relengthed(sum(1 for c in wrong if c.id in vectors))
        failures.extend(unwritable)
        with transaction(self._sessions) as session:
            held = todo[0].claimed_by
            queue.release(session, release, self.embedder.breaker.retry_after_s(), held)
            queue.record_failures(session, failures, self.interval_s * 5, held)
        report.released = len(release)
        report.failed = sum(1 for _, e in failures if e is None)
        report.given_up = sum(1 for _, e in failures if e is not None)
        if report.failed or report.given_up:
            log_event(
                logger,
                "embedding.heal.failed",
                logging.WARNING,
                model=self.embedder.name,
                batch_size=len(todo),
                failed=report.failed,
                given_up=report.given_up,
                users=sorted({c.user_id for c in todo if c.id not in vectors}),
            )
        if report.embedded:
            log_event(logger, "embedding.healed", model=self.embedder.name, rows=report.embedded)
        return report

    def _reclaim(self, session: Session) -> None:
        """Take back the claims of workers that are gone (``claimer.reclaim``)."""
        users = claimer.reclaim(session)
        if not users:
            return
        self._turns.expire()  # their users were left out of the kept lists while leased
        self._relength.expire()
        log_event(
            logger,
            "embedding.heal.reclaimed",
            logging.WARNING,
            model=self.embedder.name,
            rows=len(users),
            users=sorted(set(users)),
            cause="the worker that claimed them is gone (its process died or stopped, or "
            "its database connection ended) before its lease ran out",
        )

    def _claim_wrong_length(
        self, session: Session, n: int, token: int | None
    ) -> list[queue.Claimed]:
        """Up to ``n`` rows with a vector of this model of a wrong length, until a claim
        finds none for the current rule."""
        wrong = self.lengths.rule()
        if wrong == self._lengths_checked:
            return []
        found = queue.claim(
            session,
            self.embedder.name,
            n,
            LEASE_S,
            users=self._relength,
            wrong_length=wrong,
            claimer=token,
        )
        if not found:
            self._lengths_checked = wrong
            self.lengths.none_left()
            return []
        log_event(
            logger,
            "embedding.heal.wrong_length",
            logging.WARNING,
            model=self.embedder.name,
            dimensions=self.embedder.dimensions,
            rows=len(found),
            users=sorted({c.user_id for c in found}),
        )
        return found

    def _refused_whole(self, todo: list[queue.Claimed], results: Sequence[object]) -> bool:
        """Every text of the claim refused (a 4xx about the input). Either the API refuses
        the request, not the texts — a model name it answers with 400, an input format it
        does not take — or these texts are refused on their own (a claim may hold one
        user's rows only). ``PROBE_TEXT`` tells which. Refused too: marking each row as
        never to be retried would leave them without vectors after the configuration is
        fixed, so the rows are given back and the worker pauses (60 s, doubling to 15 min
        while it goes on; it ends early once the probe is embedded, tried every
        ``RESUME_PROBE_S``). Taken: the texts are marked as refused like any other, and
        other users' rows are embedded on the next round, not after a pause."""
        if not results or not all(isinstance(r, EmbeddingRejectedError) for r in results):
            self._pause_s = 0.0
            return False
        refusal = self._probe()
        if refusal is None:
            self._pause_s = 0.0
            return False
        self._pause_s = min(max(REFUSED_PAUSE_S, self._pause_s * 2), REFUSED_PAUSE_MAX_S)
        self._paused_until = time.monotonic() + self._pause_s
        self._next_probe = time.monotonic() + RESUME_PROBE_S
        with transaction(self._sessions) as session:
            queue.release(
                session,
                [c.id for c in todo],
                min(self._pause_s, RESUME_PROBE_S),
                todo[0].claimed_by,
            )
        log_event(
            logger,
            "embedding.heal.all_refused",
            logging.WARNING,
            model=self.embedder.name,
            batch_size=len(todo),
            error=str(results[0]),
            probe_error=refusal,
            paused_s=self._pause_s,
        )
        return True

    def _still_paused(self) -> bool:
        """Within a pause after a refused claim, unless the probe text is embedded now
        (tried every ``RESUME_PROBE_S``): the configuration was fixed."""
        now = time.monotonic()
        if now >= self._paused_until:
            return False
        if now < self._next_probe:
            return True
        self._next_probe = now + RESUME_PROBE_S
        if self._probe() is not None:
            return True
        self._paused_until = 0.0
        log_event(logger, "embedding.heal.resumed", model=self.embedder.name)
        return False

    def _probe(self, kind: EmbeddingKind = "passage") -> str | None:
        """None when the API embeds ``PROBE_TEXT``; else why not. Any failure counts:
        the claim's rows are then given back, never marked."""
        error = self._probe_error(kind)
        return None if error is None else str(error)

    def _probe_error(self, kind: EmbeddingKind = "passage") -> EmbeddingError | None:
        try:
            self.embedder.embed([PROBE_TEXT], kind)
        except EmbeddingError as exc:
            return exc
        return None

    def _start_probe(self) -> None:
        """Once, when the worker starts: does the API answer? A wrong URL, key, model name
        or ``dimensions`` otherwise showed only once a write or a search failed, and
        ``/readyz`` said "ok" until then (it says "degraded" until the API answered)."""
        try:
            if self.embedder.answered:
                return
            error = self._probe_error()
            if error is None:
                return
            self._start_failed_at = time.monotonic()
            event, check = start_failure(error)
            log_event(
                logger,
                event,
                logging.WARNING,
                model=self.embedder.name,
                url=self.embedder.shown_url,
                error=str(error),
                check=check,
                effect="until the API answers, texts are stored without vectors (embedded "
                "later) and searches use BM25 only; /readyz reports vectors: degraded",
            )
        except Exception:  # a bug must not kill the worker before it starts
            logger.exception("embedding.heal.crashed")
        finally:
            self._probed.set()

    def _note_reachable(self) -> None:
        """After a failed start-up probe: log once when the API first answers."""
        if self._start_failed_at is not None and self.embedder.answered:
            log_event(
                logger,
                "embedding.reachable",
                model=self.embedder.name,
                url=self.embedder.shown_url,
                after_s=round(time.monotonic() - self._start_failed_at, 1),
            )
            self._start_failed_at = None

    def _idle_probe(self) -> None:
        """Nothing to claim: ask the API when nothing else would. A circuit whose cool-down
        has passed waits for a request to probe it, so without traffic it stayed open, and
        ``/readyz`` degraded, after the API was back; and an API that has not answered in
        this process yet is tried every ``RESUME_PROBE_S`` (an API that came up after
        memstrata)."""
        embedder = self.embedder
        if embedder.breaker.state != "closed":
            if embedder.breaker.allow_peek():
                self._probe()
        elif not embedder.answered and time.monotonic() >= self._next_idle_probe:
            self._next_idle_probe = time.monotonic() + RESUME_PROBE_S
            self._probe()
        query = embedder.query_breaker
        if query is not embedder.breaker and query.state != "closed" and query.allow_peek():
            self._probe("query")

    def follow_lengths(self) -> None:
        """The API's length against the stored one now (:meth:`LengthWatch.follow`)."""
        self.lengths.follow()

    def _write_back(
        self, todo: list[queue.Claimed], vectors: dict[int, list[float]]
    ) -> tuple[int, list[tuple[int, str]]]:
        """Store the vectors one user at a time: the rows written, and the rows given up on
        because a user's rows cannot be read back (a ``DataError``, e.g. a value the driver
        cannot represent) — one such user must not keep every other user in the same batch
        from getting vectors on every run. A database outage still ends the run."""
        by_user: dict[str, list[int]] = {}
        for c in todo:
            if c.id in vectors:
                by_user.setdefault(c.user_id, []).append(c.id)
        written = 0
        unwritable: list[tuple[int, str]] = []
        for user_id, ids in by_user.items():
            try:
                with transaction(self._sessions) as session:
                    repo = EmbeddingRepository(session, user_id)
                    repo.lock()
                    stored = repo.replace_vectors({i: vectors[i] for i in ids}, self.embedder.name)
            except (DataError, psycopg.DataError) as exc:  # the driver's own, from the binary load
                log_failure(logger, "embedding.heal.write_failed", exc, user_id=user_id)
                unwritable.extend((i, f"cannot be written back: {describe(exc)}") for i in ids)
                continue
            written += stored
            if stored and self.on_caught_up is not None:
                with self._sessions() as session:
                    caught_up = queue.pending_for(session, user_id, self.embedder.name) == 0
                if caught_up:
                    self.on_caught_up(user_id)
        return written, unwritable

    def _note_target(self, target: str) -> None:
        """Log when the vectors start moving to another model than this worker's, or back."""
        if target == self._target:
            return
        first = self._target is None
        self._target = target
        if target != self.embedder.name:
            log_event(
                logger,
                "embedding.heal.other_model_chosen",
                logging.WARNING,
                model=self.embedder.name,
                chosen=target,
                effect="only rows without any vector are embedded here; rows with another "
                "model's vector are left to the chosen model's replicas",
            )
        elif not first:
            log_event(logger, "embedding.heal.model_chosen", model=target)

    def backlog(self) -> queue.Backlog:
        """The queue's backlog, with the rows of a wrong length this worker counted (no
        index lets ``queue.backlog`` count them on every probe)."""
        with self._sessions() as session:
            found = queue.backlog(session, self.embedder.name)
        extra = self.lengths.pending
        if not extra or self._target not in (None, self.embedder.name):
            return found
        return replace(found, pending=min(queue.BACKLOG_COUNT_LIMIT, found.pending + extra))

    # -- the background thread ---------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._probed.clear()
        if self.claimer is not None:
            self.claimer.open()
        self._thread = threading.Thread(target=self._loop, name="memstrata-healer", daemon=True)
        self._thread.start()
        log_event(logger, "embedding.heal.started", model=self.embedder.name)
        # The first /readyz then knows whether the API answers (bounded: a hung API).
        self._probed.wait(START_PROBE_WAIT_S)

    def wake(self) -> None:
        """New rows wait for a vector (an import with deferred embedding): look now rather
        than after the idle pause."""
        if not self.running and not self._told_not_running and not self._stop.is_set():
            # A library that never called start_background(): the rows get vectors only
            # if another process (a `memstrata serve` replica) runs a worker on this database.
            self._told_not_running = True
            log_event(
                logger,
                "embedding.heal.not_running",
                logging.WARNING,
                model=self.embedder.name,
                hint="rows stored without a vector wait for a re-embedding worker: call "
                "Memstrata.start_background() in this process or run `memstrata serve` on "
                "the same database",
            )
        self._wake.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the thread (waiting ``timeout_s`` at most for its batch) and give back the
        rows it holds, so another worker takes them at once, not after the lease."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        if self.claimer is not None:
            given = self.claimer.close()
            if given:
                log_event(logger, "embedding.heal.given_back", model=self.embedder.name, rows=given)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        self._start_probe()
        while not self._stop.is_set():
            try:
                report = self.run_once()
            except SQLAlchemyError as exc:  # the database is away: try again later
                log_event(logger, "embedding.heal.db_error", logging.WARNING, error=str(exc))
                report = HealReport()
            except Exception:  # a bug must not kill the worker silently
                logger.exception("embedding.heal.crashed")
                report = HealReport()
            if report.claimed < self.batch or report.released:
                self._wake.wait(self.interval_s)
            self._wake.clear()
