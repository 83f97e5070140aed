"""How the embedding client sends one call: its requests, whether a small write may take
the express slot, which server a passage request goes to, and how often one went to the
query server (``OpenAICompatibleEmbedder``; the lane itself is ``breaker.Lanes``).

- ``batches``: consecutive texts grouped into requests bounded by count and by tokens.
- ``plan_call``: those requests, and whether the call may go express: a passage call of one
  request of at most ``express_tokens`` (a turn, a small edit). Queries never do.
- ``express_slots``: a lane has an express slot only where queries have a server of their
  own; on a shared server there is nothing to go around.
- ``to_query_server``: a passage request goes to the query server when it took the express
  slot, or when it may and the passage server's circuit is open.
- ``ExpressUse``: the passage requests sent to the query server and their estimated
  tokens, and the small writes its share sent to the passage lane instead
  (``express_share``), for ``/metrics``: the cost the express slot puts beside the
  searches there, and how often that cost was refused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from memstrata.retrieval.breaker import CircuitBreaker, Route
from memstrata.retrieval.tokenize import count_tokens

EmbeddingKind = Literal["query", "passage"]


def batches(tokens: Sequence[int], most_texts: int, most_tokens: int) -> list[list[int]]:
    """Positions of consecutive texts (of ``tokens`` estimated tokens each) grouped into
    requests of at most ``most_texts`` texts and ``most_tokens`` tokens; a text over the
    token budget goes alone. A passage request holds the lane (and the local server) until
    it is answered, and another user's write waits for it: the token budget bounds that
    wait when texts are long, where a count alone let one request take seconds."""
    groups: list[list[int]] = []
    group: list[int] = []
    budget = 0
    for i, n in enumerate(tokens):
        if group and (len(group) >= most_texts or budget + n > most_tokens):
            groups.append(group)
            group, budget = [], 0
        group.append(i)
        budget += n
    if group:
        groups.append(group)
    return groups


@dataclass(frozen=True)
class CallPlan:
    """The requests of one call (positions of its texts), and whether it may go express."""

    groups: list[list[int]]
    express: bool


def plan_call(
    texts: Sequence[str],
    kind: EmbeddingKind,
    *,
    most_texts: int,
    most_tokens: int,
    express_tokens: int,
    express_slots: int,
) -> CallPlan:
    """The call's requests (``batches``), and whether it may take the express slot: a
    passage call of one request of at most ``express_tokens``, where the lane has one."""
    if len(texts) == 1 and (kind == "query" or not express_slots):
        return CallPlan([[0]], False)  # a search's query: one request, its size uncounted
    tokens = [count_tokens(t) for t in texts]
    groups = [[0]] if len(texts) == 1 else batches(tokens, most_texts, most_tokens)
    express = kind == "passage" and express_slots > 0 and len(groups) == 1
    return CallPlan(groups, express and sum(tokens) <= express_tokens)


def express_slots(url: str, query_url: str, express_tokens: int) -> int:
    """The express slots of a client's lane: one where queries have a server of their own
    (a small write need not wait for another user's import on the document server: it may
    go to the query server, one at a time), none on a shared server or with
    ``express_tokens`` 0."""
    return 1 if express_tokens and query_url != url else 0


def to_query_server(route: Route | None, express: bool, passages: CircuitBreaker) -> bool:
    """Does a passage request go to the query server? On the express slot, or when it may
    take it and the passage server's circuit (``passages``) is open: a small write then
    embeds beside the searches rather than not at all (another user's import timing out on
    a busy document server opened it for every user's writes)."""
    return route == "express" or (express and not passages.allow_peek())


class ExpressCounts(NamedTuple):
    """``ExpressUse``'s counters at one moment."""

    requests: int  # passage requests sent to the query server
    tokens: int  # their estimated tokens
    deferred: int  # small writes sent to the passage lane: the express share was used up


class ExpressUse:
    """Passage requests sent to the query server (the express slot, or an open passage
    circuit), their estimated tokens, and the small writes the express share turned away:
    counters for ``/metrics``. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests = 0
        self._tokens = 0
        self._deferred = 0

    def record(self, texts: Sequence[str]) -> None:
        tokens = sum(count_tokens(t) for t in texts)  # at most express_tokens: cheap
        with self._lock:
            self._requests += 1
            self._tokens += tokens

    def defer(self) -> None:
        """A small write may not go express: its share of the query server is used up."""
        with self._lock:
            self._deferred += 1

    @property
    def counts(self) -> ExpressCounts:
        """The counters so far in this process."""
        with self._lock:
            return ExpressCounts(self._requests, self._tokens, self._deferred)
