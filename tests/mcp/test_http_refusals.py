"""``/mcp``'s answers to bad input the SDK refused in plain text, in pydantic's words, or
not at all, against a real ``memstrata serve`` process.

Each answer is the REST API's error shape and a JSON-RPC error at once (the MCP clients
show its message), says how to fix the request, and is logged with the user. A request
without a valid token still gets the 401 before anything else looks at it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.streamable_http import StreamableHTTPServerTransport
from starlette.types import Message, Scope

from memstrata.mcp.sdk_answers import in_error_shape
from memstrata.serve_process import running_serve
from tests.log_lines import events_in
from tests.mcp.messages import INIT, MCP_HEADERS
from tests.mcp.served import bearer, serve_env

JSON = {"Content-Type": "application/json"}
MODERN = {"MCP-Protocol-Version": "2026-07-28"}  # the SDK's other, per-request, entry
REBINDING = (
    "This is DNS-rebinding protection; behind a proxy that checks Host and Origin itself, "
    "MEMSTRATA_MCP_DNS_REBINDING_PROTECTION=false turns it off."
)
FIX_BODY = "send one JSON-RPC 2.0 request, notification or response as a JSON object"


@dataclass(frozen=True)
class Served:
    url: str
    log: Path

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"

    def events(self, name: str, user: str) -> list[dict[str, Any]]:
        """The ``name`` events logged for ``user`` (waiting a moment for the last line)."""
        deadline = time.monotonic() + 5
        while True:
            found = [e for e in events_in(self.log, name) if e.get("user_id") == user]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Served]:
    data = tmp_path_factory.mktemp("mcp-refusals")
    env = serve_env(
        data,
        pg_url,
        MEMSTRATA_EMBEDDING_AUTOSTART="false",  # BM25 only: no search here
        MEMSTRATA_LOG_JSON="true",
    )
    env["MEMSTRATA_LOG_LEVEL"] = "INFO"  # a client's bad input is INFO, as REST's 4xx
    log = data / "stderr.log"
    with log.open("w") as stderr, running_serve(env, timeout_s=60, stderr=stderr) as url:
        yield Served(url, log)


def refusal(code: str, message: str, rpc_code: int = -32600) -> dict[str, Any]:
    """The one error shape, which is also a JSON-RPC error without an id."""
    return {
        "code": code,
        "detail": message,
        "message": message,
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": rpc_code, "message": message},
    }


def open_session(served: Served, user: str) -> dict[str, str]:
    """The headers of a new, initialized session of ``user``."""
    opened = httpx.post(served.mcp, headers={**MCP_HEADERS, **bearer(user)}, json=INIT)
    assert opened.status_code == 200, opened.text
    headers = {
        **MCP_HEADERS,
        **bearer(user),
        **JSON,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-06-18",
    }
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(served.mcp, headers=headers, json=ready).status_code == 202
    return headers


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, sent as JSON or as one SSE event."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    return dict(json.loads(data[-1]))


@pytest.mark.parametrize("era", [{}, MODERN], ids=["handshake", "2026"])
@pytest.mark.parametrize(
    ("content_type", "sent"),
    [
        ("text/plain", "as 'text/plain'"),
        ("application/x-www-form-urlencoded", "as 'application/x-www-form-urlencoded'"),
        (None, "without a Content-Type"),
    ],
)
def test_a_body_not_sent_as_json_gets_the_one_error_shape(
    served: Served, era: dict[str, str], content_type: str | None, sent: str
) -> None:
    """The SDK answered 400 with the plain text "Invalid Content-Type header"."""
    user = f"refuse-ct-{len(era)}-{content_type}"
    headers = {**MCP_HEADERS, **bearer(user), **era}
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = httpx.post(served.mcp, headers=headers, content=json.dumps(INIT))
    message = f"the body was sent {sent}, not as JSON: send it with Content-Type: application/json"
    assert response.status_code == 400, response.text
    assert response.json() == refusal("unsupported_media_type", message)
    (event,) = served.events("mcp.refused", user)
    assert (event["level"], event["status"], event["error"]) == ("info", 400, message)


@pytest.mark.parametrize("era", [{}, MODERN], ids=["handshake", "2026"])
@pytest.mark.parametrize(
    ("accept", "said"),
    [
        (None, "the request has no Accept header"),
        ("application/json", "Accept 'application/json' lacks text/event-stream"),
        ("text/event-stream", "Accept 'text/event-stream' lacks application/json"),
        ("text/html", "Accept 'text/html' lacks application/json and text/event-stream"),
    ],
)
def test_an_accept_without_both_answer_types_gets_the_one_error_shape(
    served: Served, era: dict[str, str], accept: str | None, said: str
) -> None:
    """The SDK answered 406 with a bare JSON-RPC error, or (2026) with no body at all."""
    user = f"refuse-accept-{len(era)}-{accept}"
    headers = {**bearer(user), **JSON, **era, "Accept": accept or ""}
    response = httpx.post(served.mcp, headers=headers, content=json.dumps(INIT))
    message = (
        f"{said}: send Accept: application/json, text/event-stream (both: a request is "
        "answered with JSON or an event stream)"
    )
    assert response.status_code == 406, response.text
    assert response.json() == refusal("not_acceptable", message)
    assert [(e["level"], e["status"]) for e in served.events("mcp.refused", user)] == [
        ("info", 406)
    ]


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_foreign_host_or_origin_is_told_which_setting_allows_it(
    served: Served, method: str
) -> None:
    """The SDK answered 421 "Invalid Host header" / 403 "Invalid Origin header" (plain
    text); the token is still checked first."""
    user = f"refuse-rebinding-{method}"
    cases = [
        (
            {"Host": "evil.example"},
            421,
            "host_not_allowed",
            "Host 'evil.example' is not allowed on this MCP endpoint: add the host to "
            f"MEMSTRATA_MCP_ALLOWED_HOSTS, where 'name:*' allows any port. {REBINDING}",
        ),
        (
            {"Origin": "http://evil.example"},
            403,
            "origin_not_allowed",
            "Origin 'http://evil.example' is not allowed on this MCP endpoint: add it to "
            f"MEMSTRATA_MCP_ALLOWED_ORIGINS, where 'scheme://name:*' allows any port. {REBINDING}",
        ),
    ]
    for extra, status, code, message in cases:
        headers = {**MCP_HEADERS, **JSON, **extra}
        body = json.dumps(INIT) if method == "POST" else None
        stranger = httpx.request(method, served.mcp, headers=headers, content=body)
        assert stranger.status_code == 401, stranger.text
        assert stranger.json()["code"] == "unauthorized"
        response = httpx.request(
            method, served.mcp, headers={**headers, **bearer(user)}, content=body
        )
        assert response.status_code == status, response.text
        assert response.json() == refusal(code, message)
    events = served.events("mcp.refused", user)
    assert [(e["level"], e["status"], e["error"]) for e in events] == [
        ("info", c[1], c[3]) for c in cases
    ]


ID_CASES = [
    ('{"a": 1}', "an object"),
    ("[1]", "an array"),
    ("true", "true"),
    ("null", "null"),
    ("1e400", "a number with a fraction or an exponent"),
    ("1.5", "a number with a fraction or an exponent"),
]


def id_message(kind: str) -> str:
    return (
        f"id must be a string or an integer, not {kind}: give each request an id such as 1 "
        'or "req-1" (a message without an id is a notification, which gets no answer)'
    )


def test_a_request_whose_id_is_not_a_string_or_an_integer_is_answered(served: Served) -> None:
    """The SDK took such a request for a notification (202, no body) and never answered
    it; the session goes on, and well-formed ids are answered as before."""
    user = "refuse-ids"
    session = open_session(served, user)
    for raw_id, kind in ID_CASES:
        body = '{"jsonrpc": "2.0", "id": ' + raw_id + ', "method": "tools/list", "params": {}}'
        response = httpx.post(served.mcp, headers=session, content=body)
        assert response.status_code == 400, (raw_id, response.status_code, response.text)
        assert response.json() == refusal("bad_request", id_message(kind))
    for good_id in ("req-1", 2, 12345678901234567890123):
        call = {"jsonrpc": "2.0", "id": good_id, "method": "tools/list", "params": {}}
        listed = answer(httpx.post(served.mcp, headers=session, json=call))
        assert listed["id"] == good_id and len(listed["result"]["tools"]) == 9
    events = served.events("mcp.parse_error", user)
    assert [(e["level"], e["code"], e["error"]) for e in events] == [
        ("info", -32600, id_message(kind)) for _, kind in ID_CASES
    ]


@pytest.mark.parametrize("era", [{}, MODERN], ids=["handshake", "2026"])
def test_an_initialize_with_a_bad_id_is_told_so(served: Served, era: dict[str, str]) -> None:
    """Without a session the SDK said "Bad Request: Missing session ID" (handshake era)
    or "Body must be a single JSON-RPC request or notification object" (2026)."""
    headers = {**MCP_HEADERS, **bearer(f"refuse-init-id-{len(era)}"), **JSON, **era}
    body = json.dumps({**INIT, "id": {"n": 1}})
    response = httpx.post(served.mcp, headers=headers, content=body)
    assert response.status_code == 400, response.text
    assert response.json() == refusal("bad_request", id_message("an object"))
    assert "mcp-session-id" not in response.headers


INITIALIZE_NEEDS = (
    'initialize needs params protocolVersion (e.g. "2025-11-25"), capabilities ({} for none) '
    'and clientInfo ({"name": "…", "version": "…"})'
)


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({}, "missing required param(s): protocolVersion, capabilities, clientInfo"),
        (
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}},
            "missing required param(s): clientInfo.version",
        ),
        (
            {
                "protocolVersion": 20250618,
                "capabilities": {},
                "clientInfo": INIT["params"]["clientInfo"],
            },
            "protocolVersion must be a JSON string; got 20250618",
        ),
    ],
)
def test_an_initialize_with_bad_params_is_told_what_it_needs(
    served: Served, params: dict[str, Any], said: str
) -> None:
    """The SDK answered -32602 "Invalid request parameters" with ``data: ""``."""
    user = f"refuse-init-params-{len(json.dumps(params))}"
    headers = {**MCP_HEADERS, **bearer(user), **JSON}
    response = httpx.post(served.mcp, headers=headers, json={**INIT, "params": params})
    assert answer(response) == {
        "jsonrpc": "2.0",
        "id": INIT["id"],
        "error": {"code": -32602, "message": f"{INITIALIZE_NEEDS}; {said}"},
    }
    logged = served.events("mcp.initialize", user)[-1]
    assert (logged["level"], logged["error"]) == ("info", f"{INITIALIZE_NEEDS}; {said}")
    assert httpx.post(served.mcp, headers=headers, json=INIT).status_code == 200  # as sent


NOT_ONE_MESSAGE = [
    (
        [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}],
        -32600,
        "body is a JSON array (a JSON-RPC batch), which MCP does not accept: send each "
        "message in a POST of its own",
    ),
    (
        [],
        -32600,
        "body is a JSON array (a JSON-RPC batch), which MCP does not accept: send each "
        "message in a POST of its own",
    ),
    (
        {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
        -32600,
        "body is not a JSON-RPC 2.0 request, notification or response: jsonrpc: Input "
        f"should be '2.0'; {FIX_BODY}",
    ),
    (
        {"jsonrpc": "1.0", "method": "notifications/progress"},
        -32600,
        "body is not a JSON-RPC 2.0 request, notification or response: jsonrpc: Input "
        f"should be '2.0'; {FIX_BODY}",
    ),
    (
        {"id": 1, "method": "tools/list"},
        -32600,
        "body is not a JSON-RPC 2.0 request, notification or response: jsonrpc: Field "
        f"required; {FIX_BODY}",
    ),
    (3, -32600, f"body is an integer, not a JSON object: {FIX_BODY}"),
    (
        '{"jsonrpc": "2.0", "id": 1',
        -32700,
        f"body is not valid JSON: EOF while parsing an object at line 1 column 26; {FIX_BODY}",
    ),
]


@pytest.mark.parametrize(("body", "rpc_code", "message"), NOT_ONE_MESSAGE)
def test_a_body_that_is_not_one_message_is_told_what_it_is(
    served: Served, body: Any, rpc_code: int, message: str
) -> None:
    """The SDK answered with pydantic's dump ("Validation error: 4 validation errors for
    union[…]", -32602) or, for JSON it could not parse, without the REST shape."""
    user = "refuse-not-one-message"
    session = open_session(served, user)
    content = body if isinstance(body, str) else json.dumps(body)
    response = httpx.post(served.mcp, headers=session, content=content)
    assert response.status_code == 400, response.text
    assert response.json() == refusal("bad_request", message, rpc_code)
    assert served.events("mcp.parse_error", user)[-1]["error"] == message


PROMPT_CASES = [
    (
        {"token_limit": 32000},
        'token_limit must be a JSON string, e.g. "32000" (prompt arguments are strings in '
        "MCP); got 32000",
    ),
    (
        {"token_limit": None},
        'token_limit must be a JSON string, e.g. "32000" (prompt arguments are strings in '
        "MCP); got null",
    ),
    (
        {"token_limit": "32000", "user_id": "someone-else"},
        "unknown argument(s) user_id; memory_context takes token_limit",
    ),
    (
        ["32000"],
        'arguments must be a JSON object of strings, e.g. {"token_limit": "32000"}; got ["32000"]',
    ),
]


def test_prompt_arguments_of_the_wrong_type_or_name_are_named(served: Served) -> None:
    """The SDK answered a non-string value with -32602 "Invalid request parameters" and
    nothing more, and ignored an argument the prompt does not take."""
    user = "refuse-prompt-args"
    session = open_session(served, user)
    for request_id, (arguments, message) in enumerate(PROMPT_CASES, start=10):
        params = {"name": "memory_context", "arguments": arguments}
        call = {"jsonrpc": "2.0", "id": request_id, "method": "prompts/get", "params": params}
        refused = answer(httpx.post(served.mcp, headers=session, json=call))
        assert refused == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": -32602, "message": message},
        }
    params = {"name": "memory_context", "arguments": {"token_limit": "32000"}}
    call = {"jsonrpc": "2.0", "id": 99, "method": "prompts/get", "params": params}
    assert (
        "<file name="
        in answer(httpx.post(served.mcp, headers=session, json=call))["result"]["messages"][0][
            "content"
        ]["text"]
    )
    events = served.events("mcp.prompt", user)
    assert [(e["level"], e["prompt"], e["error"]) for e in events] == [
        ("info", "memory_context", message) for _, message in PROMPT_CASES
    ]


CALL_CASES = [
    # (method, params, message): what the SDK answered with a bare "Invalid request parameters"
    (
        "tools/call",
        {"name": "memory_search", "arguments": "tea"},
        'arguments must be a JSON object of the tool\'s arguments, e.g. {"query": "tea"}; '
        'got "tea"',
    ),
    (
        "tools/call",
        {"name": 5, "arguments": {}},
        "name must be a JSON string, the tool's name; got 5",
    ),
    (
        "resources/read",
        {"uri": 5},
        'uri must be a JSON string, e.g. "memstrata://files/user"; got 5',
    ),
]


def test_calls_of_the_wrong_shape_say_what_to_send(served: Served) -> None:
    user = "refuse-call-shape"
    session = open_session(served, user)
    for request_id, (method, params, message) in enumerate(CALL_CASES, start=10):
        call = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        refused = answer(httpx.post(served.mcp, headers=session, json=call))
        assert refused == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": -32602, "message": message},
        }, method
    good = {"name": "skills_list", "arguments": {}}
    call = {"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": good}
    assert "result" in answer(httpx.post(served.mcp, headers=session, json=call))
    refused = [e for e in served.events("mcp.tool", user) if "error" in e and e.get("method")]
    refused += served.events("mcp.resource", user)
    assert [(e["level"], e["error"]) for e in refused] == [("info", c[2]) for c in CALL_CASES]


def test_a_timestamp_that_is_no_string_is_refused_in_the_same_words_as_on_rest(
    served: Served,
) -> None:
    """One rule for REST and MCP: a number was read as seconds since 1970 by both."""
    user = "refuse-timestamp"
    turn = {"turn_index": 0, "user_message": "zebra", "timestamp": 1767261600}
    rule = "timestamp: Input should be an ISO 8601 date-time string, not a number"
    rest = httpx.post(
        f"{served.url}/api/memory/conversations/s1/turns", headers=bearer(user), json=turn
    )
    assert rest.status_code == 422, rest.text
    assert rest.json()["detail"] == f"invalid request: body.{rule}"
    search = {"query": "zebra", "as_of": 1767261600}  # the same rule for REST's other time
    dated = httpx.post(f"{served.url}/api/memory/search", headers=bearer(user), json=search)
    assert dated.status_code == 422, dated.text
    assert dated.json()["detail"] == f"invalid request: body.as_of: {rule.partition(': ')[2]}"
    quoted = httpx.post(  # pydantic reads a string of digits as seconds since 1970 too
        f"{served.url}/api/memory/conversations/s1/turns",
        headers=bearer(user),
        json={**turn, "timestamp": "1767261600"},
    )
    assert quoted.status_code == 422, quoted.text
    assert quoted.json()["detail"] == f"invalid request: body.{rule} in a string"
    session = open_session(served, user)
    params = {"name": "conversation_index_turn", "arguments": {"session_id": "s1", **turn}}
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
    result = answer(httpx.post(served.mcp, headers=session, json=call))["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"] == f"error: {rule}"


SDK_REFUSALS = [
    # what the SDK itself answers, after the gate: (method, headers, status, message)
    (
        "GET",
        {"Accept": "application/json"},
        406,
        "Not Acceptable: Client must accept text/event-stream: a GET opens the server's "
        "event stream: send Accept: text/event-stream",
    ),
    (
        "PUT",
        MCP_HEADERS,
        405,
        "Method Not Allowed: /mcp takes POST (JSON-RPC messages), GET (the server's event "
        "stream) and DELETE (end a session)",
    ),
    (
        "DELETE",
        MCP_HEADERS,
        400,
        "Bad Request: Missing session ID: send the Mcp-Session-Id header that initialize "
        "answered with, or initialize first",
    ),
    (
        "DELETE",
        {**MCP_HEADERS, "Mcp-Session-Id": "no-such-session"},
        404,
        "Session not found: the MCP session has ended (idle timeout, a restart, or it lives "
        "on another replica): send initialize again and use the new Mcp-Session-Id",
    ),
]


MODERN_405 = (
    "Method Not Allowed: with MCP-Protocol-Version 2026-07-28 /mcp takes POST only (no event "
    "stream, no session to end): send each JSON-RPC message in a POST"
)
SDK_REFUSALS += [
    # the SDK answers these with no body at all
    ("GET", {**MCP_HEADERS, **MODERN}, 405, MODERN_405),
    ("DELETE", {**MCP_HEADERS, **MODERN}, 405, MODERN_405),
]


@pytest.mark.parametrize(("method", "headers", "status", "message"), SDK_REFUSALS)
def test_what_the_sdk_refuses_itself_comes_in_the_one_error_shape(
    served: Served, method: str, headers: dict[str, str], status: int, message: str
) -> None:
    """The SDK answered these with a bare JSON-RPC error (no code, detail or message, and
    no word on how to go on)."""
    response = httpx.request(
        method, served.mcp, headers={**headers, **bearer("sdk-refusals")}, json=INIT
    )
    assert response.status_code == status, response.text
    codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 406: "not_acceptable"}
    expected = refusal(codes.get(status, "error"), message)
    assert response.json() == expected
    assert int(response.headers["content-length"]) == len(response.content)
    assert "mcp-session-id" not in response.headers


@pytest.mark.anyio
async def test_a_session_being_ended_is_refused_like_an_ended_one() -> None:
    """Between its idle timeout and the SDK forgetting it, a session's own transport
    answers for it: "Not Found: Session has been terminated", with its id and no word on
    how to go on. Here that transport itself, ended, answers a request through the gate's
    wrapper."""
    session_id = "a" * 32
    transport = StreamableHTTPServerTransport(mcp_session_id=session_id)
    await transport.terminate()
    headers = {**MCP_HEADERS, **JSON, "host": "127.0.0.1:1", "mcp-session-id": session_id}
    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": json.dumps(INIT).encode(), "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await transport.handle_request(scope, receive, in_error_shape(send))
    start, body = sent
    assert start["status"] == 404
    assert b"mcp-session-id" not in dict(start["headers"])
    message = (
        "Not Found: Session has been terminated: the MCP session has ended (idle timeout, a "
        "restart, or it lives on another replica): send initialize again and use the new "
        "Mcp-Session-Id"
    )
    assert json.loads(body["body"]) == refusal("not_found", message)


def test_no_refusal_names_a_session(served: Served) -> None:
    """The SDK sent the id of the session it had just made for (and dropped with) a refused
    request without one, and its own session's id with every refusal inside a session: a
    client could take up an id that answers nothing. A refusal names no session now."""
    user = "refuse-no-session-id"
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    loose = {**MCP_HEADERS, **bearer(user), **JSON}
    session = open_session(served, user)
    ended = open_session(served, user)
    assert httpx.delete(served.mcp, headers=ended).status_code == 200
    no_stream = {"Accept": "application/json"}
    no_token = {k: v for k, v in session.items() if k != "Authorization"}
    cases: list[tuple[str, str, dict[str, str], dict[str, Any], int]] = [
        # no session yet: the SDK made one for the request, refused it and dropped it
        ("a request before initialize", "POST", loose, call, 400),
        ("a notification before initialize", "POST", loose, note, 400),
        ("a GET without a session", "GET", loose, call, 400),
        ("a GET not accepting a stream", "GET", {**loose, **no_stream}, call, 406),
        ("another method", "PUT", loose, call, 405),
        # a session that does not exist, or not for this token
        ("an unknown session", "POST", {**session, "mcp-session-id": "f" * 32}, call, 404),
        ("an ended session", "POST", ended, call, 404),
        ("another user's session", "POST", {**session, **bearer("someone-else")}, call, 404),
        ("no token", "POST", no_token, call, 401),
        ("an expired token", "POST", {**session, **bearer(user, ttl=-60)}, call, 401),
        # a live session: the client sent its id, a refusal need not repeat it
        ("another method in a session", "PUT", session, call, 405),
        ("a GET not accepting a stream in a session", "GET", {**session, **no_stream}, call, 406),
    ]
    for what, method, headers, body, status in cases:
        response = httpx.request(method, served.mcp, headers=headers, json=body)
        assert response.status_code == status, (what, response.text)
        assert "mcp-session-id" not in response.headers, what
    # the open session still answers
    assert "tools" in answer(httpx.post(served.mcp, headers=session, json=call))["result"]
