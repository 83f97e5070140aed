"""Each refused ``/mcp`` request logs one ``mcp.request.refused`` line: its status, code
and cause, and the user when the token was valid; never the token.

Before, a 413 logged only the access line (``user_id: null`` although the token was
valid), a 429 ``too_many_sessions`` and a 404 for an ended session said nothing of why, and
a 401 said why only for a forged signature. A real server process on the session's
PostgreSQL (no tool is called: the embedding API is the fake, unused).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.mcp.served import SECRET, token
from tests.mcp.test_shutdown_sessions import VERSION, open_session, serving
from tests.retrieval.fault_server import FaultServer

pytestmark = pytest.mark.timeout(120)

PING = {"jsonrpc": "2.0", "id": 3, "method": "ping"}


@pytest.fixture
def fake() -> Iterator[FaultServer]:
    with FaultServer("ok") as server:
        yield server


def test_every_refusal_logs_its_cause_and_user(
    tmp_path: Path, pg_url: str, fake: FaultServer
) -> None:
    settings = {"MCP_MAX_SESSIONS_PER_USER": "1"}
    with (
        serving(tmp_path, pg_url, fake, 5, secret=SECRET, **settings) as served,
        httpx.Client() as client,
    ):
        url = f"{served.url}/mcp"
        mine = open_session(client, served.url, "log-ana")
        tokens = [mine["Authorization"]]

        # 429: a second session for a user capped at one.
        init = {**mine}
        del init["Mcp-Session-Id"]
        second = client.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            },
            headers=init,
        )
        assert second.status_code == 429, second.text
        # 413 with a valid token.
        big = client.post(
            url,
            content=b'{"x": "' + b"a" * 1_100_000 + b'"}',
            headers={**mine, "Content-Type": "application/json"},
        )
        assert big.status_code == 413, big.text
        # 404: a session id nobody holds, and another user's session.
        gone = client.post(url, json=PING, headers={**mine, "Mcp-Session-Id": "f" * 32})
        assert gone.status_code == 404, gone.text
        bo = {**mine, "Authorization": f"Bearer {token('log-bo')}"}
        tokens.append(bo["Authorization"])
        stolen = client.post(url, json=PING, headers=bo)
        assert stolen.status_code == 404, stolen.text
        # 401: expired, missing, malformed.
        expired = {**mine, "Authorization": f"Bearer {token('log-ana', ttl=-60)}"}
        tokens.append(expired["Authorization"])
        missing = {k: v for k, v in mine.items() if k != "Authorization"}
        malformed = {**mine, "Authorization": "Bearer not-a-jwt-at-all"}
        for headers in (expired, missing, malformed):
            answer = client.post(url, json=PING, headers=headers)
            assert answer.status_code == 401, answer.text

        refused = served.events("mcp.request.refused")
        seen = [(e["status"], e["user_id"]) for e in refused]
        assert seen == [
            (429, "log-ana"),
            (413, "log-ana"),
            (404, "log-ana"),
            (404, "log-bo"),
            (401, None),
            (401, None),
            (401, None),
        ], served.stderr()
        assert refused[0]["code"] == "too_many_sessions"
        for event in refused:
            assert event["cause"] and not event["cause"].startswith("(no readable"), event
        assert "expired" in refused[4]["cause"]
        # The access line of the 413 names its user too.
        big_access = [e for e in served.events("http.request") if e["status"] == 413]
        assert [e["user_id"] for e in big_access] == ["log-ana"], served.stderr()
        log = served.log.read_text()
        for bearer_token in tokens:
            assert bearer_token.split()[1] not in log
        assert "not-a-jwt-at-all" not in log
