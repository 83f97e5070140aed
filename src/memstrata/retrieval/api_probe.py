"""The re-embedding worker's probes of the embedding API (``VectorHealer`` holds one).

The worker watches the API for the operator: it embeds a probe text when it starts
(``embedding.unreachable_at_start`` / ``embedding.slow_at_start`` /
``embedding.configuration_refused`` when that fails:
a wrong URL or ``dimensions`` otherwise showed only once traffic came), and again when it
has nothing to claim while a circuit waits for its probe, so a circuit closes, and
``/readyz`` says so, when the API is back, without traffic. After a claim whose every text
the API refused, the probe text tells a refused request from refused texts, and ends the
pause that follows as soon as the API embeds it again (:class:`RefusalPause`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from memstrata.errors import EmbeddingError, EmbeddingRejectedError
from memstrata.logs import log_event
from memstrata.retrieval.embedding_failures import EmbeddingTimeoutError
from memstrata.retrieval.embeddings import (
    EmbeddingKind,
    EmbeddingLengthError,
    OpenAICompatibleEmbedder,
)

# The worker's events, under the logger they had before the probes left healing.py.
logger = logging.getLogger("memstrata.retrieval.healing")

# A claim whose every text the API refused: the worker pauses this long, doubling up to
# REFUSED_PAUSE_MAX_S while it goes on (see RefusalPause).
REFUSED_PAUSE_S = 60.0
REFUSED_PAUSE_MAX_S = 900.0
# During such a pause the probe text is tried this often, and the claim's rows are given
# back for this long: once the configuration is fixed, healing resumes within it, not at
# the end of a pause that may have grown to 15 minutes.
RESUME_PROBE_S = 10.0
# Embedded when every text of a claim was refused, to tell a refused request from refused
# texts: any API that works embeds it.
PROBE_TEXT = "memory"


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
    if isinstance(error, EmbeddingTimeoutError):
        # It accepted the connection and answered nothing in time: a busy or slow server
        # (a rolling restart on a loaded host), not a wrong URL or key.
        return (
            "embedding.slow_at_start",
            "the embedding server's load and threads, and MEMSTRATA_EMBEDDING_TIMEOUT_S: it "
            "accepted the probe but did not answer within the timeout",
        )
    return (
        "embedding.unreachable_at_start",
        "the model's `base_url` and `api_key` in MEMSTRATA_EMBEDDING_MODELS (or "
        "MEMSTRATA_EMBEDDING_BASE_URL / _API_KEY), and that the embedding server runs",
    )


class ApiProbe:
    """Embeds ``PROBE_TEXT`` for one worker: at its start, when it is idle, on demand.
    Used by the worker's thread; ``settled`` may be waited on from another."""

    def __init__(self, embedder: OpenAICompatibleEmbedder) -> None:
        self.embedder = embedder
        self.settled = threading.Event()  # the start-up probe has its answer
        self._start_failed_at: float | None = None  # time.monotonic()
        # What to check while the start-up probe's refusal is about the configuration
        # (`dimensions`, the model's name): /readyz names it until the API answers.
        self.refused_check: str | None = None
        self._next_idle_probe = 0.0

    def failure(self, kind: EmbeddingKind = "passage") -> str | None:
        """None when the API embeds ``PROBE_TEXT``; else why not. Any failure counts:
        the claim's rows are then given back, never marked."""
        error = self.error(kind)
        return None if error is None else str(error)

    def error(self, kind: EmbeddingKind = "passage") -> EmbeddingError | None:
        try:
            self.embedder.embed([PROBE_TEXT], kind)
        except EmbeddingError as exc:
            return exc
        return None

    def at_start(self) -> None:
        """Once, when the worker starts: does the API answer? A wrong URL, key, model name
        or ``dimensions`` otherwise showed only once a write or a search failed, and
        ``/readyz`` said "ok" until then (it says "degraded" until the API answered)."""
        try:
            if self.embedder.answered:
                return
            error = self.error()
            if error is None or self.embedder.closed:  # closed under it: nobody to tell
                return
            self._start_failed_at = time.monotonic()
            event, check = start_failure(error)
            if event == "embedding.configuration_refused":
                self.refused_check = check
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
            if not self.embedder.closed:  # httpx's RuntimeError on a client closed under it
                logger.exception("embedding.heal.crashed")
        finally:
            self.settled.set()

    def note_reachable(self) -> None:
        """After a failed start-up probe: log once when the API first answers."""
        if self._start_failed_at is not None and self.embedder.answered:
            self.refused_check = None
            log_event(
                logger,
                "embedding.reachable",
                model=self.embedder.name,
                url=self.embedder.shown_url,
                after_s=round(time.monotonic() - self._start_failed_at, 1),
            )
            self._start_failed_at = None

    def when_idle(self) -> None:
        """Nothing to claim: ask the API when nothing else would. A circuit whose cool-down
        has passed waits for a request to probe it, so without traffic it stayed open, and
        ``/readyz`` degraded, after the API was back; and an API that has not answered in
        this process yet is tried every ``RESUME_PROBE_S`` (an API that came up after
        memstrata)."""
        embedder = self.embedder
        if embedder.breaker.state != "closed":
            if embedder.breaker.allow_peek():
                self.failure()
        elif not embedder.answered and time.monotonic() >= self._next_idle_probe:
            self._next_idle_probe = time.monotonic() + RESUME_PROBE_S
            self.failure()
        query = embedder.query_breaker
        if query is not embedder.breaker and query.state != "closed" and query.allow_peek():
            self.failure("query")


class RefusalPause:
    """Every text of a claim refused (a 4xx about the input). Either the API refuses the
    request, not the texts — a model name it answers with 400, an input format it does
    not take — or these texts are refused on their own (a claim may hold one user's rows
    only). ``PROBE_TEXT`` tells which. Refused too: marking each row as never to be
    retried would leave them without vectors after the configuration is fixed, so the
    rows are given back and the worker pauses (60 s, doubling to 15 min while it goes on;
    it ends early once the probe is embedded, tried every ``RESUME_PROBE_S``). Taken: the
    texts are marked as refused like any other, and other users' rows are embedded on the
    next round, not after a pause. Used by the worker's thread."""

    def __init__(self, probe: ApiProbe) -> None:
        self._probe = probe
        self.pause_s = 0.0
        self._paused_until = 0.0  # time.monotonic()
        self._next_probe = 0.0  # time.monotonic() of the next probe during a pause

    def begin(self, results: Sequence[object]) -> str | None:
        """After a claim's embedding ``results``: why the probe text was refused when every
        text was (the worker pauses now, ``pause_s``); else None."""
        if not results or not all(isinstance(r, EmbeddingRejectedError) for r in results):
            self.pause_s = 0.0
            return None
        refusal = self._probe.failure()
        if refusal is None:
            self.pause_s = 0.0
            return None
        self.pause_s = min(max(REFUSED_PAUSE_S, self.pause_s * 2), REFUSED_PAUSE_MAX_S)
        self._paused_until = time.monotonic() + self.pause_s
        self._next_probe = time.monotonic() + RESUME_PROBE_S
        return refusal

    @property
    def give_back_s(self) -> float:
        """How long the refused claim's rows stay unclaimable (no longer than the pause)."""
        return min(self.pause_s, RESUME_PROBE_S)

    def holds(self) -> bool:
        """Within a pause after a refused claim, unless the probe text is embedded now
        (tried every ``RESUME_PROBE_S``): the configuration was fixed."""
        now = time.monotonic()
        if now >= self._paused_until:
            return False
        if now < self._next_probe:
            return True
        self._next_probe = now + RESUME_PROBE_S
        if self._probe.failure() is not None:
            return True
        self._paused_until = 0.0
        log_event(logger, "embedding.heal.resumed", model=self._probe.embedder.name)
        return False
