"""When a request stops counting against the session caps: when its answer has been sent
in full, not when the SDK's ASGI call returns a moment later; and a session whose
``initialize`` the SDK answered with a JSON-RPC error inside a 200 does not count at all.

Over real HTTP (the app, real runtime and PostgreSQL, under uvicorn; the real SDK behind
the gate). The moment between a complete answer and the SDK's call returning is too short
to hit by chance, so :class:`HeldOpen` (fault injection around the SDK's ASGI entry)
stretches it until the test lets go, and :class:`SlowToEnd` stretches the time the SDK
takes to end a session. Stand-ins for the SDK inject what real clients
cannot make happen on cue: a call that raises, or a client gone, after the last chunk.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio.to_thread
import httpx
import pytest
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memstrata.api import create_app
from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.mcp.counted import serve_counted
from memstrata.mcp.http import MCP_PATH, BearerGate
from memstrata.mcp.sessions import SessionLedger
from memstrata.runtime import Memstrata
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.mcp.test_session_cap import Bearer, initialize, ping
from tests.reliability.harness import serve

pytestmark = pytest.mark.anyio

HOLD_S = 30  # the longest a held request waits for the test (a failed test lets go)
END_DELAY_S = 0.5  # how late :class:`SlowToEnd` lets a session end


@pytest.fixture
def bearer(settings: Settings) -> Bearer:
    return lambda user: {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


class AroundSdk:
    """Fault injection around the SDK's ASGI entry, behind the gate (:func:`around_sdk`
    sets :attr:`app`); as it stands, it passes every request on."""

    app: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def close(self) -> None:
        """Let go of anything still held (a failed test)."""


class HeldOpen(AroundSdk):
    """The next request to arrive once :attr:`armed` is set returns only when
    :attr:`release` is set, after the SDK has sent its whole answer."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Chosen on arrival, so a request still finishing when the test arms is not held.
        hold = self.armed.is_set()
        self.armed.clear()
        await self.app(scope, receive, send)
        if hold:
            self.holding.set()
            await anyio.to_thread.run_sync(self.release.wait, HOLD_S)

    def close(self) -> None:
        self.release.set()


class SlowToEnd(AroundSdk):
    """Every DELETE (how the gate ends a session in the SDK) reaches the SDK late: a
    client told a session has ended before it has would still find it there."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "DELETE":
            await anyio.sleep(END_DELAY_S)
        await self.app(scope, receive, send)


@contextmanager
def around_sdk(
    mem: Memstrata, settings: Settings, wrapper: AroundSdk, **update: Any
) -> Iterator[str]:
    """``memstrata serve``'s app with ``update`` applied and ``wrapper`` between its gate
    and the SDK; the base URL."""
    tuned = settings.model_copy(update={"web_ui": False, **update})
    app = create_app(tuned, memstrata=mem)
    mcp_path = tuned.api_prefix + MCP_PATH
    route = next(r for r in app.router.routes if isinstance(r, Route) and r.path == mcp_path)
    gate = route.endpoint
    assert isinstance(gate, BearerGate)
    wrapper.app = gate.app
    gate.app = wrapper
    with serve(app) as url:
        try:
            yield url
        finally:
            wrapper.close()


@pytest.mark.parametrize("held_request", ["initialize", "ping"])
def test_a_session_whose_answer_has_been_sent_is_idle_for_the_next_initialize(
    mem: Memstrata, settings: Settings, bearer: Bearer, held_request: str
) -> None:
    """On a full server, the session that has just answered (its opening request or a
    later one) makes room at once; it used to count as busy until the SDK's call
    returned, and the new session got a spurious 503."""
    held = HeldOpen()
    with around_sdk(mem, settings, held, mcp_max_sessions=1) as url:
        alice = bearer("race-alice")
        if held_request == "initialize":
            held.armed.set()
        first = initialize(url, alice)
        assert first.status_code == 200, first.text
        alice_id = first.headers["mcp-session-id"]
        if held_request == "ping":
            held.armed.set()
            assert ping(url, alice, alice_id).status_code == 200
        assert held.holding.wait(HOLD_S)  # alice's answer is complete; its call is not over

        bob = initialize(url, bearer("race-bob"))
        assert bob.status_code == 200, bob.text
        held.release.set()
        # alice's idle session made room (ended as by its client's DELETE)
        gone = ping(url, alice, alice_id)
        assert gone.status_code == 404, gone.text
        assert ping(url, bearer("race-bob"), bob.headers["mcp-session-id"]).status_code == 200


BAD_INIT = {**INIT, "params": {"capabilities": {}}}  # no protocolVersion, no clientInfo


def _error_events(response: httpx.Response) -> list[dict[str, Any]]:
    events = [line.removeprefix("data: ") for line in response.text.splitlines()]
    found = [json.loads(data) for data in events if data.startswith("{")]
    return [event["error"] for event in found if "error" in event]


def test_a_failed_initialize_holds_no_slot_and_its_session_is_ended(
    mem: Memstrata, settings: Settings, bearer: Bearer, caplog: pytest.LogCaptureFixture
) -> None:
    """A client retrying a bad ``initialize`` does not lock its user out: each failed one
    opened a session the SDK kept, which counted against the cap until it idled out."""
    caplog.set_level(logging.INFO, logger="memstrata.mcp")
    alice = bearer("bad-init-alice")
    with around_sdk(mem, settings, SlowToEnd(), mcp_max_sessions_per_user=2) as url:
        for _attempt in range(3):
            bad = httpx.post(
                f"{url}/mcp", headers={**MCP_HEADERS, **alice}, json=BAD_INIT, timeout=30
            )
            # the SDK's answer, as it was: a 200 with an id and a JSON-RPC error
            assert bad.status_code == 200, bad.text
            assert [error["code"] for error in _error_events(bad)] == [-32602]
            # ended before its answer ended, however long the SDK takes to end it
            gone = ping(url, alice, bad.headers["mcp-session-id"])
            assert gone.status_code == 404, gone.text
        good = initialize(url, alice)
        assert good.status_code == 200, good.text
        assert initialize(url, alice).status_code == 200  # the cap is 2: both free
        assert initialize(url, alice).status_code == 429
    failed = [r for r in caplog.records if r.getMessage() == "mcp.session.initialize_failed"]
    assert len(failed) == 3


async def answers_then_raises(scope: Scope, receive: Receive, send: Send) -> None:
    """Stands in for the SDK: answers an event stream in two chunks (opening session
    ``s1`` when the request names none), then raises."""
    opening = not any(name == b"mcp-session-id" for name, _ in scope["headers"])
    headers = [(b"mcp-session-id", b"s1")] if opening else []
    headers.append((b"content-type", b"text/event-stream"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    raise RuntimeError("the SDK broke after its answer")


async def _serve(ledger: SessionLedger, fault: str, session_id: str | None = None) -> None:
    """One request through the gate's counting to :func:`answers_then_raises`; with
    ``fault="client_gone"`` the client has gone by the last chunk, so sending it raises."""
    headers = [(b"mcp-session-id", session_id.encode())] if session_id else []
    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        if fault == "client_gone" and message.get("more_body") is False:
            raise OSError("the client has gone")

    with pytest.raises((RuntimeError, OSError)):
        await serve_counted(ledger, answers_then_raises, "alice", scope, receive, send)


@pytest.mark.parametrize("fault", ["sdk_raises", "client_gone"])
async def test_a_request_that_fails_at_the_end_of_its_answer_is_counted_out_once(
    fault: str,
) -> None:
    ledger = SessionLedger(per_user=2, idle_timeout_s=600)
    # The SDK discards a session whose opening request raised: the ledger forgets it too.
    await _serve(ledger, fault)
    assert ledger.held("alice") == 0 and ledger.total == 0
    # A session with a GET stream open (one request in flight) ...
    ledger.opened("alice", "s1", reserved=False)
    ledger.finish("s1", ended=False)
    assert ledger.begin("alice", "s1")
    # ... and a POST that fails at the end of its answer: counted out once, not twice, so
    # the open stream still keeps the session from idling out.
    await _serve(ledger, fault, "s1")
    assert ledger.next_expiry_s("alice") is None
    ledger.finish("s1", ended=False)  # the stream ends
    assert ledger.next_expiry_s("alice") is not None
    assert ledger.held("alice") == 1
