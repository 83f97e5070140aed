"""``/metrics`` counts the small writes that took the query server.

A user's small write takes the express slot to the query server when it would otherwise
wait only for other users' imports (``breaker.Lanes``); there it runs where searches embed
their queries. An operator could not see how often: now
``memstrata_embedding_express_requests_total`` and ``…_tokens_total`` count those passage
requests and their estimated tokens. The real app on the test database, the two servers
fault-injection fakes (as in ``test_express_lane``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import jwt
import pytest
from fastapi.testclient import TestClient

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.tokenize import count_tokens
from memstrata.runtime import Memstrata
from tests.api.auth import bearer
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

EXPRESS = re.compile(r"^memstrata_embedding_express_(requests|tokens)_total (\S+)$", re.MULTILINE)


def express_samples(client: TestClient) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in EXPRESS.finditer(client.get("/metrics").text)}


def test_the_small_writes_sent_to_the_query_server_are_counted_with_their_tokens(
    open_runtime: Callable[..., Memstrata], settings: Settings
) -> None:
    assert settings.jwt_secret is not None
    claims = {"sub": "bob", "exp": int(time.time()) + 600}
    bob = bearer(jwt.encode(claims, settings.jwt_secret, algorithm="HS256"))
    with FaultServer() as passages, FaultServer() as queries:
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=passages.base_url, query_base_url=queries.base_url
        )
        embedder = OpenAICompatibleEmbedder(spec, max_retries=0)
        # No lifespan: no background worker embeds anything.
        client = TestClient(create_app(memstrata=open_runtime(embedder)))

        def turn(n: int, text: str) -> None:
            body = {"turn_index": n, "user_message": text, "assistant_reply": "ok"}
            answer = client.post("/api/memory/conversations/s/turns", headers=bob, json=body)
            assert answer.status_code == 200 and answer.json()["embedded"] == 1, answer.text

        assert express_samples(client) == {"requests": 0, "tokens": 0}
        turn(0, "I keep bees")  # the passage server is free: it goes there
        assert len(passages.requests) == 1 and express_samples(client)["requests"] == 0

        with embedder.lanes.bulk("importer"):  # another user's import holds the passage server
            turn(1, "and two cats")
        [sent] = [r.body["input"] for r in queries.requests]
        assert express_samples(client) == {
            "requests": 1,
            "tokens": sum(count_tokens(text) for text in sent),
        }
        assert len(passages.requests) == 1


def test_no_sample_without_an_embedding_api(open_runtime: Callable[..., Memstrata]) -> None:
    client = TestClient(create_app(memstrata=open_runtime()))
    assert express_samples(client) == {}
