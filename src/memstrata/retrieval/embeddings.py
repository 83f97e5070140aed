"""The OpenAI-compatible embedding client (the provider protocol: ``embedding_provider``).

Spec §4: vectors come from an external embedding API (which model: ``embedding_registry``;
the requests of a call and the server each goes to: ``embedding_plan``, with the express
slot's share of the query server: ``express_share``; one request over
HTTP with its retries: ``embedding_http``; checking its answers: ``embedding_answer``).
Spec §5: an API failure never breaks a write or a search, so every failure here surfaces
as one ``EmbeddingError`` that callers catch, log and degrade on.

What each kind of failure makes ``embed_each`` do with a batch (split it, or fail the rest
of the call at once): ``embedding_failures``. A call's ``deadline`` stops it sending
requests without failing anything (``embedding_provider``).

The circuit's changes are logged: ``embedding.circuit_open`` when it opens,
``embedding.still_failing`` every ``STILL_FAILING_EVERY_S`` while failures go on and
``embedding.circuit_closed`` (with how long it was open) when an answer closes it.

The client is synchronous because the services that call it use synchronous SQLAlchemy
sessions; async callers wrap it in ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from functools import partial
from types import TracebackType
from typing import Any

import httpx

from memstrata.config import EmbeddingModelSpec
from memstrata.config_embedding import (
    BATCH_TOKENS,
    BULK_WAIT_S,
    EXPRESS_SHARE,
    EXPRESS_TOKENS,
    EXPRESS_WINDOW_S,
    QUERY_TIMEOUT_TOKENS,
)
from memstrata.errors import EmbeddingError, EmbeddingRejectedError, EmbeddingUnavailableError
from memstrata.logs import log_event
from memstrata.retrieval.breaker import (
    BACKGROUND_OWNER,
    BulkLaneBusyError,
    BulkLaneClosedError,
    CircuitBreaker,
    Lanes,
    Route,
    current_bulk_owner,
)
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.embedding_answer import (
    Lengths,
    judge_length,
    parse_vectors,
)
from memstrata.retrieval.embedding_failures import FAILURES
from memstrata.retrieval.embedding_failures import (  # re-exported: callers import them here
    CircuitOpenError as CircuitOpenError,
)
from memstrata.retrieval.embedding_failures import (
    EmbeddingLengthError as EmbeddingLengthError,
)
from memstrata.retrieval.embedding_failures import (
    EmbeddingOutageError as EmbeddingOutageError,
)
from memstrata.retrieval.embedding_http import (
    NOT_SENT_STOPPING,
    pool,
    post_with_retries,
)
from memstrata.retrieval.embedding_http import (
    shown_url as shown_url,  # re-exported: its tests import it from here
)
from memstrata.retrieval.embedding_plan import (
    EmbeddingKind as EmbeddingKind,  # re-exported: the client's callers import it from here
)
from memstrata.retrieval.embedding_plan import (
    ExpressUse,
    express_slots,
    plan_call,
    to_query_server,
)
from memstrata.retrieval.embedding_plan import (
    batches as batches,  # re-exported: its tests import it from here
)
from memstrata.retrieval.embedding_provider import (
    Embedded as Embedded,  # re-exported, like the protocol: callers import them from here
)
from memstrata.retrieval.embedding_provider import (
    EmbeddingDeferredError,
    passed,
)
from memstrata.retrieval.embedding_provider import (
    EmbeddingProvider as EmbeddingProvider,
)
from memstrata.retrieval.express_share import ExpressShare
from memstrata.retrieval.tokenize import count_tokens

logger = logging.getLogger(__name__)

# While a circuit stays open, ``embedding.still_failing`` is logged at most this often.
STILL_FAILING_EVERY_S = 60.0


def query_timeout(base_s: float, text: str) -> float:
    """``base_s`` for a query of up to ``QUERY_TIMEOUT_TOKENS`` tokens, one more ``base_s``
    for each further block of them, at most ``CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS`` ×."""
    blocks = math.ceil(count_tokens(text) / QUERY_TIMEOUT_TOKENS)
    return base_s * min(max(1, blocks), CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS)


class OpenAICompatibleEmbedder:
    """Client for any ``POST {base_url}/embeddings`` endpoint that speaks OpenAI's format.

    Asymmetric models (e5) get ``input_type`` from the spec; symmetric ones get nothing
    extra. Responses are validated strictly (``embedding_answer`` says why).
    """

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

    @property
    def circuit_open(self) -> bool:
        """A circuit skips its server now: the documents' or the query server's own."""
        return self.breaker.state != "closed" or self.query_breaker.state != "closed"

    @property
    def dimensions(self) -> int | None:
        """The length of this model's vectors: configured, or learned from the answers
        (``None`` before the first)."""
        return self._lengths.known

    @property
    def answered(self) -> bool:
        """Has the API answered an embedding request usably in this process? Until then
        its configuration is unproven (a wrong URL or ``dimensions`` fails only when used):
        ``/readyz`` reports the vector side degraded."""
        return self._answered

    @property
    def lengths(self) -> Lengths:
        """All this client knows of the length, with the lengths it replaced (the
        background worker re-embeds stored vectors of those)."""
        return self._lengths

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]:
        """Embed ``texts`` as queries or passages; one vector per text, same order.

        All or nothing: the first failure raises. ``embed_each`` isolates bad texts.
        """
        texts = self._check(texts, kind)
        groups, express = self._plan(texts, kind)
        vectors: list[list[float]] = []
        for positions in groups:
            vectors.extend(self._embed_batch([texts[i] for i in positions], kind, express))
        return vectors

    def embed_each(
        self,
        texts: Sequence[str],
        kind: EmbeddingKind = "passage",
        *,
        deadline: float | None = None,
    ) -> list[Embedded]:
        """One result per text: its vector, or the ``EmbeddingError`` that text got.

        A batch that fails in a way one text can cause (a 4xx rejection, a 500, an
        unusable answer) is split in half until the failing text is found, so one bad text
        costs one vector. ``EmbeddingRejectedError`` for a text is permanent; any other
        error is worth retrying later. An ``EmbeddingOutageError`` (timeout, connection
        failed, circuit open, ...) is not split: the texts not yet embedded fail at once.

        With a ``deadline`` (``time.monotonic()``), no request is sent once it has passed
        (a half of a split batch neither), nor waits for a slot past it: the one in flight
        ends as it would, and each text not sent gets ``EmbeddingDeferredError``, which is
        no failure.
        """
        texts = self._check(texts, kind)
        results: list[Embedded | None] = [None] * len(texts)
        groups, express = self._plan(texts, kind)
        try:
            for positions in groups:
                self._fill(texts, positions, kind, results, express, deadline)
        except EmbeddingOutageError as exc:
            # The next batch would meet the same outage after the same wait.
            results = [exc if r is None else r for r in results]
        return [r if r is not None else self._error("returned nothing") for r in results]

    def _fill(
        self,
        texts: Sequence[str],
        positions: list[int],
        kind: EmbeddingKind,
        results: list[Embedded | None],
        express: bool,
        deadline: float | None,
    ) -> None:
        if passed(deadline):
            late = self._error(
                "was not sent: its call's deadline had passed", EmbeddingDeferredError
            )
            for i in positions:
                results[i] = late
            return
        try:
            vectors = self._embed_batch([texts[i] for i in positions], kind, express, deadline)
        except EmbeddingOutageError:
            raise  # halves would fail alike, each costing another timeout
        except EmbeddingError as exc:
            if len(positions) == 1:
                results[positions[0]] = exc
                return
            half = len(positions) // 2
            self._fill(texts, positions[:half], kind, results, express, deadline)
            self._fill(texts, positions[half:], kind, results, express, deadline)
            return
        for i, vector in zip(positions, vectors, strict=True):
            results[i] = vector

    def _plan(self, texts: Sequence[str], kind: EmbeddingKind) -> tuple[list[list[int]], bool]:
        plan = plan_call(
            texts,
            kind,
            most_texts=self.batch_size,
            most_tokens=self.batch_tokens,
            express_tokens=self.express_tokens,
            express_slots=self.lanes.express_slots,
        )
        return plan.groups, plan.express

    def _check(self, texts: Sequence[str], kind: EmbeddingKind) -> Sequence[str]:
        # A str is a Sequence[str]; embedding it would quietly embed each character.
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single string")
        if kind not in ("query", "passage"):
            raise ValueError(f"kind must be 'query' or 'passage', got {kind!r}")
        return texts

    def stop_bulk(self) -> None:
        """Send no more passage embeddings (a stopping server): the ones in flight end, the
        rest fail at once with ``EmbeddingOutageError``, so their rows are stored without a
        vector (and healed later) instead of queueing behind a slow or hung API. Queries
        are not affected."""
        self.lanes.close_bulk()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` closed the clients (a runtime shutting down)."""
        return self._client.is_closed

    def close(self) -> None:
        if self._owns_client:
            self._client.close()
            self._query_client.close()

    def __enter__(self) -> OpenAICompatibleEmbedder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAICompatibleEmbedder(name={self.name!r}, url={self.shown_url!r})"

    # -- one request ---------------------------------------------------------------------

    def _embed_batch(
        self,
        batch: list[str],
        kind: EmbeddingKind,
        express: bool = False,
        deadline: float | None = None,
    ) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.name, "input": batch}
        input_type = self.spec.query_input_type if kind == "query" else self.spec.passage_input_type
        if input_type is not None:
            body["input_type"] = input_type
        try:
            return self._in_lane(body, kind, len(batch), express, deadline)
        except BulkLaneClosedError as exc:  # raised only by the lane, before any request
            raise self._error(f"was not sent: {NOT_SENT_STOPPING}", EmbeddingOutageError) from exc
        except BulkLaneBusyError as exc:  # likewise: the API was not asked, nor failed
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

    def _in_lane(
        self,
        body: dict[str, Any],
        kind: EmbeddingKind,
        size: int,
        express: bool,
        deadline: float | None,
    ) -> list[list[float]]:
        # A passage request waits in its user's turn (breaker.bulk_owner, set by the indexer).
        owner = current_bulk_owner()
        # A request's own write gives up waiting (stored without a vector, healed later);
        # the background worker's requests wait their turn however long it takes.
        give_up = None if owner == BACKGROUND_OWNER else self.bulk_wait_s
        if give_up is not None and deadline is not None:
            # A write's budget bounds its wait for a slot too: a turn queued behind another
            # user's slow request had answered after that request, past its budget.
            give_up = min(give_up, max(0.0, deadline - time.monotonic()))
        # Only a user's write is express: the worker's requests are the bulk work itself.
        express = express and owner != BACKGROUND_OWNER
        with (
            self.lanes.query()
            if kind == "query"
            else self.lanes.bulk(owner, give_up_s=give_up, express=express)
        ) as route:
            express = self._beside_open_circuit(route, express)
            interactive = kind == "query" or to_query_server(route, express, self.breaker)
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
            began = time.monotonic()
            try:
                vectors = self._request(body, kind, size, interactive)
            except EmbeddingRejectedError:
                self._closed(breaker, kind)  # it answered: the API itself is up
                raise
            except EmbeddingError as exc:
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
                raise
            finally:
                if beside_searches:  # a failure held the query server too
                    self.express_share.record(began, time.monotonic())
            self._answered = True
            self._closed(breaker, kind)
        return vectors

    def _beside_open_circuit(self, route: Route | None, express: bool) -> bool:
        """May a small write that got a bulk slot still go to the query server for an open
        passage circuit (``to_query_server``)? Only while the express share allows: it
        bounds every passage there. (Not counted as kept off here: the lane counted it if
        it turned the write back, and a write counts once.)"""
        if route != "bulk" or not express or self.breaker.allow_peek():
            return express
        return self.express_share.allows(time.monotonic())

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

    def _request(
        self, body: dict[str, Any], kind: EmbeddingKind, size: int, interactive: bool
    ) -> list[list[float]]:
        # Queries are interactive: a short timeout. Passages get time in proportion to the
        # batch, so a large batch is not cut off by a timeout sized for one text.
        if kind == "query":
            timeout = query_timeout(self.query_timeout_s, body["input"][0])
        else:
            timeout = self.timeout_s + self.timeout_per_text_s * size
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
