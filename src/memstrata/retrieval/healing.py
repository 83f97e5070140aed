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
of both waiting out the lease. With nothing to claim it pauses until a wake of its own
process or another's NOTIFY (:mod:`memstrata.retrieval.heal_wake`), or ``interval_s``.
A text the API rejects (HTTP 4xx) — or that keeps failing
while other texts succeed, ``max_attempts`` times — is marked with the error and never
retried.

Embedding happens outside any transaction; the vectors are written back per user under
the user's lock as new rows (rows are immutable, see the repository), skipping rows a
writer replaced meanwhile (:mod:`memstrata.retrieval.heal_write`).

The worker also watches the API for the operator: it embeds a probe text when it starts
and when it is idle (:mod:`memstrata.retrieval.api_probe`, which also pauses the worker
after a claim whose every text the API refused), and it compares the API's length with the
length most stored vectors of the model have (:mod:`memstrata.retrieval.length_watch`): a
change across a restart used to turn semantic search off with no signal. What a claim's
answers mean for its rows, and the statements that give rows back or count failures, are
in :mod:`memstrata.retrieval.claim_outcome`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from memstrata.db.engine import transaction
from memstrata.logs import describe, log_event
from memstrata.retrieval import claimer, queue
from memstrata.retrieval.api_probe import ApiProbe, RefusalPause
from memstrata.retrieval.claim_outcome import record_failures, release, sort_results
from memstrata.retrieval.embedding_slow import texts_of_users
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.heal_claims import claim_wrong_length, take_back
from memstrata.retrieval.heal_stall import StallWatch
from memstrata.retrieval.heal_wake import IdleWait, present
from memstrata.retrieval.heal_write import write_back
from memstrata.retrieval.length_watch import LengthWatch
from memstrata.retrieval.shared_lane import SharedLane, raw_outside_pool

logger = logging.getLogger(__name__)

# A claimed row is someone's for this long; a worker that dies mid-batch loses its lease.
# The fallback: a dead worker's claims end at once when its lock is gone (claimer).
LEASE_S = 120.0
# ``start`` waits this long at most for the start-up probe's answer, so a server's first
# ``/readyz`` already knows whether the API answers (a hung API delays the start this much).
START_PROBE_WAIT_S = 2.0
# The pause after the loop itself failed (its idle wait, say), so a failure that repeats
# is logged every few seconds rather than in a busy loop.
LOOP_FAILURE_PAUSE_S = 5.0


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
        self.probe = ApiProbe(embedder)
        self.pause = RefusalPause(self.probe)  # see _refused_whole
        self.lengths = LengthWatch(sessions, embedder, self.probe.failure)
        self.stall = StallWatch(embedder.name)  # says when no round stores a vector
        self.model_live_s = model_live_s
        self._target: str | None = None  # the model the vectors move to, last we looked
        self._told_not_running = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Held while the worker runs (start .. stop); a healer driven by run_once alone
        # claims on the lease. No engine to connect with: the lease alone too. Its
        # connection also listens for other processes' wakes (``heal_wake``).
        bind = sessions.kw.get("bind")
        self.claimer = (
            claimer.ClaimerLock(partial(claimer.outside_pool, bind), also=present)
            if isinstance(bind, Engine)
            else None
        )
        self._wake = IdleWait(self.claimer)
        # While the worker runs, the passage lane is shared with the other processes on this
        # database (``shared_lane``): only where small writes have an express slot, which is
        # where they are told from bulk work (a query server of its own).
        self._shared_connect = (
            partial(raw_outside_pool, bind)
            if isinstance(bind, Engine) and embedder.lanes.express_slots
            else None
        )
        self._shared: SharedLane | None = None

    # -- one round ---------------------------------------------------------------------
    def run_once(self) -> HealReport:
        """Claim one batch, embed it, write back what worked, record what did not."""
        report = HealReport()
        with transaction(self._sessions) as session:  # even while the API fails: we run
            target = queue.announce_model(session, self.embedder.name, self.model_live_s)
        self._note_target(target)
        if self.claimer is not None:
            self.claimer.token()  # a lock lost is taken again while the API is away too
        if not self.embedder.breaker.allow_peek():
            # The API is failing: don't take rows another worker could do.
            self.stall.no_progress(self.embedder.breaker.last_failure, None, self._pending)
            return report
        if self.pause.holds():
            return report  # the API refused every text of the last claim (_refused_whole)
        self.probe.note_reachable()
        self.lengths.follow()
        if self._stop.is_set():
            return report  # stopping: claim nothing that stop() would not give back
        token = None if self.claimer is None else self.claimer.token()
        wrong: list[queue.Claimed] = []
        with transaction(self._sessions) as session:
            take_back(session, self.embedder.name, (self._turns, self._relength))
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
            self.probe.when_idle()
            self.stall.progressed("nothing left to embed")
            return report
        texts = [c.chunk_text for c in todo]
        with texts_of_users((c.chunk_text, c.user_id) for c in todo):  # embedding.slow's users
            results = self.embedder.embed_each(texts, "passage", split_slow=True)
        if self._refused_whole(todo, results):
            report.released = len(todo)
            return report
        vectors, failures, given_back = sort_results(todo, results, self.max_attempts)
        report.embedded, unwritable = self._write_back(todo, vectors)
        self.lengths.relengthed(sum(1 for c in wrong if c.id in vectors))
        failures.extend(unwritable)
        with transaction(self._sessions) as session:
            held = todo[0].claimed_by
            release(session, given_back, self.embedder.breaker.retry_after_s(), held)
            record_failures(session, failures, self.interval_s * 5, held)
        report.released = len(given_back)
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
            self.stall.progressed("vectors stored")
        else:
            users = [c.user_id for c in todo]
            cause = next((r for r in results if not isinstance(r, list)), "not written back")
            self.stall.no_progress(cause, users, self._pending)
        return report

    def _claim_wrong_length(
        self, session: Session, n: int, token: int | None
    ) -> list[queue.Claimed]:
        """Up to ``n`` rows with a vector of this model of a wrong length, until a claim
        finds none for the current rule."""
        wrong = self.lengths.rule()
        if wrong == self._lengths_checked:
            return []
        found = claim_wrong_length(
            session, self.embedder, n, LEASE_S, users=self._relength, wrong=wrong, token=token
        )
        if not found:
            self._lengths_checked = wrong
            self.lengths.none_left()
        return found

    def _refused_whole(self, todo: list[queue.Claimed], results: Sequence[object]) -> bool:
        """Every text of the claim refused, and the probe text too (``RefusalPause``): the
        rows are given back unmarked and the worker pauses."""
        refusal = self.pause.begin(results)
        if refusal is None:
            return False
        with transaction(self._sessions) as session:
            release(session, [c.id for c in todo], self.pause.give_back_s, todo[0].claimed_by)
        log_event(
            logger,
            "embedding.heal.all_refused",
            logging.WARNING,
            model=self.embedder.name,
            batch_size=len(todo),
            error=str(results[0]),
            probe_error=refusal,
            paused_s=self.pause.pause_s,
        )
        return True

    def follow_lengths(self) -> None:
        """The API's length against the stored one now (:meth:`LengthWatch.follow`)."""
        self.lengths.follow()

    def _write_back(
        self, todo: list[queue.Claimed], vectors: dict[int, list[float]]
    ) -> tuple[int, list[tuple[int, str]]]:
        """:func:`~memstrata.retrieval.heal_write.write_back` with this worker's model."""
        return write_back(self._sessions, self.embedder.name, todo, vectors, self.on_caught_up)

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

    def _pending(self) -> int:
        return self.backlog().pending

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
        self.probe.settled.clear()
        if self.claimer is not None:
            self.claimer.open()
            # Now, not at the first claim: its lock tells the replicas without a worker that
            # one runs (``worker_presence``), even while the API is down.
            self.claimer.token()
        if self._shared_connect is not None:
            self._shared = SharedLane(self._shared_connect, self.embedder.url)
            self.embedder.lanes.shared = self._shared
        self._thread = threading.Thread(target=self._loop, name="memstrata-healer", daemon=True)
        self._thread.start()
        log_event(logger, "embedding.heal.started", model=self.embedder.name)
        # The first /readyz then knows whether the API answers (bounded: a hung API).
        self.probe.settled.wait(START_PROBE_WAIT_S)

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
        if self._shared is not None:
            if self.embedder.lanes.shared is self._shared:
                self.embedder.lanes.shared = None
            self._shared.close()
            self._shared = None
        if self.claimer is not None:
            given = self.claimer.close()
            if given:
                log_event(logger, "embedding.heal.given_back", model=self.embedder.name, rows=given)
        self._wake.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        self.probe.at_start()
        while not self._stop.is_set():
            try:
                if not self._round():
                    return
            except Exception as exc:  # outside a round (its pause): the thread goes on
                log_event(
                    logger,
                    "embedding.heal.loop_failed",
                    logging.ERROR,
                    exc_info=exc,
                    error=describe(exc),
                    effect=f"the worker goes on in {LOOP_FAILURE_PAUSE_S:g} s",
                )
                self._stop.wait(LOOP_FAILURE_PAUSE_S)

    def _round(self) -> bool:
        """One round and the pause after it; False once ``stop()`` ended it mid-call."""
        try:
            report = self.run_once()
        except Exception as exc:
            if self._stop.is_set():
                self._stopped_mid_call(exc)
                return False
            if isinstance(exc, SQLAlchemyError):  # the database is away: try again later
                log_event(logger, "embedding.heal.db_error", logging.WARNING, error=str(exc))
            else:  # a bug must not kill the worker silently
                logger.exception("embedding.heal.crashed")
            report = HealReport()
        if report.claimed < self.batch or report.released:
            self._wake.wait(self.interval_s)
        self._wake.clear()
        return True

    def _stopped_mid_call(self, exc: Exception) -> None:
        """A round that outlived ``stop()``'s wait and failed as the runtime closed the
        embedding client or the database under it: the end ``stop()`` asked for, not a
        crash. ``stop()`` gave the round's rows back already; the next worker takes them."""
        log_event(
            logger,
            "embedding.heal.stopped_mid_call",
            model=self.embedder.name,
            error=describe(exc),
            effect="stopped during an embedding call; its rows wait for the next worker",
        )
