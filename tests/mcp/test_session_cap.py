"""The per-user cap on open MCP sessions (``MEMSTRATA_MCP_MAX_SESSIONS_PER_USER``).

Over real HTTP: the app (real runtime, real PostgreSQL) under uvicorn, driven by the SDK's
own streamable HTTP client and by raw requests where the test needs a session id in hand.
The ledger's bookkeeping is also checked alone with a clock the test sets, and against a
stand-in for the SDK where the fault (a session the SDK lost) must be injected.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

from memstrata.api import create_app
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.mcp.counted import serve_counted
from memstrata.mcp.sessions import SessionLedger
from memstrata.runtime import Memstrata
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.reliability.harness import serve

pytestmark = pytest.mark.anyio

Bearer = Callable[[str], dict[str, str]]


@contextmanager
def running(mem: Memstrata, settings: Settings, **update: Any) -> Iterator[str]:
    """``memstrata serve``'s app with ``update`` applied to the settings; the base URL."""
    tuned = settings.model_copy(update={"web_ui": False, **update})
    with serve(create_app(tuned, memstrata=mem)) as url:
        yield url


@pytest.fixture
def bearer(settings: Settings) -> Bearer:
    return lambda user: {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


@asynccontextmanager
async def mcp_client(
    url: str, headers: dict[str, str], mode: str = "legacy"
) -> AsyncIterator[Client]:
    """The SDK's client; ``legacy`` (the initialize handshake) is what opens a session."""
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def initialize(url: str, headers: dict[str, str]) -> httpx.Response:
    """A raw initialize: on 200 the session stays open until DELETE or idle expiry."""
    return httpx.post(f"{url}/mcp", headers={**MCP_HEADERS, **headers}, json=INIT, timeout=30)


def delete(url: str, headers: dict[str, str], session_id: str) -> httpx.Response:
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    return httpx.delete(f"{url}/mcp", headers={**MCP_HEADERS, **headers, **session}, timeout=30)


async def test_one_session_too_many_is_refused_and_other_users_go_on(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    with running(mem, settings, mcp_max_sessions_per_user=2) as url:
        async with AsyncExitStack() as stack:
            alice = [
                await stack.enter_async_context(mcp_client(url, bearer("cap-alice")))
                for _ in range(2)
            ]
            refused = initialize(url, bearer("cap-alice"))
            assert refused.status_code == 429
            assert "mcp-session-id" not in refused.headers
            body = refused.json()
            assert body["code"] == "too_many_sessions"
            assert body["detail"].startswith("too many open MCP sessions: this user already")
            for hint in ("MEMSTRATA_MCP_MAX_SESSIONS_PER_USER", "Mcp-Session-Id", "DELETE /mcp"):
                assert hint in body["detail"]
            # the one error shape, and a JSON-RPC error whose message MCP clients show
            assert body["message"] == body["detail"]
            assert (body["jsonrpc"], body["id"]) == ("2.0", None)
            assert body["error"]["message"] == body["detail"]
            with pytest.raises(BaseExceptionGroup) as raised:
                async with mcp_client(url, bearer("cap-alice")):
                    pass
            assert raised.group_contains(MCPError, match="too many open MCP sessions")

            async with mcp_client(url, bearer("cap-bob")) as bob:
                read = await bob.call_tool("memory_read", {"name": "memory"})
                assert not read.is_error, read.content
            for client in alice:  # the open sessions are untouched
                assert len((await client.list_tools()).tools) == 9
            # The per-request protocol (the SDK's default mode) opens no session: no cap.
            async with mcp_client(url, bearer("cap-alice"), mode="auto") as modern:
                assert len((await modern.list_tools()).tools) == 9


async def test_ending_a_session_frees_its_slot(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    alice = bearer("cap-alice")
    with running(mem, settings, mcp_max_sessions_per_user=2) as url:
        first = initialize(url, alice)
        assert first.status_code == 200
        async with mcp_client(url, alice):
            assert initialize(url, alice).status_code == 429
            assert delete(url, alice, first.headers["mcp-session-id"]).status_code == 200
            third = initialize(url, alice)
            assert third.status_code == 200, third.text
            assert initialize(url, alice).status_code == 429
        # the SDK client sent DELETE when it closed
        assert initialize(url, alice).status_code == 200
        assert initialize(url, alice).status_code == 429
        # another user's token cannot end alice's session (404, as if it did not exist)
        other = delete(url, bearer("cap-bob"), third.headers["mcp-session-id"])
        assert other.status_code == 404
        assert initialize(url, alice).status_code == 429


async def test_an_idle_session_expires_and_frees_its_slot(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    alice = bearer("cap-alice")
    idle_s = 1.0
    with running(
        mem, settings, mcp_max_sessions_per_user=1, mcp_session_idle_timeout_s=idle_s
    ) as url:
        # The session's last activity is after this instant, so it cannot expire before
        # before + idle_s: the bounds below hold however slowly a loaded machine answers.
        before = time.monotonic()
        opened = initialize(url, alice)
        assert opened.status_code == 200
        second, (_, answered) = timed(lambda: initialize(url, alice))
        if answered < before + idle_s:
            assert second.status_code == 429
        deadline = before + 20  # generous for a loaded machine; normally ~idle_s
        while (again := initialize(url, alice)).status_code == 429:
            assert time.monotonic() < deadline, "the idle session never freed its slot"
            time.sleep(0.05)
        assert again.status_code == 200
        assert time.monotonic() - before >= idle_s
        # the SDK ended it too: its id is unknown now
        gone = delete(url, alice, opened.headers["mcp-session-id"])
        assert gone.status_code == 404


def ping(url: str, headers: dict[str, str], session_id: str) -> httpx.Response:
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    return httpx.post(
        f"{url}/mcp", headers={**MCP_HEADERS, **headers, **session}, json=call, timeout=30
    )


Span = tuple[float, float]


def timed(request: Callable[[], httpx.Response]) -> tuple[httpx.Response, Span]:
    """The response, and the monotonic times just before the request and just after it:
    the server runs in this process, so its ledger reads the same clock."""
    sent = time.monotonic()
    response = request()
    return response, (sent, time.monotonic())


def assert_retry_after(refused: httpx.Response, used: Span, asked: Span, idle_s: float) -> None:
    """``Retry-After`` is when the session last ``used`` (request start, end) idles out, as
    seen by the refused request (``asked``), rounded up. The server notes the last use
    just after it answers (a loaded machine may delay that), hence the allowance on the
    upper bound; it is well under the 1.5 s and more between the last uses compared."""
    assert refused.status_code == 429, refused.text
    lowest = used[0] + idle_s - asked[1]
    highest = used[1] + 0.25 + idle_s - asked[0]
    retry_after = int(refused.headers["retry-after"])
    assert math.ceil(lowest) <= retry_after <= math.ceil(highest), (lowest, highest)
    assert f"ends by itself in {retry_after} s (Retry-After)" in refused.json()["detail"]


async def test_a_refused_initialize_says_when_the_least_recently_used_session_idles_out(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    alice = bearer("cap-alice")
    # Long enough that the first session, used 3.5 s and three requests before the ping
    # below, is still alive on a loaded machine (4 s left it ~0.5 s: it flaked with 404).
    idle_s = 8.0
    with running(
        mem, settings, mcp_max_sessions_per_user=2, mcp_session_idle_timeout_s=idle_s
    ) as url:
        first, first_used = timed(lambda: initialize(url, alice))
        assert first.status_code == 200
        time.sleep(2)  # over a second apart, so the two sessions' Retry-After differ
        second, second_used = timed(lambda: initialize(url, alice))
        assert second.status_code == 200
        refused, asked = timed(lambda: initialize(url, alice))
        assert_retry_after(refused, first_used, asked, idle_s)  # about 6 s
        detail = refused.json()["detail"]
        assert "To free a slot sooner, end a session you no longer need with DELETE" in detail
        assert refused.json()["error"]["message"] == detail

        time.sleep(1.5)
        used, _ = timed(lambda: ping(url, alice, first.headers["mcp-session-id"]))
        assert used.status_code == 200, used.text
        # the first session was just used: the second is the least recently used now
        refused, asked = timed(lambda: initialize(url, alice))
        assert_retry_after(refused, second_used, asked, idle_s)  # about 7 s

        # the SDK's client shows the message, with the wait and how to free a slot sooner
        with pytest.raises(BaseExceptionGroup) as raised:
            async with mcp_client(url, alice):
                pass
        assert raised.group_contains(
            MCPError, match=r"ends by itself in \d s \(Retry-After\)\. .*DELETE /mcp"
        )
        # a client that waits as told finds the slot free
        time.sleep(int(refused.headers["retry-after"]))
        assert initialize(url, alice).status_code == 200


async def test_with_no_idle_session_retry_after_is_the_whole_idle_timeout(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    alice = bearer("cap-alice")
    with running(mem, settings, mcp_max_sessions_per_user=1, mcp_session_idle_timeout_s=7.5) as url:
        opened = initialize(url, alice)
        assert opened.status_code == 200
        session = {"mcp-session-id": opened.headers["mcp-session-id"]}
        listen = {**MCP_HEADERS, **alice, **session, "mcp-protocol-version": "2025-06-18"}
        # an open GET stream keeps the session in use: it cannot idle out
        with httpx.stream("GET", f"{url}/mcp", headers=listen, timeout=30) as stream:
            assert stream.status_code == 200
            refused = initialize(url, alice)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "8"
        assert "none of this user's sessions is idle now" in refused.json()["detail"]
        assert "none ends by itself within 8 s (Retry-After)" in refused.json()["detail"]


def test_retry_after_counts_from_the_least_recently_used_idle_session() -> None:
    now = [99.0]
    ledger = SessionLedger(per_user=2, idle_timeout_s=10, clock=lambda: now[0])
    ledger.opened("bob", "b1", reserved=False)
    ledger.finish("b1", ended=False)  # idle from t=99, before alice's: not hers to count
    for session_id in ("s1", "s2"):
        assert ledger.reserve("alice")
        ledger.opened("alice", session_id, reserved=True)
    assert ledger.next_expiry_s("alice") is None  # both in flight: neither can expire
    now[0] = 100.0
    ledger.finish("s1", ended=False)  # idle from t=100
    now[0] = 103.0
    ledger.finish("s2", ended=False)  # idle from t=103
    now[0] = 104.5
    assert ledger.next_expiry_s("alice") == 5.5
    assert ledger.begin("alice", "s1")  # s1 in use again: s2 is the next to idle out
    assert ledger.next_expiry_s("alice") == 8.5
    assert ledger.next_expiry_s("carol") is None


def test_the_ledger_counts_until_the_end_or_the_idle_timeout() -> None:
    now = [100.0]
    ledger = SessionLedger(per_user=2, idle_timeout_s=10, clock=lambda: now[0])
    assert ledger.reserve("alice") and ledger.reserve("alice")
    assert not ledger.reserve("alice")
    assert ledger.reserve("bob")  # one user's cap is not another's
    ledger.release("bob")
    ledger.opened("alice", "s1", reserved=True)
    ledger.release("alice")  # the second opening request opened nothing
    assert ledger.held("alice") == 1
    ledger.finish("s1", ended=False)  # idle from t=100
    assert not ledger.begin("bob", "s1")  # another user's token touches nothing
    now[0] = 105.0
    assert ledger.begin("alice", "s1")  # a GET stream: in flight, so never idle
    now[0] = 200.0
    assert ledger.held("alice") == 1
    ledger.finish("s1", ended=False)  # idle from t=200
    now[0] = 209.9
    assert ledger.held("alice") == 1
    now[0] = 210.0
    assert ledger.held("alice") == 0
    assert not ledger.begin("alice", "s1")  # forgotten, as the SDK forgot it

    ledger.opened("alice", "s2", reserved=False)  # opened without a slot: still counted
    assert ledger.begin("alice", "s2")
    ledger.finish("s2", ended=True)  # DELETE while the opening request was in flight
    ledger.finish("s2", ended=False)  # ...which then ends: nothing left to count
    assert ledger.held("alice") == 0


class LosingSdk:
    """Stands in for the SDK's session manager: opens a session on any request without
    an id, then answers 404 for it, as the SDK does for a session that crashed."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        opening = not any(name == b"mcp-session-id" for name, _ in scope["headers"])
        status = 200 if opening else 404
        headers = [(b"mcp-session-id", b"lost")] if opening else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


async def _request(ledger: SessionLedger, session_id: str | None = None) -> int:
    headers = [(b"mcp-session-id", session_id.encode())] if session_id else []
    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await serve_counted(ledger, LosingSdk(), "alice", scope, receive, send)
    status: int = sent[0]["status"]
    return status


async def test_a_session_the_sdk_lost_frees_its_slot_at_the_next_request() -> None:
    ledger = SessionLedger(per_user=1, idle_timeout_s=3600)
    assert await _request(ledger) == 200
    assert await _request(ledger) == 429
    assert await _request(ledger, "lost") == 404
    assert ledger.held("alice") == 0
    assert await _request(ledger) == 200
