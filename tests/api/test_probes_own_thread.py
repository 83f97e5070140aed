"""``/readyz`` and ``/metrics`` run on a worker thread of their own, so sync routes that
hold every thread of AnyIO's default pool (requests hung on a frozen database, in a drill)
do not queue them."""

from __future__ import annotations

import threading

import anyio
import anyio.to_thread
from fastapi.testclient import TestClient


def test_probes_answer_while_the_default_thread_pool_is_taken(client: TestClient) -> None:
    """Drill: during a 30 s freeze `/readyz` and `/metrics` queued behind the 40 threads
    that hung database calls held."""
    borrowers = [object() for _ in range(40)]

    async def take() -> int:
        limiter = anyio.to_thread.current_default_thread_limiter()
        for borrower in borrowers[: int(limiter.total_tokens)]:
            await limiter.acquire_on_behalf_of(borrower)
        return int(limiter.total_tokens)

    async def give_back() -> None:
        limiter = anyio.to_thread.current_default_thread_limiter()
        for borrower in borrowers:
            if borrower in limiter.statistics().borrowers:
                limiter.release_on_behalf_of(borrower)

    assert client.portal is not None
    taken = client.portal.call(take)
    assert taken == 40
    statuses: dict[str, int] = {}

    def get(path: str) -> None:
        statuses[path] = client.get(path).status_code

    try:
        threads = [threading.Thread(target=get, args=(p,)) for p in ("/readyz", "/metrics")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert statuses == {"/readyz": 200, "/metrics": 200}
    finally:
        client.portal.call(give_back)
        for thread in threads:
            thread.join(10)
