"""A server-wide cap on open MCP sessions: a new session ends the least recently used idle
session of anyone, or is refused (503) while every session has a request in flight.

Before, the SDK's own cap (10 000 sessions, ~90 KB each, 880 MB) answered every user's
new session 503 once reached, including users who held none."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.mcp.owners import end_as_owner
from memstrata.mcp.sessions import Evicted, SessionLedger
from memstrata.runtime import Memstrata
from tests.mcp.messages import MCP_HEADERS
from tests.mcp.test_session_cap import Bearer, initialize, running


def opened(ledger: SessionLedger, user: str, session: str) -> None:
    assert ledger.reserve(user)
    assert ledger.make_room() is None
    ledger.opened(user, session, reserved=True)


def test_the_least_recently_used_idle_session_makes_room() -> None:
    now = [0.0]
    ledger = SessionLedger(per_user=5, idle_timeout_s=600, clock=lambda: now[0], per_server=2)
    opened(ledger, "alice", "a1")
    ledger.finish("a1", ended=False)  # idle since t=0
    opened(ledger, "bob", "b1")
    now[0] = 5.0
    ledger.finish("b1", ended=False)  # idle since t=5
    assert ledger.total == 2
    assert ledger.reserve("carol")  # carol holds none: her per-user cap is not the issue
    # the oldest idle session goes, whoever holds it
    assert ledger.make_room() == Evicted("a1", "alice")
    ledger.opened("carol", "c1", reserved=True)
    assert ledger.total == 2 and ledger.held("alice") == 0
    assert not ledger.begin("alice", "a1")  # forgotten: the SDK answers it 404


def test_with_every_session_busy_a_new_one_is_refused_and_nothing_is_held() -> None:
    ledger = SessionLedger(per_user=5, idle_timeout_s=600, per_server=1)
    opened(ledger, "alice", "a1")  # its opening request still in flight: not idle
    assert ledger.reserve("bob")
    with pytest.raises(LookupError):
        ledger.make_room()
    ledger.release("bob")
    assert ledger.total == 1 and ledger.held("bob") == 0


@pytest.mark.anyio
async def test_a_session_the_sdk_would_not_end_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The new session is served all the same; the old one ends at its idle timeout."""

    async def broken(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("the SDK broke")

    async def refusing(scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["method"] == "DELETE" and scope["user"].access_token.subject == "alice"
        assert dict(scope["headers"]) == {b"mcp-session-id": b"a1", b"host": b"127.0.0.1:1"}
        await send({"type": "http.response.start", "status": 421, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    trigger: Scope = {"type": "http", "method": "POST", "headers": [(b"host", b"127.0.0.1:1")]}
    caplog.set_level(logging.WARNING, logger="memstrata.mcp.owners")
    for app in (broken, refusing):
        await end_as_owner(app, "a1", "alice", trigger)
    failed = [r for r in caplog.records if r.getMessage() == "mcp.session.end_failed"]
    assert len(failed) == 2


def test_without_a_server_cap_nothing_is_ended() -> None:
    ledger = SessionLedger(per_user=5, idle_timeout_s=600)
    for n in range(20):
        opened(ledger, f"u{n}", f"s{n}")
        ledger.finish(f"s{n}", ended=False)
    assert ledger.total == 20


@pytest.fixture
def bearer(settings: Settings) -> Bearer:
    return lambda user: {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


def _tools_list(url: str, headers: dict[str, str], session_id: str) -> httpx.Response:
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    return httpx.post(f"{url}/mcp", headers={**MCP_HEADERS, **headers, **session}, json=body)


def test_over_http_a_new_users_session_ends_the_oldest_idle_one(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    with running(mem, settings, mcp_max_sessions=2) as url:
        ids = {}
        for user in ("srv-alice", "srv-bob"):
            opened = initialize(url, bearer(user))
            assert opened.status_code == 200, opened.text
            ids[user] = opened.headers["mcp-session-id"]
        carol = initialize(url, bearer("srv-carol"))  # holds none: not refused
        assert carol.status_code == 200, carol.text
        # Ended before carol's answer (as by its client's DELETE): the SDK has forgotten it.
        gone = _tools_list(url, bearer("srv-alice"), ids["srv-alice"])
        assert gone.status_code == 404, gone.text
        assert gone.json()["detail"].startswith("Session not found: ")
        assert _tools_list(url, bearer("srv-bob"), ids["srv-bob"]).status_code == 200
        again = initialize(url, bearer("srv-alice"))  # what an MCP client does on 404
        assert again.status_code == 200


def _gauge(url: str, name: str) -> float | None:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_metrics_count_open_sessions_and_waiting_passage_requests(
    hybrid_mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    """What an operator watches before the caps bite: the MCP sessions open, and the
    passage requests waiting for a slot (neither had a series)."""
    with running(hybrid_mem, settings) as url:
        for user in ("gauge-a", "gauge-b"):
            assert initialize(url, bearer(user)).status_code == 200
        assert _gauge(url, "memstrata_mcp_sessions") == 2
        assert _gauge(url, "memstrata_embedding_bulk_waiting") == 0
        lanes = hybrid_mem.embedder.lanes  # type: ignore[union-attr]

        def wait_for_a_slot() -> None:
            with lanes.bulk("writer"):
                pass

        waiter = threading.Thread(target=wait_for_a_slot, daemon=True)
        with lanes.bulk("importer"):  # the slot is taken
            waiter.start()
            deadline = time.monotonic() + 10
            while lanes.waiting < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _gauge(url, "memstrata_embedding_bulk_waiting") == 1
        waiter.join(10)
        assert _gauge(url, "memstrata_embedding_bulk_waiting") == 0
