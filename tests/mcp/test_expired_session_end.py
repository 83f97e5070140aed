"""An MCP client whose token has expired can still end its own session.

Before, its ``DELETE /mcp`` (with the ``Mcp-Session-Id``) got 401 like any request with an
expired token, so the session kept a slot under the per-user and per-server caps until the
idle timeout (1800 s by default). Now a DELETE of a session passes with a token that is
expired, but by no more than the idle timeout, and otherwise valid, when the token's user
holds that session; every other request with it still gets the 401, and a forged token or
another user's cannot end the session.

Over real HTTP: the app (real runtime, real PostgreSQL) under uvicorn, driven by the SDK's
own streamable HTTP client, and by raw requests where the test needs the session id.
"""

from __future__ import annotations

import base64
import json
import time

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memstrata.api.token_keys import mint_token
from memstrata.config import Settings
from memstrata.runtime import Memstrata
from tests.mcp.messages import MCP_HEADERS
from tests.mcp.test_session_cap import Bearer, delete, initialize, running

pytestmark = pytest.mark.anyio

IDLE_S = 300.0  # the session idle timeout these servers run with: the grace's bound
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


@pytest.fixture
def bearer(settings: Settings) -> Bearer:
    return lambda user: {"Authorization": f"Bearer {mint_token(settings, user, 600)}"}


def expired(settings: Settings, user: str, ago_s: float) -> dict[str, str]:
    """A bearer header whose token, signed with the server's secret, expired ``ago_s``
    seconds ago (beyond the 30 s leeway when ``ago_s`` > 30)."""
    issued = time.time() - ago_s - 60
    return {"Authorization": f"Bearer {mint_token(settings, user, 60, now=issued)}"}


def in_session(url: str, headers: dict[str, str], session_id: str) -> httpx.Response:
    session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
    return httpx.post(
        f"{url}/mcp", headers={**MCP_HEADERS, **headers, **session}, json=PING, timeout=30
    )


def _with_subject(token: str, user: str) -> str:
    """``token`` with its ``sub`` changed and its signature kept: a forgery."""
    head, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["sub"] = user
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{forged}.{signature}"


async def test_the_sdk_client_ends_its_session_after_its_token_expired(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    user = "expiring-alice"
    answers: list[tuple[str, int, str | None]] = []

    async def note(response: httpx2.Response) -> None:
        session_id = response.headers.get("mcp-session-id")
        answers.append((response.request.method, response.status_code, session_id))

    with running(
        mem, settings, mcp_max_sessions_per_user=1, mcp_session_idle_timeout_s=IDLE_S
    ) as url:
        hooks = {"response": [note]}
        async with httpx2.AsyncClient(headers=bearer(user), timeout=30, event_hooks=hooks) as http:
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
            async with Client(transport, mode="legacy") as client:
                assert len((await client.list_tools()).tools) == 9
                # the token runs out while the client holds its session
                http.headers["Authorization"] = expired(settings, user, 120)["Authorization"]
        # closing the client sent DELETE with the expired token, and it was answered
        assert [status for method, status, _ in answers if method == "DELETE"] == [200]
        session_id = next(sid for method, _, sid in answers if method == "POST" and sid)
        # the SDK has forgotten the session, and its slot (the user's only one) is free
        assert in_session(url, bearer(user), session_id).status_code == 404
        assert initialize(url, bearer(user)).status_code == 200


async def test_only_the_owner_ends_a_session_with_an_expired_token(
    mem: Memstrata, settings: Settings, bearer: Bearer
) -> None:
    user = "expiring-bob"
    with running(mem, settings, mcp_session_idle_timeout_s=IDLE_S) as url:
        opened = initialize(url, bearer(user))
        assert opened.status_code == 200, opened.text
        session_id = opened.headers["mcp-session-id"]
        own = expired(settings, user, 120)

        # every request but the DELETE of its own session: the 401 as before
        session = {"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
        others = [
            in_session(url, own, session_id),
            httpx.get(f"{url}/mcp", headers={**MCP_HEADERS, **own, **session}, timeout=30),
            httpx.delete(f"{url}/mcp", headers={**MCP_HEADERS, **own}, timeout=30),  # no id
            delete(url, own, "0123456789abcdef0123456789abcdef"),  # no such session
            httpx.get(f"{url}/api/config/skills", headers=own, timeout=30),
        ]
        for answer in others:
            assert answer.status_code == 401, answer.text
            assert answer.json()["detail"].startswith("token expired: "), answer.text

        # what cannot end it: each answered 401, and the session still answers
        foreign = jwt.encode(
            {"sub": user, "exp": int(time.time()) - 120}, "another-secret-" + "x" * 32, "HS256"
        )
        carol = expired(settings, "expiring-carol", 120)
        carol_token = carol["Authorization"].removeprefix("Bearer ")
        refused = {
            "signed with another key": ({"Authorization": f"Bearer {foreign}"}, "signature"),
            "forged from another user's": (
                {"Authorization": f"Bearer {_with_subject(carol_token, user)}"},
                "signature",
            ),
            "another user's": (carol, "expired"),
            "expired longer ago than the idle timeout": (
                expired(settings, user, IDLE_S + 120),
                "expired",
            ),
        }
        for case, (headers, said) in refused.items():
            answer = delete(url, headers, session_id)
            assert answer.status_code == 401, (case, answer.text)
            assert said in answer.json()["detail"], (case, answer.text)
            assert in_session(url, bearer(user), session_id).status_code == 200, case

        # the token is checked before the body is read: another user's DELETE with a body
        # over the limit gets the 401, not a 413
        big = httpx.request(
            "DELETE",
            f"{url}/mcp",
            headers={**MCP_HEADERS, **carol, **session},
            content=b"x" * (settings.max_request_bytes + 1),
            timeout=30,
        )
        assert big.status_code == 401, big.text

        # its own token, expired within the idle timeout: the session ends
        ended = delete(url, own, session_id)
        assert ended.status_code == 200, ended.text
        assert in_session(url, bearer(user), session_id).status_code == 404
