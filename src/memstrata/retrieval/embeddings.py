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

Its HTTP pools, the lanes a request waits in, each server's circuit and one request through
them live in the base class, ``embedding_transport.EmbeddingTransport``; this module is what
callers call. The circuit's changes are logged: ``embedding.circuit_open`` when it opens,
``embedding.still_failing`` every ``embedding_circuits.STILL_FAILING_EVERY_S`` while
failures go on and ``embedding.circuit_closed`` (with how long it was open) when an answer
closes it.

The client is synchronous because the services that call it use synchronous SQLAlchemy
sessions; async callers wrap it in ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

from memstrata.errors import EmbeddingError
from memstrata.retrieval.embedding_answer import Lengths
from memstrata.retrieval.embedding_failures import (  # re-exported: callers import them here
    CircuitOpenError as CircuitOpenError,
)
from memstrata.retrieval.embedding_failures import (
    EmbeddingLengthError as EmbeddingLengthError,
)
from memstrata.retrieval.embedding_failures import (
    EmbeddingOutageError as EmbeddingOutageError,
)
from memstrata.retrieval.embedding_failures import EmbeddingTimeoutError, SlowBatchError
from memstrata.retrieval.embedding_http import (
    shown_url as shown_url,  # re-exported: its tests import it from here
)
from memstrata.retrieval.embedding_plan import (
    EmbeddingKind as EmbeddingKind,  # re-exported: the client's callers import it from here
)
from memstrata.retrieval.embedding_plan import (
    batches as batches,  # re-exported: its tests import it from here
)
from memstrata.retrieval.embedding_plan import plan_call
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
from memstrata.retrieval.embedding_slow import SlowSign
from memstrata.retrieval.embedding_transport import EmbeddingTransport


class OpenAICompatibleEmbedder(EmbeddingTransport):
    """Client for any ``POST {base_url}/embeddings`` endpoint that speaks OpenAI's format.

    Asymmetric models (e5) get ``input_type`` from the spec; symmetric ones get nothing
    extra. Responses are validated strictly (``embedding_answer`` says why).
    """

    @property
    def circuit_open(self) -> bool:
        """A circuit skips its server now: the documents' or the query server's own."""
        return self.breaker.state != "closed" or self.query_breaker.state != "closed"

    def slow(self) -> SlowSign | None:
        """A server of this client answers, but slower than its requests' timeouts
        (``embedding_slow``): what to tell, else None, also while a circuit is open for
        another reason (an outage) or on a server that did not answer the cheap request."""
        signs: list[SlowSign] = []
        for breaker, slowness in (
            (self.breaker, self.slowness),
            (self.query_breaker, self.query_slowness),
        ):
            is_open = breaker.state != "closed"
            on_timeout = isinstance(breaker.last_failure, EmbeddingTimeoutError)
            sign = slowness.sign(timed_out_last=is_open and on_timeout)
            if is_open and (sign is None or not on_timeout):
                return None
            if sign is not None:
                signs.append(sign)
        return max(signs, key=lambda s: s.waited_s, default=None)

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
        split_slow: bool = False,
    ) -> list[Embedded]:
        """One result per text: its vector, or the ``EmbeddingError`` that text got.

        A batch that fails in a way one text can cause (a 4xx rejection, a 500, an
        unusable answer) is split in half until the failing text is found, so one bad text
        costs one vector. ``EmbeddingRejectedError`` for a text is permanent; any other
        error is worth retrying later. An ``EmbeddingOutageError`` (timeout, connection
        failed, circuit open, ...) is not split: the texts not yet embedded fail at once.
        With ``split_slow`` (the background worker: no user waits for it), a request of
        several texts that timed out is split instead (``SlowBatchError``), into requests
        of the size such calls now fit in (``batch_fit``), down to one text.

        With a ``deadline`` (``time.monotonic()``), no request is sent once it has passed
        (a half of a split batch neither), nor waits for a slot past it: the one in flight
        ends as it would, and each text not sent gets ``EmbeddingDeferredError``, which is
        no failure.
        """
        texts = self._check(texts, kind)
        results: list[Embedded | None] = [None] * len(texts)
        groups, express = self._plan(texts, kind, split_slow)
        try:
            for positions in groups:
                self._fill(texts, positions, kind, results, express, deadline, split_slow)
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
        split_slow: bool,
    ) -> None:
        if passed(deadline):
            late = self._error(
                "was not sent: its call's deadline had passed", EmbeddingDeferredError
            )
            for i in positions:
                results[i] = late
            return
        try:
            vectors = self._embed_batch(
                [texts[i] for i in positions], kind, express, deadline, split_slow=split_slow
            )
        except EmbeddingOutageError:
            raise  # halves would fail alike, each costing another timeout
        except EmbeddingError as exc:
            if len(positions) == 1:
                results[positions[0]] = exc
                return
            half = len(positions) // 2
            pieces = [positions[:half], positions[half:]]
            if isinstance(exc, SlowBatchError):  # the rest too: as many as now fit
                step = min(half, self.background_fit.cap)
                pieces = [positions[i : i + step] for i in range(0, len(positions), step)]
            for piece in pieces:
                self._fill(texts, piece, kind, results, express, deadline, split_slow)
            return
        for i, vector in zip(positions, vectors, strict=True):
            results[i] = vector

    def _plan(
        self, texts: Sequence[str], kind: EmbeddingKind, split_slow: bool = False
    ) -> tuple[list[list[int]], bool]:
        most_texts = self.batch_size
        if split_slow:  # as many as such calls' requests now answer in time
            most_texts = min(most_texts, self.background_fit.cap)
        plan = plan_call(
            texts,
            kind,
            most_texts=most_texts,
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
