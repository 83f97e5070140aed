"""What any embedding provider offers, and one result per text from any of them.

``EmbeddingProvider`` is the one method every provider has (``embed``: all or nothing).
A provider may also have ``embed_each`` (``EachEmbeddingProvider``): one result per text,
so that one bad text costs one vector, and a ``deadline`` past which it sends no request.
``embed_each_of`` gives both to callers that hold any provider: the provider's own
``embed_each``, else its one ``embed`` call, not made once the deadline has passed.

A text not sent because of the deadline gets ``EmbeddingDeferredError``: nothing failed,
nothing is known about the text, and its row is stored for the background worker
(``deferred`` in the index report, not ``embedding_failed``). A write whose caller has
gone (:func:`deadline_ends_when`) sends no more requests either, as if its deadline had
passed, and a request of it waiting for a slot in the passage lane leaves the queue unsent
(:func:`lane_guard`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Protocol, runtime_checkable

from memstrata.errors import EmbeddingError
from memstrata.retrieval.breaker import BulkLaneBusyError
from memstrata.retrieval.embedding_plan import EmbeddingKind
from memstrata.retrieval.shared_lane import one_passage_write

# One text's outcome in ``embed_each``: its vector or the error it got.
Embedded = list[float] | EmbeddingError


class EmbeddingDeferredError(EmbeddingError):
    """Not sent: the call's deadline had passed before this text's request was due. Not
    a failure of the API nor of the text; the caller leaves the text to be embedded later."""


class EmbeddingProvider(Protocol):
    """Anything that turns texts into vectors.

    ``name`` is recorded next to each stored vector so a model change can be detected.
    ``embed`` returns one vector per text, in order, and raises ``EmbeddingError`` on any
    failure.
    """

    name: str

    def embed(self, texts: Sequence[str], kind: EmbeddingKind) -> list[list[float]]: ...


@runtime_checkable
class EachEmbeddingProvider(EmbeddingProvider, Protocol):
    """A provider that reports each text's outcome (``OpenAICompatibleEmbedder``).

    ``embed_each`` returns one result per text: its vector, or the ``EmbeddingError`` it
    got. With a ``deadline`` (``time.monotonic()``) it sends no request once the deadline
    has passed, never cutting the one in flight, and each text not sent gets
    ``EmbeddingDeferredError``.
    """

    def embed_each(
        self,
        texts: Sequence[str],
        kind: EmbeddingKind = "passage",
        *,
        deadline: float | None = None,
    ) -> list[Embedded]: ...


# A context variable, like ``breaker.bulk_owner``'s: the deadline stays a number all the
# way down to a provider's ``embed_each``, which asks ``passed`` before each request.
_ended: ContextVar[threading.Event | None] = ContextVar("memstrata_deadline_ended", default=None)


@contextmanager
def deadline_ends_when(ended: threading.Event) -> Iterator[None]:
    """A deadline of the calls made inside this block, by this thread or task, passes as
    soon as ``ended`` is set: no request is sent after it (the one in flight ends as it
    would). The routes that write turns set it when their client hangs up: embedding on
    for a client that is gone held the API and the user's turn of it for nobody, while the
    worker embeds what is left anyway. A call without a deadline (no worker would embed
    what it leaves) is not ended."""
    token = _ended.set(ended)
    try:
        yield
    finally:
        _ended.reset(token)


def passed(deadline: float | None) -> bool:
    """Has ``deadline`` (``time.monotonic()``; None: none) passed, or been ended early
    (:func:`deadline_ends_when`)?"""
    if deadline is None:
        return False
    ended = _ended.get()
    return time.monotonic() >= deadline or (ended is not None and ended.is_set())


def lane_guard(
    guard: Callable[[], None] | None, deadline: float | None
) -> Callable[[], None] | None:
    """The guard of a write's requests in the passage lane (``breaker.bulk_owner``):
    ``guard``'s own check, then the write's ``deadline``. The lane asks it before a request
    queues and every ``breaker.GUARD_RECHECK_S`` while it waits, so a write ended early
    (:func:`deadline_ends_when`) leaves the queue within that time, and its request is not
    sent once the slot comes: a turn queued behind another user's slow request had waited
    for it, then embedded for a client that was gone. ``BulkLaneBusyError``, as for a wait
    past the budget: the embedder defers the texts (``EmbeddingDeferredError``)."""
    if deadline is None:
        return guard

    def check() -> None:
        if guard is not None:
            guard()
        if passed(deadline):
            raise BulkLaneBusyError("its write's deadline passed while it waited for a slot")

    return check


def embed_each_of(
    provider: EmbeddingProvider,
    texts: Sequence[str],
    kind: EmbeddingKind = "passage",
    *,
    deadline: float | None = None,
) -> list[Embedded]:
    """One result per text from any provider: its own ``embed_each``, else one ``embed``
    call whose failure is every text's. That call is the provider's one request as far as
    the deadline goes: not made once it has passed, never cut once made. A call of one
    passage (a single turn) goes first at the passage server (``one_passage_write``)."""
    texts = list(texts)
    try:
        if isinstance(provider, EachEmbeddingProvider):
            with one_passage_write() if kind == "passage" and len(texts) == 1 else nullcontext():
                answers: list[Embedded] = list(provider.embed_each(texts, kind, deadline=deadline))
        elif passed(deadline):
            late = EmbeddingDeferredError(f"not sent to {provider.name!r}: its deadline passed")
            return [late] * len(texts)
        else:
            answers = list(provider.embed(texts, kind))
        if len(answers) != len(texts):
            raise EmbeddingError(f"got {len(answers)} vectors for {len(texts)} texts")
    except EmbeddingError as exc:
        return [exc] * len(texts)
    return answers
