"""``/readyz`` and ``/metrics`` run on a worker thread of their own, and ``GET
/api/config/limits`` (no database) in the event loop, so sync routes that hold every thread
of AnyIO's default pool (requests hung on a frozen database, in a drill) do not queue them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import anyio.to_thread
from fastapi.testclient import TestClient

from tests.api.auth import AuthHeader

LIMITS = "/api/config/limits"


@contextmanager
def default_threads_taken(client: TestClient) -> Iterator[None]:
    """Every token of AnyIO's default thread limiter held until the block ends, as the 40
    threads of requests hung on a frozen database held them."""
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
    try:
        yield
    finally:
        client.portal.call(give_back)


def _statuses(client: TestClient, requests: dict[str, dict[str, str]]) -> dict[str, int]:
    """GET each path with its headers, all at once; the statuses that came within 10 s."""
    statuses: dict[str, int] = {}

    def get(path: str) -> None:
        statuses[path] = client.get(path, headers=requests[path]).status_code

    threads = [threading.Thread(target=get, args=(p,), daemon=True) for p in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return dict(statuses)


def test_probes_answer_while_the_default_thread_pool_is_taken(client: TestClient) -> None:
    """Drill: during a 30 s freeze `/readyz` and `/metrics` queued behind the 40 threads
    that hung database calls held."""
    with default_threads_taken(client):
        statuses = _statuses(client, {"/readyz": {}, "/metrics": {}})
    assert statuses == {"/readyz": 200, "/metrics": 200}


def test_limits_answer_while_the_default_thread_pool_is_taken(
    client: TestClient, auth: AuthHeader
) -> None:
    """Drill: during a freeze `GET /api/config/limits`, which reads no database, took 7 s
    behind the hung requests' threads; its token check does not need one either."""
    with default_threads_taken(client):
        statuses = _statuses(client, {LIMITS: auth("alice")})
        assert statuses == {LIMITS: 200}
        statuses = _statuses(client, {LIMITS: {}})
        assert statuses == {LIMITS: 401}
