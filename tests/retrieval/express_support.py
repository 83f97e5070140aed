"""What the express-lane tests share (``test_express_lane``, ``test_express_share_lane``):
a bulk request in a thread, another user's import holding the passage slot, and an
embedder over two fault-injection servers (passages and queries)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from memstrata.config import EmbeddingModelSpec
from memstrata.config_embedding import EXPRESS_SHARE, EXPRESS_TOKENS, EXPRESS_WINDOW_S
from memstrata.retrieval.breaker import (
    BulkLaneBusyError,
    BulkLaneClosedError,
    CircuitBreaker,
    Lanes,
    Route,
)
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from tests.retrieval.fault_server import FaultServer


def wait_until(condition: object, timeout_s: float = 5.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


class Request:
    """One bulk request in a thread, queued (or served) before the constructor returns:
    where it went once it got a slot, or whether the lane refused it (closed) or it gave
    up (``give_up_s``)."""

    def __init__(
        self,
        lanes: Lanes,
        owner: str,
        hold: threading.Event,
        *,
        express: bool = True,
        give_up_s: float | None = None,
    ) -> None:
        self.route: Route | None = None
        self.refused = False
        self.gave_up = False
        queued = lanes.waiting
        self._thread = threading.Thread(
            target=self._run, args=(lanes, owner, hold, express, give_up_s), daemon=True
        )
        self._thread.start()
        wait_until(lambda: lanes.waiting == queued + 1 or self.route is not None)

    def _run(
        self,
        lanes: Lanes,
        owner: str,
        hold: threading.Event,
        express: bool,
        give_up_s: float | None,
    ) -> None:
        try:
            with lanes.bulk(owner, give_up_s=give_up_s, express=express) as route:
                self.route = route
                hold.wait(10)
        except BulkLaneClosedError:
            self.refused = True
        except BulkLaneBusyError:
            self.gave_up = True

    def join(self) -> None:
        self._thread.join(10)
        assert not self._thread.is_alive()


@contextmanager
def importer_holding(lanes: Lanes, hold_s: float = 10.0) -> Iterator[threading.Event]:
    """Another user's import holding the passage slot, in a thread, from before the block
    runs until the event it yields is set (or ``hold_s`` has passed); the block's end sets
    it and waits for the import to leave."""
    released = threading.Event()

    def hold() -> None:
        with lanes.bulk("importer"):
            released.wait(hold_s)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        wait_until(lambda: lanes.in_flight[1] == 1)
        yield released
    finally:
        released.set()
        holder.join(5)


def embedder(
    passages: FaultServer,
    queries: FaultServer | None,
    *,
    express_tokens: int = EXPRESS_TOKENS,
    breaker: CircuitBreaker | None = None,
    express_share: float = EXPRESS_SHARE,
    express_window_s: float = EXPRESS_WINDOW_S,
) -> OpenAICompatibleEmbedder:
    """An embedder whose passages go to ``passages`` and queries (and express passages)
    to ``queries``, if given; no retries, so each request is one the servers see."""
    spec = EmbeddingModelSpec(
        name="fake-model",
        base_url=passages.base_url,
        query_base_url=queries.base_url if queries is not None else None,
        query_input_type="query",
        passage_input_type="passage",
    )
    return OpenAICompatibleEmbedder(
        spec,
        max_retries=0,
        express_tokens=express_tokens,
        breaker=breaker,
        express_share=express_share,
        express_window_s=express_window_s,
    )
