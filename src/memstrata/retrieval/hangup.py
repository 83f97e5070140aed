"""A search whose client hung up: its query is not embedded, and no failure of the
embedding it abandoned counts against the query server.

A load drill had clients post searches and close their connections before the answer
(200 at a time, five times): every one of those searches still sent its query to the
query server, the server (one request at a time) fell behind, their requests timed out,
and the timeouts opened the query circuit four times per replica. A user still waiting
meanwhile got BM25-only answers (p95 4.2 s against 69 ms), two in six even after the waves.

The search route sets the event (:func:`searched_for`) when its client hangs up. From then
on ``SearchService.search`` raises :class:`ClientGoneError` instead of embedding (or after
an embedding it was waiting for), a long query waiting in the passage lane leaves it
unsent (:func:`raise_if_left`, the lane's guard), a short one queued behind other searches'
queries likewise (``query_lane``), and a failure of a request already in
flight is neither counted toward the circuit nor logged as ``search.embedding_failed``
(``embedding_circuits.CircuitEvents``): nobody waited for it, and a server that is merely
busy is not failing. A context variable, like ``breaker.bulk_owner``'s, so the embedding
provider protocol stays ``embed(texts, kind)``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_gone: ContextVar[threading.Event | None] = ContextVar("memstrata_search_gone", default=None)


class ClientGoneError(Exception):
    """The search's client hung up: no answer would reach it (not an ``EmbeddingError``:
    nothing failed, and the search ends rather than answer with BM25 alone)."""


@contextmanager
def searched_for(gone: threading.Event) -> Iterator[None]:
    """The searches made inside this block, by this thread or task, are for a client that
    has hung up once ``gone`` is set."""
    token = _gone.set(gone)
    try:
        yield
    finally:
        _gone.reset(token)


def client_left() -> bool:
    """Has the client of the search being made here hung up (:func:`searched_for`)?"""
    gone = _gone.get()
    return gone is not None and gone.is_set()


def raise_if_left() -> None:
    """:class:`ClientGoneError` if the search's client has hung up: the guard of a long
    query waiting in the passage lane (``breaker.bulk_owner``)."""
    if client_left():
        raise ClientGoneError("the search's client hung up")
