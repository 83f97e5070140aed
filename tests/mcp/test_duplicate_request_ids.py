"""Two requests in flight with the same JSON-RPC id in one MCP session: the second is
refused at once (a JSON-RPC error naming the id), the first is answered.

Before, the SDK filed the second's answer stream under the id the first held: one of them
never got an answer and its stream stayed open, a ``: ping`` every 15 s, for good, while
the write landed. A real server process on the session's PostgreSQL; the embedding API is
the fault-injection fake in its slow mode, so the first call is still running when the
second arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from memstrata.mcp.duplicate_ids import DUPLICATE_ID, RequestIds
from tests.mcp.served import SECRET
from tests.mcp.test_shutdown_sessions import index_turn, open_session, serving, sse_messages
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def test_a_second_request_with_an_id_in_flight_is_refused_and_the_first_answered(
    tmp_path: Path, pg_url: str, fake: FaultServer
) -> None:
    fake.delay_s = 2.0
    with (
        serving(tmp_path, pg_url, fake, grace_s=5, secret=SECRET) as served,
        httpx.Client(timeout=30) as client,
    ):
        headers = open_session(client, served.url, "dup-ana")
        url = f"{served.url}/mcp"
        asked = len(fake.requests)
        fake.mode = "slow"
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.post, url, json=index_turn("s-dup", 7), headers=headers)
            deadline = time.monotonic() + 10
            while len(fake.requests) == asked and time.monotonic() < deadline:
                time.sleep(0.02)
            assert len(fake.requests) > asked, "the first call never called the embedding API"
            # The same id as a string: the SDK files both under "7".
            for same in (7, "7"):
                began = time.monotonic()
                second = client.post(url, json=index_turn("s-dup2", same), headers=headers)
                assert time.monotonic() - began < 1.5, "the duplicate waited for the first"
                assert second.status_code == 409, second.text
                body = second.json()
                assert body["code"] == DUPLICATE_ID
                assert body["id"] == same
                assert body["error"]["code"] == -32600
                assert repr(same) in body["error"]["message"]
                assert "unique" in body["error"]["message"]
            answer = first.result(timeout=30)
        assert answer.status_code == 200
        [message] = sse_messages(answer.text)
        assert message["id"] == 7 and message["result"]["isError"] is False, message

        # Once answered, the id is free again.
        fake.mode = "ok"
        again = client.post(url, json=index_turn("s-dup3", 7), headers=headers)
        assert again.status_code == 200, again.text
        [message] = sse_messages(again.text)
        assert message["id"] == 7 and "result" in message

        refused = served.events("mcp.request.refused")
        assert [(e["status"], e["code"], e["user_id"]) for e in refused] == [
            (409, DUPLICATE_ID, "dup-ana"),
            (409, DUPLICATE_ID, "dup-ana"),
        ], served.stderr()
        assert "request id 7 " in refused[0]["cause"]
        assert "request id '7' " in refused[1]["cause"]


@pytest.mark.anyio
async def test_an_id_is_held_per_session_and_user_until_its_answer_has_ended() -> None:
    ids = RequestIds()
    first = await ids.take("ana", "s1", 7)
    assert first is not None
    assert await ids.take("ana", "s1", "7") is None  # the SDK's str(id): the same
    # Another session, or another user naming the same session id (the SDK answers 404).
    others = [await ids.take("ana", "s2", 7), await ids.take("bo", "s1", 7)]
    assert None not in others
    # Its answer has gone out, its call not yet returned: the next request waits for that.
    first.answered = True
    reuse = asyncio.create_task(ids.take("ana", "s1", 7))
    await asyncio.sleep(0.05)
    assert not reuse.done()
    ids.give_back(first)
    second = await asyncio.wait_for(reuse, 1)
    assert second is not None and second is not first
    for held in [second, *others]:
        assert held is not None
        ids.give_back(held)
    assert len(ids) == 0
