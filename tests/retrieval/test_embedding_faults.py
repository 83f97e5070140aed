"""The embedding client's requests and its faults on the fake API of ``fault_server.py``:
request shape, timeouts, retries, refused and malformed answers, a stalling API."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from memstrata.config import EmbeddingModelSpec
from memstrata.config_embedding import QUERY_TIMEOUT_TOKENS
from memstrata.errors import EmbeddingError, EmbeddingUnavailableError
from memstrata.retrieval.chunk import CHUNK_TOKENS
from memstrata.retrieval.embedding_transport import query_timeout
from memstrata.retrieval.embeddings import EmbeddingOutageError, OpenAICompatibleEmbedder

from .fault_embedder import fault_embedder
from .fault_server import FaultServer

pytestmark = pytest.mark.timeout(60)


# -- request shape (fault server used as a recorder) ----------------------------------------


def test_request_carries_model_input_type_and_bearer_key(fault: FaultServer) -> None:
    with fault_embedder(
        fault, api_key="sk-test", query_input_type="query", passage_input_type="passage"
    ) as embedder:
        embedder.embed(["q"], "query")
        embedder.embed(["p1", "p2"], "passage")

    first, second = fault.requests
    assert first.path == "/v1/embeddings"
    assert first.body == {"model": "fake-model", "input": ["q"], "input_type": "query"}
    assert second.body == {"model": "fake-model", "input": ["p1", "p2"], "input_type": "passage"}
    assert first.headers["Authorization"] == "Bearer sk-test"


def test_symmetric_model_without_key_gets_neither_input_type_nor_auth(
    fault: FaultServer,
) -> None:
    with fault_embedder(fault) as embedder:
        embedder.embed(["q"], "query")

    (request,) = fault.requests
    assert request.body == {"model": "fake-model", "input": ["q"]}
    assert "Authorization" not in request.headers


def test_response_is_reordered_by_index(fault: FaultServer) -> None:
    fault.mode = "reversed"
    with fault_embedder(fault) as embedder:
        vectors = embedder.embed(["a", "b", "c"], "passage")
    # The fake writes each input's position into component 0.
    assert [v[0] for v in vectors] == [0.0, 1.0, 2.0]


# -- faults ---------------------------------------------------------------------------------


def test_hanging_server_times_out_quickly(fault: FaultServer) -> None:
    fault.mode = "hang"
    started = time.monotonic()
    with (
        fault_embedder(fault, timeout_s=0.3, max_retries=2) as embedder,
        pytest.raises(EmbeddingUnavailableError, match=r"timed out after 0.3 s"),
    ):
        embedder.embed(["x"], "query")
    assert time.monotonic() - started < 1.5
    # Not retried: a hung API must not cost a caller several timeouts.
    assert len(fault.requests) == 1


def test_a_long_query_gets_time_in_proportion_to_its_length(fault: FaultServer) -> None:
    """An API's cost grows with the text: a 4,000-character query (the longest search
    takes) on a busy machine outlasted the short-query timeout every time, and each such
    timeout counted toward the circuit every user's writes share."""
    fault.mode, fault.delay_s = "slow-by-length", 0.15  # 0.6 s; the timeout: 4 × 0.3 s
    long_query = "where did we go hiking " * 175  # 4,025 characters
    with fault_embedder(fault, timeout_s=0.3, max_retries=0) as embedder:
        assert len(embedder.embed([long_query], "query")[0]) == 32
        fault.mode = "hang"  # a short one still gets the short timeout
        started = time.monotonic()
        with pytest.raises(EmbeddingUnavailableError, match=r"timed out after 0.3 s"):
            embedder.embed(["hiking"], "query")
        assert time.monotonic() - started < 1.0


def test_query_timeout_grows_by_blocks_of_tokens_up_to_a_chunk() -> None:
    assert query_timeout(2.0, "hiking") == 2.0
    assert query_timeout(2.0, "word " * 127) == 2.0
    assert query_timeout(2.0, "word " * 129) == 4.0
    assert query_timeout(2.0, "字" * 4000) == 2.0 * CHUNK_TOKENS // QUERY_TIMEOUT_TOKENS


def test_http_500_is_retried_then_reported_with_url_and_message(fault: FaultServer) -> None:
    fault.mode = "500"
    with fault_embedder(fault, max_retries=2) as embedder, pytest.raises(EmbeddingError) as info:
        embedder.embed(["x"], "passage")
    message = str(info.value)
    assert fault.base_url + "/embeddings" in message
    assert "HTTP 500: model crashed" in message
    assert len(fault.requests) == 3


@pytest.mark.parametrize("mode", ["500", "429-then-ok"])
def test_a_search_query_is_never_retried(fault: FaultServer, mode: str) -> None:
    """Its timeout is the whole wait before BM25 only: each retry (and a Retry-After)
    made every search of an outage wait about twice as long."""
    fault.mode = mode  # type: ignore[assignment]
    with fault_embedder(fault, max_retries=2) as embedder, pytest.raises(EmbeddingError):
        embedder.embed(["x"], "query")
    assert len(fault.requests) == 1


@pytest.mark.parametrize("mode", ["500-then-ok", "429-then-ok"])
def test_transient_failure_is_retried_and_succeeds(fault: FaultServer, mode: str) -> None:
    fault.mode = mode  # type: ignore[assignment]
    with fault_embedder(fault, max_retries=2) as embedder:
        vectors = embedder.embed(["a", "b"], "passage")
    assert [v[0] for v in vectors] == [0.0, 1.0]
    assert len(fault.requests) == 2


def test_no_retries_when_max_retries_is_zero(fault: FaultServer) -> None:
    fault.mode = "500-then-ok"
    with fault_embedder(fault, max_retries=0) as embedder, pytest.raises(EmbeddingError):
        embedder.embed(["a"], "passage")
    assert len(fault.requests) == 1


def test_http_400_is_not_retried(fault: FaultServer) -> None:
    fault.mode = "400"
    with (
        fault_embedder(fault, max_retries=3) as embedder,
        pytest.raises(EmbeddingError, match="rejected with HTTP 400: input is too long"),
    ):
        embedder.embed(["x"], "query")
    assert len(fault.requests) == 1


def test_connection_refused_is_an_embedding_error() -> None:
    with FaultServer() as closed:
        url = closed.base_url  # the port is free again once the server stops
    spec = EmbeddingModelSpec(name="m", base_url=url)
    started = time.monotonic()
    with (
        OpenAICompatibleEmbedder(spec, max_retries=1, backoff_s=0.01) as embedder,
        pytest.raises(EmbeddingError, match=r"failed after 2 attempt\(s\): ConnectError"),
    ):
        embedder.embed(["x"], "passage")
    assert time.monotonic() - started < 3.0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("malformed-json", "not valid JSON"),
        ("no-data", "without a 'data' list"),
        ("wrong-count", r"returned 2 embedding\(s\) for 3 input\(s\)"),
        ("mixed-dims", r"different lengths \[31, 32\]"),
        ("nan", "NaN or infinity in the embedding of input 0"),
        ("huge", r"a number beyond float4's range \(±3\.402823e\+38\), .* of input 0"),
        ("zeros", "a vector without a direction .* for input 0"),
        ("non-list", "returned a str embedding for input 0, not a list"),
    ],
)
def test_malformed_response_is_an_embedding_error_and_not_retried(
    fault: FaultServer, mode: str, expected: str
) -> None:
    fault.mode = mode  # type: ignore[assignment]
    started = time.monotonic()
    with fault_embedder(fault) as embedder, pytest.raises(EmbeddingError, match=expected) as info:
        embedder.embed(["a", "b", "c"], "passage")
    assert fault.base_url + "/embeddings" in str(info.value)
    assert len(fault.requests) == 1
    assert time.monotonic() - started < 3.0


# -- a stalling API, a query server of its own ------------------------------------------------


def test_an_answer_that_trickles_in_times_out_as_a_whole(fault: FaultServer) -> None:
    """httpx's timeout bounds each read: a body sent a byte every 0.2 s never timed out,
    and held the one passage slot every user's writes wait for."""
    fault.mode, fault.delay_s = "trickle", 0.2
    started = time.monotonic()
    with (
        fault_embedder(fault, timeout_s=1.0) as embedder,
        pytest.raises(EmbeddingOutageError, match="timed out after 1 s"),
    ):
        embedder.embed(["x"], "passage")
    assert time.monotonic() - started < 3.0


def test_writes_do_not_wait_for_searches_on_a_query_server_of_their_own(
    fault: FaultServer,
) -> None:
    """A slow query server held every user's writes (they yielded to the searches in
    flight) and its stuck requests took the shared pool; its failures were reported under
    the document server's address."""
    with FaultServer() as queries:
        queries.mode, queries.delay_s = "slow", 2.0
        spec = EmbeddingModelSpec(
            name="fake-model", base_url=fault.base_url, query_base_url=queries.base_url
        )
        with OpenAICompatibleEmbedder(spec, query_timeout_s=1.0, max_retries=0) as embedder:

            def search() -> None:
                with contextlib.suppress(EmbeddingError):  # its own 1-s timeout
                    embedder.embed(["q"], "query")

            searching = threading.Thread(target=search)
            searching.start()
            while embedder.lanes.in_flight[0] == 0:
                time.sleep(0.01)
            started = time.monotonic()
            embedder.embed(["a write"], "passage")
            assert time.monotonic() - started < 0.5  # not after the search's 1 s
            searching.join(5)
            with pytest.raises(EmbeddingOutageError) as failed:
                embedder.embed(["q"], "query")
    assert queries.base_url in str(failed.value)
    assert fault.base_url not in str(failed.value)
