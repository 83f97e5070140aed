"""``/readyz`` tells the embedding API's state apart from a backlog: ``"embedding"`` is
``ok``, ``unreachable`` (a circuit of this process skips the API) or ``unproven`` (not
answered once yet), read from the circuit breakers, not from a probe request. Before,
``"vectors": "degraded"`` was all it said before and during an outage while rows waited,
and only ``memstrata_embedding_circuit_open`` flipped. ``slow``: requests time out on a
server that answers a cheap request (``embedding_slow``); before, that read
``unreachable`` like a server that is down.

The fake API of ``tests/retrieval/fault_server`` injects the outage and the slowness, a
socket that never accepts plays a frozen server; real PostgreSQL, the app through its
lifespan.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.runtime import Memstrata
from tests.api.auth import AuthHeader
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)

TURN = "/api/memory/conversations/s/turns"
SEARCH = "/api/memory/search"
COOLDOWN_S = 0.5
THRESHOLD = 2


@pytest.fixture
def fault() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


@contextmanager
def app_on(settings: Settings, db: Database, **more: object) -> Iterator[TestClient]:
    # No worker: a row whose embedding failed stays pending, a backlog with the API up.
    configured = settings.model_copy(
        update={
            "embedding_heal": False,
            "embedding_breaker_threshold": THRESHOLD,
            "embedding_breaker_cooldown_s": COOLDOWN_S,
            **more,
        }
    )
    mem = Memstrata.open(configured, database=db)
    try:
        with TestClient(create_app(memstrata=mem)) as client:
            yield client
    finally:
        mem.close()


@pytest.fixture
def served(settings: Settings, db: Database, fault: FaultServer) -> Iterator[TestClient]:
    with app_on(fault.as_api_of(settings), db) as client:
        yield client


def _ready(client: TestClient) -> tuple[int, str, str, int | None]:
    answer = client.get("/readyz")
    body = answer.json()
    return answer.status_code, body["vectors"], body["embedding"], body["pending"]


def test_readyz_tells_an_outage_from_a_backlog(
    served: TestClient, fault: FaultServer, auth: AuthHeader
) -> None:
    assert _ready(served) == (200, "degraded", "unproven", 0)  # not asked yet
    fault.mode = "500"  # one failure, below the threshold: the turn is stored without a vector
    turn = {"turn_index": 0, "user_message": "the kite is red"}
    written = served.post(TURN, headers=auth(), json=turn)
    assert written.status_code == 200 and written.json()["embedding_failed"] == 1, written.text
    fault.mode = "ok"
    assert served.post(SEARCH, headers=auth(), json={"query": "kite"}).status_code == 200
    # A backlog, the API up: degraded vectors, the embedding API ok.
    assert _ready(served) == (200, "degraded", "ok", 1)

    fault.mode = "500"
    for query in ("red", "blue", "green")[:THRESHOLD]:  # new words: no cached query vector
        assert served.post(SEARCH, headers=auth(), json={"query": query}).json()["mode"] == "bm25"
    # The outage: the same backlog, the API unreachable; still ready (BM25 answers).
    requests = len(fault.requests)
    assert _ready(served) == (200, "degraded", "unreachable", 1)
    assert len(fault.requests) == requests  # read from the breakers: no request of its own
    time.sleep(COOLDOWN_S + 0.05)
    assert _ready(served)[2] == "unreachable"  # cool-down over, the API not yet proven back

    fault.mode = "ok"
    # the half-open probe: a search whose query is embedded (its row has no vector yet)
    assert served.post(SEARCH, headers=auth(), json={"query": "kite red"}).status_code == 200
    assert _ready(served) == (200, "degraded", "ok", 1)


QUERY_TIMEOUT_S = 0.3


def _until(client: TestClient, done: Callable[[dict[str, object]], bool]) -> dict[str, object]:
    """/readyz's body once ``done`` holds of it (the cheap request runs aside), or the last."""
    end = time.monotonic() + 5
    while True:
        body: dict[str, object] = client.get("/readyz").json()
        if done(body) or time.monotonic() > end:
            return body
        time.sleep(0.05)


def test_readyz_tells_a_slow_api_from_an_unreachable_one(
    settings: Settings, db: Database, fault: FaultServer, auth: AuthHeader
) -> None:
    fault.mode, fault.delay_s = "slow", QUERY_TIMEOUT_S * 4
    configured = fault.as_api_of(settings)
    with app_on(configured, db, embedding_query_timeout_s=QUERY_TIMEOUT_S) as client:
        # One search timed out, below the threshold: the circuit is closed, the API slow.
        assert client.post(SEARCH, headers=auth(), json={"query": "kite"}).json()["mode"] == "bm25"
        body = _until(client, lambda b: b["embedding"] != "unproven")
        assert (body["embedding"], body["embedding_slow_s"]) == ("slow", QUERY_TIMEOUT_S)
        assert "MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S" in str(body["embedding_check"])
        # The next opens the circuit: still slow, not unreachable; still ready.
        assert client.post(SEARCH, headers=auth(), json={"query": "red"}).json()["mode"] == "bm25"
        body = _until(client, lambda b: b["embedding"] == "slow")  # asked again, aside
        assert (body["status"], body["embedding"], body["vectors"]) == ("ready", "slow", "degraded")
        assert client.get("/readyz").status_code == 200


def test_readyz_calls_a_frozen_api_unreachable(
    settings: Settings, db: Database, auth: AuthHeader
) -> None:
    """It completes connections (the kernel does) but answers nothing, the cheap request
    neither: unreachable, as before, with no setting to raise."""
    with socket.socket() as frozen:
        frozen.bind(("127.0.0.1", 0))
        frozen.listen(16)
        url = f"http://127.0.0.1:{frozen.getsockname()[1]}/v1"
        update = {"embedding_base_url": url, "embedding_model": "fake-model"}
        configured = settings.model_copy(update=update)
        with app_on(configured, db, embedding_query_timeout_s=QUERY_TIMEOUT_S) as client:
            for query in ("kite", "red")[:THRESHOLD]:
                found = client.post(SEARCH, headers=auth(), json={"query": query}).json()
                assert found["mode"] == "bm25"
            time.sleep(QUERY_TIMEOUT_S * 2)  # the cheap request has had its time
            body = client.get("/readyz").json()
    assert body["embedding"] == "unreachable"
    assert "embedding_check" not in body and "embedding_slow_s" not in body


def test_readyz_says_off_without_an_embedding_api(
    client: TestClient,  # tests/api/conftest.py: settings that name no embedding API
) -> None:
    body = client.get("/readyz").json()
    assert (body["vectors"], body["embedding"]) == ("off", "off")


def test_the_field_is_in_the_openapi_schema(client: TestClient) -> None:
    readiness = client.get("/openapi.json").json()["components"]["schemas"]["Readiness"]
    assert readiness["properties"]["embedding"]["enum"] == [
        "ok",
        "slow",
        "unreachable",
        "unproven",
        "misconfigured",
        "off",
        "unknown",
    ]
