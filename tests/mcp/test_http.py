"""MCP over real streamable HTTP against a real ``memstrata serve`` process.

One server for the module (real embedded PostgreSQL, the real local embedding server,
real HS256 tokens). ``/mcp`` must authenticate exactly like ``/api``: the same 401 bodies
and ``WWW-Authenticate`` headers, and one user's token never reaches another's memory.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.retrieval.turn_limit import TURN_LIMIT_RULE
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.mcp.served import bearer, served, token

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def base_url(
    tmp_path_factory: pytest.TempPathFactory, pg_url: str, embedding_server: LocalEmbeddingServer
) -> Iterator[str]:
    with served(tmp_path_factory, "mcp-serve", pg_url, embedding_server) as url:
        yield url


@asynccontextmanager
async def mcp_client(
    base_url: str, headers: dict[str, str], **options: Any
) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, **options) as client:
            yield client


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_valid_token_gets_its_users_memory(base_url: str, mode: str) -> None:
    user = f"http-alice-{mode}"
    async with mcp_client(base_url, bearer(user), mode=mode) as client:
        assert len((await client.list_tools()).tools) == 9
        recorded = await client.call_tool("record_memory", {"content": f"Sails a {mode} dinghy"})
        assert not recorded.is_error, recorded.content
        found = await client.call_tool("memory_search", {"query": "dinghy", "top_k": 2})
        data = found.structured_content
        assert data is not None
        # hybrid; on a saturated machine the query embedding can time out: then BM25, said so
        assert data["mode"] == "hybrid" or "query embedding failed" in data["warnings"][0]
        assert f"Sails a {mode} dinghy" in data["hits"][0]["text"]
        read = await client.read_resource("memstrata://files/memory")
        assert f"Sails a {mode} dinghy" in read.contents[0].text  # type: ignore[union-attr]
        prompt = await client.get_prompt("memory_context", {"token_limit": "32000"})
        assert f"Sails a {mode} dinghy" in prompt.messages[0].content.text  # type: ignore[union-attr]
    # the REST API in the same process sees the same memory
    rest = httpx.get(f"{base_url}/api/config/agent-files/memory", headers=bearer(user))
    assert rest.status_code == 200 and f"Sails a {mode} dinghy" in rest.json()["content"]


def _rest_and_mcp(base_url: str, headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response]:
    rest = httpx.get(f"{base_url}/api/config/skills", headers=headers)
    mcp = httpx.post(f"{base_url}/mcp", headers={**MCP_HEADERS, **headers}, json=INIT)
    return rest, mcp


def test_an_oversized_body_gets_the_rest_apis_413(base_url: str) -> None:
    body = b'{"jsonrpc": "2.0", "pad": "' + b"x" * (1024 * 1024 + 1) + b'"}'
    headers = {**MCP_HEADERS, **bearer("alice"), "Content-Type": "application/json"}
    # The batch route: a memory file's PUT takes more (its JSON escapes, docs/API.md Limits).
    batch = f"{base_url}/api/memory/conversations/turns:batch"
    rest = httpx.post(batch, headers=headers, content=body)
    mcp = httpx.post(f"{base_url}/mcp", headers=headers, content=body)
    assert rest.status_code == mcp.status_code == 413
    assert mcp.json()["code"] == rest.json()["code"] == "payload_too_large"
    assert "MEMSTRATA_MAX_REQUEST_BYTES" in mcp.json()["detail"]
    assert mcp.json()["error"]["message"] == mcp.json()["detail"]  # JSON-RPC, for MCP clients
    # Each in its own terms: REST's hint is its batch endpoint, which MCP has not.
    assert "a batch's turns over several requests" in rest.json()["detail"]
    assert "batch" not in mcp.json()["detail"]
    assert f"conversation_index_turn {TURN_LIMIT_RULE}" in mcp.json()["detail"]


def test_a_lone_surrogate_gets_the_rest_apis_message(base_url: str) -> None:
    """The SDK's parser said only "Parse error: unexpected end of hex escape at line 1
    column 112"; REST names the field and the lone surrogate."""
    headers = {**MCP_HEADERS, **bearer("http-surrogate"), "Content-Type": "application/json"}
    turn = {"turn_index": 0, "user_message": "x \ud800 y", "assistant_reply": "ok"}
    url = f"{base_url}/api/memory/conversations/s1/turns"
    rest = httpx.post(url, headers=headers, content=json.dumps(turn))  # sent as \\ud800
    call = {"name": "conversation_index_turn", "arguments": {"session_id": "s1", **turn}}
    request = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call}
    mcp = httpx.post(f"{base_url}/mcp", headers=headers, content=json.dumps(request))
    same = "is not valid Unicode: it contains a lone surrogate ('\\ud800' at character 3)"
    assert rest.status_code == 422 and same in rest.json()["detail"], rest.text
    assert mcp.status_code == 400, mcp.text
    body = mcp.json()
    message = (
        f"params.arguments.user_message {same}; send a complete UTF-16 surrogate pair "
        "(such as \\ud83d\\ude00) or the character itself"
    )
    # JSON-RPC, answering the request's id, and the REST shape
    assert body == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32700, "message": message},
        "code": "bad_request",
        "detail": message,
        "message": message,
    }


def chunked(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    """``body`` as a generator, which httpx sends chunked, without a ``Content-Length``."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def test_a_chunked_body_is_held_to_the_same_limit(base_url: str) -> None:
    headers = {**MCP_HEADERS, **bearer("http-chunked"), "Content-Type": "application/json"}
    over = b'{"jsonrpc": "2.0", "pad": "' + b"x" * (1024 * 1024 + 1) + b'"}'
    refused = httpx.post(f"{base_url}/mcp", headers=headers, content=chunked(over))
    assert "content-length" not in refused.request.headers
    assert refused.status_code == 413
    body = refused.json()
    assert body["code"] == "payload_too_large"
    # Read whole (a whole file's call may be larger) before its tool says it is over.
    assert body["detail"].startswith(f"request body is {len(over)} bytes, ")
    assert body["detail"].endswith(
        "over the limit of 1048576 bytes (send a smaller request, one tool call each; in "
        f"conversation_index_turn {TURN_LIMIT_RULE}; an operator can raise "
        "MEMSTRATA_MAX_REQUEST_BYTES)"
    )
    assert body["message"] == body["detail"]
    rpc = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": body["detail"]}}
    assert {key: body[key] for key in rpc} == rpc

    # a chunked body under the limit reaches the SDK whole
    client_info = {"name": "c" * 1_000_000, "version": "0"}
    init = {**INIT, "params": {**INIT["params"], "clientInfo": client_info}}
    under = json.dumps(init).encode()
    assert len(under) < 1024 * 1024
    opened = httpx.post(f"{base_url}/mcp", headers=headers, content=chunked(under))
    assert opened.status_code == 200, opened.text
    assert '"serverInfo"' in opened.text and "mcp-session-id" in opened.headers


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "missing bearer token: send 'Authorization: Bearer <token>'"),
        ({"Authorization": f"Bearer {token('alice', ttl=-60)}"}, "token expired"),
        ({"Authorization": "Bearer not-a-jwt"}, "malformed token: not a JWT"),
        (
            {"Authorization": "Bearer " + jwt.encode({"sub": "a", "exp": 2**31}, "x" * 40)},
            "token signature is invalid",
        ),
        ({"Authorization": "Basic YWxpY2U6cHc="}, "unsupported authorization scheme"),
    ],
)
def test_missing_or_bad_tokens_get_the_rest_apis_401(
    base_url: str, headers: dict[str, str], detail: str
) -> None:
    rest, mcp = _rest_and_mcp(base_url, headers)
    assert rest.status_code == mcp.status_code == 401
    # The REST body, plus a JSON-RPC error with the same message for MCP clients to show.
    rpc = {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": rest.json()["detail"]},
    }
    assert mcp.json() == {**rest.json(), **rpc} and detail in mcp.json()["detail"]
    assert mcp.headers["www-authenticate"] == rest.headers["www-authenticate"]
    assert mcp.headers["www-authenticate"].startswith('Bearer realm="memstrata"')


async def test_the_sdk_client_is_refused_without_a_valid_token(base_url: str) -> None:
    for headers in ({}, bearer("alice", ttl=-60)):
        # The SDK surfaces the 401 as an MCPError (inside its task groups' exception groups).
        with pytest.raises(BaseExceptionGroup) as raised:
            async with mcp_client(base_url, headers, mode="legacy") as client:
                await client.list_tools()
        assert raised.group_contains(MCPError, match="bearer token|token expired")


async def test_another_users_token_never_reaches_this_users_memory(base_url: str) -> None:
    async with mcp_client(base_url, bearer("http-carol")) as carol:
        await carol.call_tool("record_memory", {"content": "Carol's vault PIN is 8642"})
        await carol.call_tool(
            "conversation_index_turn",
            {"session_id": "v", "turn_index": 0, "user_message": "my vault PIN is 8642"},
        )
    async with mcp_client(base_url, bearer("http-dave")) as dave:
        found = await dave.call_tool("memory_search", {"query": "vault PIN 8642", "top_k": 20})
        hits = (found.structured_content or {})["hits"]
        assert all("8642" not in hit["text"] for hit in hits)
        for name in ("memory", "user", "soul"):
            read = await dave.read_resource(f"memstrata://files/{name}")
            assert "8642" not in read.contents[0].text  # type: ignore[union-attr]
        prompt = await dave.get_prompt("memory_context", {"token_limit": "100000"})
        assert "8642" not in prompt.messages[0].content.text  # type: ignore[union-attr]
        # no argument names a user: an attempt is an unknown argument, refused
        sneaky = await dave.call_tool("memory_read", {"name": "memory", "user_id": "http-carol"})
        assert sneaky.is_error and "user_id" in sneaky.content[0].text  # type: ignore[union-attr]


def test_a_session_belongs_to_the_token_that_opened_it(base_url: str) -> None:
    opened = httpx.post(
        f"{base_url}/mcp", headers={**MCP_HEADERS, **bearer("http-erin")}, json=INIT
    )
    assert opened.status_code == 200
    session = opened.headers["mcp-session-id"]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    session_headers = {
        **MCP_HEADERS,
        "mcp-session-id": session,
        "mcp-protocol-version": "2025-06-18",
    }
    stolen = httpx.post(
        f"{base_url}/mcp", headers={**session_headers, **bearer("http-frank")}, json=call
    )
    assert stolen.status_code == 404  # as if the session did not exist
    own = httpx.post(
        f"{base_url}/mcp", headers={**session_headers, **bearer("http-erin")}, json=call
    )
    assert own.status_code == 200


@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Host": "evil.example"}, 421),
        ({"Origin": "http://localhost:3000"}, 200),
    ],
)
def test_host_and_origin_are_checked(base_url: str, extra: dict[str, str], status: int) -> None:
    response = httpx.post(
        f"{base_url}/mcp", headers={**MCP_HEADERS, **bearer("http-gina"), **extra}, json=INIT
    )
    assert response.status_code == status, response.text
