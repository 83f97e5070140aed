"""What an embedding client logs when a server's circuit opens, stays open or closes
(``embedding.circuit_open``, ``embedding.still_failing`` at most every
``STILL_FAILING_EVERY_S``, ``embedding.circuit_closed`` with how long it was open): the
base of ``embedding_transport.EmbeddingTransport``, which counts each request's outcome
here.
"""

from __future__ import annotations

import logging
from typing import Any

from memstrata.errors import EmbeddingError
from memstrata.logs import log_event
from memstrata.retrieval.breaker import CircuitBreaker
from memstrata.retrieval.embedding_http import shown_url
from memstrata.retrieval.embedding_plan import EmbeddingKind
from memstrata.retrieval.hangup import client_left

# The circuit's events keep the logger they have always had, the one operators filter on.
logger = logging.getLogger("memstrata.retrieval.embeddings")

# While a circuit stays open, ``embedding.still_failing`` is logged at most this often.
STILL_FAILING_EVERY_S = 60.0


class CircuitEvents:
    """A client's two circuits (the documents' server and the query server's) and their
    log events; ``EmbeddingTransport`` sets the attributes."""

    name: str
    shown_url: str
    query_url: str
    breaker: CircuitBreaker
    query_breaker: CircuitBreaker

    def _failed(self, breaker: CircuitBreaker, kind: EmbeddingKind, exc: EmbeddingError) -> None:
        """Count a failure on ``breaker``; log when it opens the circuit or goes on. Not
        that of a search whose client hung up (``hangup``): a busy query server ran behind
        the searches of clients gone, and their timeouts opened the circuit for the users
        still waiting. Such a request, if it was the half-open probe, hands the probe on."""
        if client_left():
            breaker.record_abandoned()
            return
        if breaker.record_failure(exc):
            log_event(
                logger,
                "embedding.circuit_open",
                logging.WARNING,
                model=self.name,
                kind=kind,
                cooldown_s=breaker.cooldown_s,
                error=str(exc),
            )
        else:
            self._tell_still_failing(breaker, kind, str(exc))

    def _shown(self, breaker: CircuitBreaker) -> str:
        return self.shown_url if breaker is self.breaker else shown_url(self.query_url)

    def _closed(self, breaker: CircuitBreaker, kind: EmbeddingKind) -> None:
        """Record an answer; log ``embedding.circuit_closed`` when it ends an outage."""
        open_s = breaker.record_success()
        if open_s is not None:
            log_event(
                logger,
                "embedding.circuit_closed",
                model=self.name,
                kind=kind,
                url=self._shown(breaker),
                open_s=round(open_s, 1),
            )

    def _tell_still_failing(
        self, breaker: CircuitBreaker, kind: EmbeddingKind, error: str | None
    ) -> None:
        """``embedding.still_failing`` once per ``STILL_FAILING_EVERY_S`` of an outage
        (``embedding.circuit_open`` is logged once, when it begins)."""
        open_s = breaker.still_failing_due(STILL_FAILING_EVERY_S)
        if open_s is None:
            return
        if error is None and breaker.last_failure is not None:
            # A request the open circuit refused unsent: the outage's cause is the last
            # request that did fail.
            error = str(breaker.last_failure)
        fields: dict[str, Any] = {"error": error} if error is not None else {}
        log_event(
            logger,
            "embedding.still_failing",
            logging.WARNING,
            model=self.name,
            kind=kind,
            url=self._shown(breaker),
            open_s=round(open_s, 1),
            failures=breaker.failures,
            **fields,
        )
