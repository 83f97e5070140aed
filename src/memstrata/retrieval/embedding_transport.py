"""The embedding client's connections, lanes and circuits, and one request through them.

``OpenAICompatibleEmbedder`` (``embeddings``) is what callers call: it plans a call's
batches and splits failing ones. This base holds what a single request needs: the HTTP
pools (one of its own for a query server of its own), the lanes a request waits in, the
circuit of each server with the events logged when one opens, stays open or closes, the
request itself with its timeout and retries (longer for one slow text of the worker's:
``embedding_slow``), and the vector length learned from answers.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import partial
from typing import Any

import httpx

from memstrata.config import EmbeddingModelSpec
from memstrata.config_embedding import (
    BATCH_TOKENS,
    BULK_WAIT_S,
    EXPRESS_SHARE,
    EXPRESS_TOKENS,
    EXPRESS_WINDOW_S,
)
from memstrata.errors import EmbeddingError, EmbeddingRejectedError, EmbeddingUnavailableError
from memstrata.logs import log_event
from memstrata.retrieval.batch_fit import BatchFit
from memstrata.retrieval.breaker import (
    BACKGROUND_OWNER,
    BulkLaneBusyError,
    BulkLaneClosedError,
    CircuitBreaker,
    Lanes,
    Route,
    current_bulk_owner,
)
from memstrata.retrieval.embedding_answer import Lengths, judge_length, parse_vectors
from memstrata.retrieval.embedding_circuits import CircuitEvents
from memstrata.retrieval.embedding_failures import (
    FAILURES,
    CircuitOpenError,
    EmbeddingLengthError,
    EmbeddingOutageError,
    EmbeddingTimeoutError,
    ServerStoppingError,
    SlowBatchError,
)
from memstrata.retrieval.embedding_http import NOT_SENT_STOPPING, pool, post_with_retries, shown_url
from memstrata.retrieval.embedding_plan import (
    EmbeddingKind,
    ExpressUse,
    express_slots,
    to_query_server,
)
from memstrata.retrieval.embedding_provider import EmbeddingDeferredError, passed
from memstrata.retrieval.embedding_slow import (
    Attempt,
    Slowness,
    SlowText,
    models_url,
    resend,
    send,
)
from memstrata.retrieval.express_share import ExpressShare
from memstrata.retrieval.long_query import fit_query
from memstrata.retrieval.long_query import (
    query_timeout as query_timeout,  # re-exported: its tests import it from here
)
from memstrata.retrieval.query_lane import QueryLane, QueryLaneBusyError, query_turn

# The client's events keep the logger they have always had, the one operators filter on.
logger = logging.getLogger("memstrata.retrieval.embeddings")


class EmbeddingTransport(CircuitEvents):
    """The state one request needs and the request itself (see the module docstring)."""

    def __init__(
        self,
        spec: EmbeddingModelSpec,
        *,
        timeout_s: float = 5.0,
        max_retries: int = 2,
        batch_size: int = 8,
        batch_tokens: int = BATCH_TOKENS,
        bulk_wait_s: float = BULK_WAIT_S,
        client: httpx.Client | None = None,
        backoff_s: float = 0.1,
        query_timeout_s: float = 2.0,
        timeout_per_text_s: float = 1.0,
        breaker: CircuitBreaker | None = None,
        bulk_slots: int = 1,
        express_tokens: int = EXPRESS_TOKENS,
        express_share: float = EXPRESS_SHARE,
        express_window_s: float = EXPRESS_WINDOW_S,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
        if max_retries < 0:
            raise ValueError(f"max_retries must not be negative, got {max_retries}")
        if express_tokens < 0:
            raise ValueError(f"express_tokens must not be negative, got {express_tokens}")
        self.spec = spec
        self.name: str = spec.name
        self.url = spec.base_url.rstrip("/") + "/embeddings"
        self.query_url = (spec.query_base_url or spec.base_url).rstrip("/") + "/embeddings"
        self.shown_url = shown_url(self.url)  # for messages and logs: no credentials
        # The vector length answers must have: configured, or learned from the answers
        # (``judge_length``); several threads embed at once, so it changes under a lock.
        self._lengths = Lengths(spec.dimensions, configured=spec.dimensions is not None)
        self._lengths_lock = threading.Lock()
        # Set by the first usable answer in this process (``answered``).
        self._answered = False
        self.max_retries = max_retries
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.express_tokens = express_tokens
        self.bulk_wait_s = bulk_wait_s
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.query_timeout_s = query_timeout_s
        self.timeout_per_text_s = timeout_per_text_s
        self.breaker = breaker or CircuitBreaker()
        # The background worker's request size, which shrinks while its requests time out.
        self.background_fit = BatchFit(batch_size)
        # A query server of its own fails on its own: passages timing out on a busy
        # document server (another user's import, other replicas' workers) must not turn
        # every search BM25-only, nor a dead query server stop the writes' embeddings.
        self.query_breaker = (
            self.breaker
            if self.query_url == self.url
            else CircuitBreaker(self.breaker.threshold, self.breaker.cooldown_s)
        )
        # What went to the query server as passages (``memstrata_embedding_express_*``),
        # and the share of its time those may take (searches wait behind them there).
        self.express_use = ExpressUse()
        self.express_share = ExpressShare(express_share, express_window_s)
        # Writes yield to searches only on a server they share: a query server of its own
        # that is slow or stuck held every user's writes for a minute each. With one, a
        # small write may take the express slot to it (``embedding_plan``) while the share
        # allows; the lane asks it when it would give the slot.
        self.lanes = Lanes(
            bulk_slots,
            yield_to_queries=self.query_url == self.url,
            express_slots=express_slots(self.url, self.query_url, express_tokens),
            express_share=self.express_share,
            on_deferred=self.express_use.defer,
        )
        # Searches' short queries in flight to the query server, the rest queued here
        # where a search whose client hung up leaves unsent (``query_lane``).
        self.query_lane = QueryLane()
        # An injected client belongs to the caller, who closes it; ours we close ourselves.
        # A query server of its own gets a pool of its own: stuck searches took every
        # connection, and the writes then timed out against the healthy document server.
        self._owns_client = client is None
        self._client = client if client is not None else pool(timeout_s, spec.keepalive)
        self._query_client = (
            self._client
            if client is not None or self.query_url == self.url
            else pool(timeout_s, spec.keepalive)
        )
        self._headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
        # Each server's timeouts and late answers, for /readyz's "slow" (``embedding_slow``).
        self.slowness = Slowness(models_url(spec.base_url), self._headers)
        self.query_slowness = (
            self.slowness
            if self.query_url == self.url
            else Slowness(models_url(spec.query_base_url or spec.base_url), self._headers)
        )

    def frozen(self) -> bool:
        """A server of this client looks frozen (``Slowness.unanswered``): ``/readyz``
        says ``unreachable`` before any circuit opens."""
        servers = {id(s): s for s in (self.slowness, self.query_slowness)}
        return any([s.unanswered() for s in servers.values()])  # each asked: a check aside

    def _embed_batch(
        self,
        batch: list[str],
        kind: EmbeddingKind,
        express: bool = False,
        deadline: float | None = None,
        *,
        split_slow: bool = False,
    ) -> list[list[float]]:
        # A query's cost is bounded by a chunk's; a long one leaves a query server of its
        # own to the short ones (long_query). Passages get time in proportion to the batch,
        # so a large batch is not cut off by a timeout sized for one text.
        timeout_s, long_query = self._passage_timeout(len(batch)), False
        if kind == "query":
            fitted = [fit_query(t) for t in batch]  # each text's tokens counted once
            batch = [f.text for f in fitted]
            timeout_s = fitted[0].timeout(self.query_timeout_s)
            long_query = self.query_url != self.url and fitted[0].long
        body: dict[str, Any] = {"model": self.name, "input": batch}
        input_type = self.spec.query_input_type if kind == "query" else self.spec.passage_input_type
        if input_type is not None:
            body["input_type"] = input_type
        try:
            while True:
                try:
                    return self._in_lane(
                        body, kind, len(batch), express, deadline, split_slow, long_query, timeout_s
                    )
                except SlowText as slow:
                    self._after_slow(slow, kind, batch)
        except BulkLaneClosedError as exc:  # raised only by the lane, before any request
            why = "the server is stopping" if kind == "query" else NOT_SENT_STOPPING
            raise self._error(f"was not sent: {why}", ServerStoppingError) from exc
        except QueryLaneBusyError as exc:  # likewise: queued behind other searches' queries
            raise self._error(
                f"was not sent: {exc} (other searches' queries in flight)", EmbeddingOutageError
            ) from exc
        except BulkLaneBusyError as exc:  # likewise: the API was not asked, nor failed
            if kind == "query":  # a long one, in its user's turn of the passage lane
                raise self._error(
                    "was not sent: a long query waits its turn in the passage lane, and no "
                    "slot came free within its timeout (other writes and imports in flight)",
                    EmbeddingOutageError,
                ) from exc
            if passed(deadline):  # the write's budget ran out in the queue: left for later
                raise self._error(
                    "was not sent: its call's deadline passed while it waited for a slot",
                    EmbeddingDeferredError,
                ) from exc
            raise self._error(
                f"was not sent: no embedding slot came free within {self.bulk_wait_s:g} s "
                "(other writes and imports in flight; MEMSTRATA_EMBEDDING_BULK_WAIT_S); the "
                "text is stored and embedded in the background",
                EmbeddingOutageError,
            ) from exc

    def _after_slow(self, slow: SlowText, kind: EmbeddingKind, texts: list[str]) -> None:
        """The worker's one slow text, its slot given back: return to send it again
        (``resend``: the server answers the cheap request), else raise its timeout, counted
        on its circuit. Other users' writes take the slot between the tries."""
        breaker = slow.breaker or self.breaker
        stopping = lambda: self.lanes.bulk_closed  # noqa: E731
        if not resend(slow, self.background_fit, self.name, stopping=stopping, texts=texts):
            self._failed(breaker, kind, slow.error)
            raise slow.error from slow
        if breaker.state != "closed":
            # The half-open circuit's probe must end: the server answered, so it is up
            # (slow is not an outage), and the next try goes out on the closed circuit.
            self._closed(breaker, kind)

    def _in_lane(
        self,
        body: dict[str, Any],
        kind: EmbeddingKind,
        size: int,
        express: bool,
        deadline: float | None,
        split_slow: bool,
        long_query: bool,
        timeout_s: float,
    ) -> list[list[float]]:
        # A passage request waits in its user's turn (breaker.bulk_owner, set by the indexer,
        # and by a search for its long query).
        owner = current_bulk_owner()
        # A request's own write gives up waiting (stored without a vector, healed later);
        # the background worker's requests wait their turn however long it takes.
        give_up = None if owner == BACKGROUND_OWNER else self.bulk_wait_s
        if long_query:  # waits in its user's turn, at most its timeout
            give_up = timeout_s
        if give_up is not None and deadline is not None:
            # A write's budget bounds its wait for a slot too: a turn queued behind another
            # user's slow request had answered after that request, past its budget.
            give_up = min(give_up, max(0.0, deadline - time.monotonic()))
        # Only a user's write is express: the worker's requests are the bulk work itself.
        express = express and owner != BACKGROUND_OWNER
        with (
            query_turn(self.lanes, self.query_lane, timeout_s)
            if kind == "query" and not long_query
            else self.lanes.bulk(owner, give_up_s=give_up, express=express)
        ) as route:
            express = self._beside_open_circuit(route, express)
            interactive = (kind == "query" and not long_query) or to_query_server(
                route, express, self.breaker
            )
            breaker = self.query_breaker if interactive else self.breaker
            if not breaker.allow():
                self._tell_still_failing(breaker, kind, None)
                raise CircuitOpenError(
                    f"embedding API {self._shown(breaker)} is failing; not called for another "
                    f"{breaker.retry_after_s():.1f} s (circuit open)",
                    breaker.last_failure,
                )
            beside_searches = interactive and kind == "passage"
            if beside_searches:
                self.express_use.record(body["input"])
            # A batch the worker may split (``SlowBatchError``), unless it is the probe of
            # a half-open circuit, which must end in a success or a failure.
            splits = split_slow and kind == "passage"
            splits_timeout = splits and size > 1 and breaker.state == "closed"
            began = time.monotonic()
            try:
                vectors, took = self._sent(body, kind, size, interactive, timeout_s, splits)
            except EmbeddingRejectedError:
                self._closed(breaker, kind)  # it answered: the API itself is up
                raise
            except SlowText as slow:
                slow.breaker = breaker
                raise
            except EmbeddingTimeoutError as exc:
                if not splits_timeout:
                    self._failed(breaker, kind, exc)
                    raise
                self.background_fit.timed_out(size)
                raise SlowBatchError(f"{exc}; split, as no user waits for it") from exc
            except EmbeddingError as exc:
                self._failed(breaker, kind, exc)
                raise
            finally:
                if beside_searches:  # a failure held the query server too
                    self.express_share.record(began, time.monotonic())
            if splits:
                self.background_fit.answered(size, took, timeout_s)
            self._answered = True
            self._closed(breaker, kind)
        return vectors

    def _timeout_setting(self, kind: EmbeddingKind) -> float:
        return self.timeout_s if kind == "passage" else self.query_timeout_s

    def _passage_timeout(self, size: int) -> float:
        return self.timeout_s + self.timeout_per_text_s * size

    def _beside_open_circuit(self, route: Route | None, express: bool) -> bool:
        """May a small write that got a bulk slot still go to the query server for an open
        passage circuit (``to_query_server``)? Only while the express share allows: it
        bounds every passage there. (Not counted as kept off here: the lane counted it if
        it turned the write back, and a write counts once.)"""
        if route != "bulk" or not express or self.breaker.allow_peek():
            return express
        return self.express_share.allows(time.monotonic())

    def _sent(
        self,
        body: dict[str, Any],
        kind: EmbeddingKind,
        size: int,
        interactive: bool,
        timeout_s: float,
        worker: bool,
    ) -> tuple[list[list[float]], float]:
        """The answer to a request and how long it took (``embedding_slow.send``: a
        timeout noted, one worker's text sent again with more time)."""
        return send(
            partial(self._request, body, kind, size, interactive),
            self.query_slowness if interactive else self.slowness,
            Attempt(self.name, kind, size, timeout_s, overdue_s=self._timeout_setting(kind)),
            self.background_fit if worker else None,
            stopping=lambda: self.lanes.bulk_closed,
        )

    def _request(
        self,
        body: dict[str, Any],
        kind: EmbeddingKind,
        size: int,
        interactive: bool,
        timeout: float,
    ) -> list[list[float]]:
        url = self.query_url if interactive else self.url
        # A search is not retried (its timeout is the whole wait, then BM25 only).
        retries = self.max_retries if kind == "passage" else 0
        response = post_with_retries(
            self._query_client if interactive else self._client,
            url,
            body,
            self._headers,
            timeout,
            retries,
            backoff_s=self.backoff_s,
            # A stopping server lets a passage request end with the attempt in flight, never
            # another, so a cut-off write commits within one timeout (memstrata.api.shutdown).
            stopped=lambda: kind == "passage" and self.lanes.bulk_closed,
            error=lambda what, failure: self._error(what, FAILURES[failure], url=url),
        )
        error = partial(self._error, url=url)
        try:
            payload = response.json()
        except ValueError as exc:
            raise error(f"returned a body that is not valid JSON ({exc})") from exc
        vectors = parse_vectors(payload, size, error)
        self._judge_length(len(vectors[0]))
        return vectors

    def _judge_length(self, size: int) -> None:
        """Raise unless ``size`` is this model's length (``judge_length``); a wrong length
        is about the API, not the texts, so it is an outage (never split)."""
        with self._lengths_lock:
            verdict = judge_length(size, self._lengths)
            self._lengths = verdict.lengths
        if verdict.changed_from is not None:
            log_event(
                logger,
                "embedding.dimension_changed",
                logging.WARNING,
                model=self.name,
                dimensions=size,
                previous=verdict.changed_from,
                effect="vectors stored with the previous length are re-embedded in the "
                "background; set the model's `dimensions` to pin the length",
            )
        if verdict.refusal is not None:
            raise self._error(verdict.refusal, EmbeddingLengthError)

    def _error(
        self,
        what: str,
        kind: type[EmbeddingError] = EmbeddingUnavailableError,
        *,
        url: str | None = None,
    ) -> EmbeddingError:
        shown = self.shown_url if url is None else shown_url(url)
        return kind(f"embedding request to {shown} (model {self.name!r}) {what}")
