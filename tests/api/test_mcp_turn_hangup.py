"""``conversation_index_turn`` over MCP's HTTP transport ends its embedding when its client
hangs up, as the REST turn route does: the turn is stored without a vector, for the
worker, and its text is never sent. Before, the tool did not watch its client: queued
behind another user's slow request, it waited for the slot and then embedded for nobody.

The same real server and fault as ``test_turn_disconnect`` (bob's slow request holds the
passage lane); the MCP session is opened over HTTP, the call sent on a raw socket.
"""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import text

from memstrata.db.database import Database
from tests.api.auth import AuthHeader
from tests.api.test_turn_disconnect import (
    ALICE,
    Queued,
    deferred_events,
    post_then_hang_up,
    queued,
    sent,
    slow_api,
)
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.waiting import wait_for

__all__ = ["queued", "slow_api"]  # the fixtures this module borrows

pytestmark = pytest.mark.timeout(120)

MCP = "/mcp"


def open_session(url: str, auth: AuthHeader) -> dict[str, str]:
    """The headers of a new, initialized MCP session of alice's."""
    headers = {**MCP_HEADERS, **auth("alice")}
    opened = httpx.post(url + MCP, headers=headers, json=INIT, timeout=30)
    assert opened.status_code == 200, opened.text
    headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    headers["mcp-protocol-version"] = "2025-06-18"
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(url + MCP, headers=headers, json=ready, timeout=30).status_code == 202
    return headers


def alice_vectors(db: Database) -> list[bool]:
    with db.engine.connect() as conn:
        found = conn.execute(
            text("SELECT embedding IS NOT NULL FROM memory_embeddings WHERE user_id = 'alice'")
        )
        return [bool(r[0]) for r in found]


def test_an_mcp_turn_whose_client_hangs_up_is_left_to_the_worker(
    queued: Queued, db: Database, auth: AuthHeader, caplog: pytest.LogCaptureFixture
) -> None:
    headers = open_session(queued.url, auth)
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "conversation_index_turn",
            "arguments": {
                "session_id": "s1",
                "turn_index": 0,
                "user_message": ALICE,
                "assistant_reply": "ok",
            },
        },
    }
    body = json.dumps(call).encode()
    headers.pop("Content-Type", None)  # post_then_hang_up sends its own
    post_then_hang_up(queued.url, MCP, headers, body, queued.queued)
    wait_for(lambda: deferred_events(caplog), 10, "alice's turn deferred")
    assert queued.bob.is_alive()  # her wait ended while bob's request still ran
    assert sent(queued.api, ALICE) == 0
    [event] = deferred_events(caplog)
    assert event["write"] == "turn" and event["embedded"] == 0 and event["deferred"] == 1
    assert alice_vectors(db) == [False]
    queued.finish()
    wait_for(lambda: alice_vectors(db) == [True], 30, lambda: f"{alice_vectors(db)}")
