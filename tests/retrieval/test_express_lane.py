"""A small write does not wait for another user's import (``breaker.Lanes``, the express
slot; ``OpenAICompatibleEmbedder`` sends it to the query server).

The passage lane goes round the users, so another user's single write waits for the one
request of the importer's in flight; on a busy host that request took 4-11 s. Where
searches have a server of their own, a write of at most ``express_tokens`` whose user has
nothing else in the lane takes the express slot instead, one at a time, and is embedded
there. Threads and the fault-injection fake only: each waiter is queued before the next
one starts, so the order is deterministic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memstrata.retrieval.breaker import (
    BulkLaneClosedError,
    CircuitBreaker,
    Lanes,
    bulk_owner,
    may_express,
)
from memstrata.retrieval.embeddings import CircuitOpenError, OpenAICompatibleEmbedder
from tests.retrieval.express_support import Request, embedder, importer_holding, wait_until
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(30)


# -- the rule -----------------------------------------------------------------------------


def test_express_is_for_an_owners_only_request_while_a_slot_is_free() -> None:
    assert may_express(in_flight=0, slots=1, owned=1)
    assert not may_express(in_flight=1, slots=1, owned=1)  # one at a time
    assert not may_express(in_flight=0, slots=0, owned=1)  # no express slot
    assert not may_express(in_flight=0, slots=1, owned=2)  # an import, parallel writes


# -- the lane -----------------------------------------------------------------------------


def test_a_small_write_behind_another_users_request_takes_the_express_slot() -> None:
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    with lanes.bulk("user-a"):  # A's request in flight
        began = time.monotonic()
        with lanes.bulk("user-b", express=True) as route:
            assert route == "express"
        assert time.monotonic() - began < 0.5  # not after A's request


def test_alone_a_small_write_takes_the_bulk_slot() -> None:
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    with lanes.bulk("user-b", express=True) as route:
        assert route == "bulk"


def test_one_express_request_at_a_time() -> None:
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    done_b = threading.Event()
    with lanes.bulk("user-a"):
        b = Request(lanes, "user-b", done_b, express=True)
        assert b.route == "express"
        c = Request(lanes, "user-c", threading.Event(), express=True)
        time.sleep(0.1)
        assert c.route is None and lanes.waiting == 1  # waits for B's express request
        done_b.set()
        wait_until(lambda: c.route is not None)
        assert c.route == "express"  # the first slot to free: B's
    b.join()


def test_an_owner_with_another_request_in_the_lane_waits_its_turn() -> None:
    """An import (or parallel writes) of one user never goes express: the express slot
    serves small writes, not a second importer."""
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    held = threading.Event()
    with lanes.bulk("user-c"):  # another user's request in flight
        a = Request(lanes, "user-a", held, express=False)
        a2 = Request(lanes, "user-a", held, express=True)  # A's second request, small
        time.sleep(0.1)
        assert (a.route, a2.route) == (None, None)
    wait_until(lambda: a.route is not None)
    held.set()
    wait_until(lambda: a2.route is not None)
    assert (a.route, a2.route) == ("bulk", "bulk")
    a.join()
    a2.join()


def test_without_an_express_slot_or_flag_a_write_waits_as_before() -> None:
    for lanes, express in ((Lanes(1, express_slots=0), True), (Lanes(1, express_slots=1), False)):
        held = threading.Event()
        with lanes.bulk("user-a"):
            b = Request(lanes, "user-b", held, express=express)
            time.sleep(0.1)
            assert b.route is None
        wait_until(lambda b=b: b.route is not None)
        assert b.route == "bulk"
        held.set()
        b.join()


def test_an_express_request_costs_its_owner_no_round() -> None:
    """B's write went to the other server: B's next request waits in the round it would
    have had, so it is not put behind A's queued requests for it."""
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    served: list[str] = []
    done = threading.Event()
    with lanes.bulk("user-a"):
        a2 = Request(lanes, "user-a", done, express=False)  # round 1
        a3 = Request(lanes, "user-a", done, express=False)  # round 2
        with lanes.bulk("user-b", express=True) as route:  # round 0 on arrival
            assert route == "express"
        # Round 0 again: right after A's in flight.
        b = Request(lanes, "user-b", done, express=False)
    for request, name in ((b, "b"), (a2, "a2"), (a3, "a3")):
        wait_until(lambda r=request: r.route is not None)
        served.append(name)
        done.set()
    assert served == ["b", "a2", "a3"]
    for request in (a2, a3, b):
        request.join()


def test_closing_the_lane_refuses_a_waiting_express_request() -> None:
    lanes = Lanes(1, yield_to_queries=False, express_slots=1)
    held = threading.Event()
    with lanes.bulk("user-a"), lanes.bulk("user-b", express=True):
        c = Request(lanes, "user-c", held, express=True)
        lanes.close_bulk()
        c.join()
        assert c.refused
    with pytest.raises(BulkLaneClosedError), lanes.bulk("user-d", express=True):
        pass


# -- the embedder: where the express request goes ----------------------------------------


@pytest.fixture
def servers() -> Iterator[tuple[FaultServer, FaultServer]]:
    with FaultServer() as passages, FaultServer() as queries:
        yield passages, queries


def test_a_turn_behind_another_users_import_is_embedded_on_the_query_server(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    passages, queries = servers
    with embedder(passages, queries) as client:
        with client.lanes.bulk("importer"):  # another user's import holds the slot
            began = time.monotonic()
            with bulk_owner("bob"):
                [vector] = client.embed_each(["User: I keep bees\nAssistant: Nice"])
            assert time.monotonic() - began < 1.0
        assert isinstance(vector, list)
    assert [r.body["input"] for r in queries.requests] == [["User: I keep bees\nAssistant: Nice"]]
    assert queries.requests[0].body["input_type"] == "passage"  # embedded as a passage
    assert passages.requests == []


def test_what_is_not_a_small_users_write_waits_for_the_passage_server(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    """The background worker's requests, a write over ``express_tokens``, any write with
    ``express_tokens`` 0 or without a query server of its own: after the importer's."""
    passages, queries = servers
    long_text = "word " * 300
    cases: list[tuple[OpenAICompatibleEmbedder, str | None, str]] = [
        (embedder(passages, queries), None, "short"),  # the background worker
        (embedder(passages, queries), "bob", long_text),  # ~300 tokens > 256
        (embedder(passages, queries, express_tokens=0), "bob", "short"),
        (embedder(passages, None), "bob", "short"),  # one server for both
    ]
    for client, owner, text in cases:
        with client, importer_holding(client.lanes, hold_s=0.3):
            began = time.monotonic()
            if owner is None:
                client.embed_each([text])
            else:
                with bulk_owner(owner):
                    client.embed_each([text])
            assert time.monotonic() - began >= 0.2, (owner, text[:10])  # after the import's
    assert queries.requests == []
    assert len(passages.requests) == len(cases)


def test_while_the_passage_circuit_is_open_a_small_write_is_embedded_on_the_query_server(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    """Another user's import timing out on a busy passage server opened its circuit, and
    every user's turns were stored without vectors until it closed."""
    passages, queries = servers
    passages.mode = "500"
    breaker = CircuitBreaker(threshold=2, cooldown_s=60)
    with embedder(passages, queries, breaker=breaker) as client:
        with bulk_owner("importer"):  # too long to be express
            client.embed_each(["an import " * 100, "of two turns " * 100])
        assert client.breaker.state == "open"
        with bulk_owner("bob"):
            [vector] = client.embed_each(["one turn"])
            [refused] = client.embed_each(["word " * 300])  # not a small write
        [background] = client.embed_each(["the worker's"])
    assert isinstance(vector, list)
    assert isinstance(refused, CircuitOpenError) and isinstance(background, CircuitOpenError)
    assert [r.body["input"] for r in queries.requests] == [["one turn"]]
    assert client.breaker.state == "open"  # the query server's answer says nothing of it


# -- the express slot's share of the query server ------------------------------------------


@pytest.mark.parametrize(("share", "second_goes"), [(0.01, "passages"), (1.0, "queries")])
def test_past_its_share_of_the_query_server_a_small_write_waits_its_turn(
    servers: tuple[FaultServer, FaultServer], share: float, second_goes: str
) -> None:
    """A writer without a pause took the express slot for every turn, and every search on
    the query server waited behind its passages. Each passage here holds the query server
    0.05 s, more than 1 % of the 4 s window: after one, the next write waits for the
    importer's request and goes to the passage server. A share of 1 is the old slot."""
    passages, queries = servers
    queries.mode, queries.delay_s = "slow", 0.05
    with embedder(passages, queries, express_share=share) as client:
        with importer_holding(client.lanes) as released, bulk_owner("bob"):
            [first] = client.embed_each(["User: I keep bees"])
            threading.Timer(0.3, released.set).start()
            began = time.monotonic()
            [second] = client.embed_each(["User: and two cats"])
            took = time.monotonic() - began
        requests, _, deferred = client.express_use.counts
    assert isinstance(first, list) and isinstance(second, list)
    sent = {"queries": [r.body["input"] for r in queries.requests]}
    sent["passages"] = [r.body["input"] for r in passages.requests]
    assert sent[second_goes][-1] == ["User: and two cats"]
    if second_goes == "passages":
        assert sent["queries"] == [["User: I keep bees"]]
        assert took >= 0.2  # after the importer's request
        assert (requests, deferred) == (1, 1)
    else:
        assert (requests, deferred) == (2, 0)


def test_past_its_share_a_small_write_is_not_sent_to_the_query_server_for_an_open_circuit(
    servers: tuple[FaultServer, FaultServer],
) -> None:
    """The share bounds every passage on the query server: with the passage circuit open a
    write past it fails at once (stored without a vector, embedded in the background)."""
    passages, queries = servers
    passages.mode = "500"
    queries.mode, queries.delay_s = "slow", 0.05
    breaker = CircuitBreaker(threshold=1, cooldown_s=60)
    with embedder(passages, queries, breaker=breaker, express_share=0.01) as client:
        client.embed_each(["an import " * 100])  # opens the passage circuit
        with bulk_owner("bob"):
            [vector] = client.embed_each(["one turn"])
            [refused] = client.embed_each(["another turn"])
    assert isinstance(vector, list) and isinstance(refused, CircuitOpenError)
    assert [r.body["input"] for r in queries.requests] == [["one turn"]]
