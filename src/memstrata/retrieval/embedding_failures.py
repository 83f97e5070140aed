"""What a failed embedding request says about the texts sent, as one error class each.

Every failure of the client (``embeddings.OpenAICompatibleEmbedder``) is an
``EmbeddingError``; what it says about the texts sent decides what ``embed_each`` does
with a batch:

- ``EmbeddingRejectedError``: a 4xx that refuses the input (400, 413, 422, ...). It is one
  text's, for good; the batch is split in half until that text is found.
- a plain ``EmbeddingUnavailableError``: HTTP 500 after the retries, or an answer that
  cannot be used (bad JSON, NaN, a zero vector, wrong shapes). One text can cause it (the
  model fails on it) while the others would succeed, so the batch is split too; retried
  later.
- ``EmbeddingOutageError``: no answer (a timeout, a refused or dropped connection) or an
  answer about the API rather than the input (a redirect, 401/403/404/405/407/408, 429,
  every 5xx but 500, the circuit open), or vectors of a length the model does not have
  (``EmbeddingLengthError``, ``embedding_answer.judge_length``). Halves would fail the same
  way, each after its own wait, so nothing is split: the batch and every text of the call
  not yet embedded fail at once. A hung API costs a write one timeout and the circuit one
  failure.
- ``SlowBatchError``: the background worker's request of several texts timed out. A
  server too slow for that many texts (a busy host: one full-length chunk took 10 s) is
  not an outage, and no user waits for the worker, so the batch is split down to one
  text; a single text that times out is sent again with a longer timeout while the server
  answers a cheap request (``embedding_slow``), and only one that outlasts the longest, or
  a server that does not answer, counts (``EmbeddingTimeoutError``): without the split
  and the longer timeout, every request of the worker on a slow host timed out for good and
  no vector was ever healed.
- ``ServerStoppingError``: not sent, as this memstrata server is stopping (an outage for
  the call, told apart in a search's warning).
"""

from __future__ import annotations

from memstrata.errors import EmbeddingError, EmbeddingRejectedError, EmbeddingUnavailableError
from memstrata.retrieval.embedding_http import Failure


class EmbeddingOutageError(EmbeddingUnavailableError):
    """The failure says nothing about the texts sent (see the module docstring): the API is
    down, hung, overloaded or misaddressed. ``embed_each`` never splits a batch for it."""


class EmbeddingTimeoutError(EmbeddingOutageError):
    """No answer within the request's timeout on a connection the server accepted: the API
    is hung, or too slow for that many texts. An outage for a write, which a user waits
    for; the background worker splits the batch first (``SlowBatchError``) and gives one
    text more time (``embedding_slow``)."""


class SlowBatchError(EmbeddingUnavailableError):
    """A background request of several texts timed out: not counted as an outage (the
    server may answer fewer texts in time), so ``embed_each`` splits the batch like any
    failure one text can cause; a single text that times out is given more time, then is
    the outage (``embedding_slow``)."""


class ServerStoppingError(EmbeddingOutageError):
    """Not sent: this memstrata server is stopping and sends no more passage requests
    (``stop_bulk``); a long query, which goes through that lane, is not embedded either."""


class CircuitOpenError(EmbeddingOutageError):
    """Not sent: the circuit breaker is open after repeated failures; ``last_failure`` is
    the last of them."""

    def __init__(self, message: str, last_failure: Exception | None = None) -> None:
        super().__init__(message)
        self.last_failure = last_failure


class EmbeddingLengthError(EmbeddingOutageError):
    """The API answered, with vectors of another length than this model's (a wrong
    ``dimensions``, a model swapped or cut short behind the same name): about the API or
    its configuration, not the texts, so an outage for everything else, but told apart
    where the difference matters to a person (a search's warning, the start-up probe)."""


# The error class of each kind of failure a request can end in (``embedding_http``).
FAILURES: dict[Failure, type[EmbeddingError]] = {
    "rejected": EmbeddingRejectedError,
    "unavailable": EmbeddingUnavailableError,
    "outage": EmbeddingOutageError,
    "timeout": EmbeddingTimeoutError,
}
