"""``memstrata mcp --user U`` as a real subprocess, driven by the SDK's stdio client.

If anything but protocol messages reached stdout (a banner, a log line, a child's output),
the client could not parse the stream and these calls would fail.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.retrieval.local_server import LocalEmbeddingServer
from tests.cli.cli_env import start_mcp
from tests.mcp.messages import INIT
from tests.mcp.served import stdio_env
from tests.mcp.stdio_driver import read_answers

pytestmark = pytest.mark.anyio


def _env(tmp_path: Path, pg_url: str, embedding: LocalEmbeddingServer) -> dict[str, str]:
    # logs are on: they must all go to stderr
    return stdio_env(tmp_path / "data", pg_url, embedding, MEMSTRATA_LOG_LEVEL="INFO")


@pytest.mark.timeout(120)
async def test_stdio_server_answers_for_its_user_only(
    tmp_path: Path, db: object, pg_url: str, embedding_server: LocalEmbeddingServer
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from memstrata.cli import main; main()", "mcp", "--user", "stdio-alice"],
        env=_env(tmp_path, pg_url, embedding_server),
    )
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"memory_search", "memory_write", "record_memory", "skill_set"} <= names
        recorded = await client.call_tool("record_memory", {"content": "Keeps bees in Lyon"})
        assert not recorded.is_error, recorded.content
        found = await client.call_tool("memory_search", {"query": "bees", "top_k": 3})
        assert found.structured_content is not None
        data = found.structured_content
        assert data["mode"] == "hybrid" or "query embedding failed" in data["warnings"][0]
        hit = found.structured_content["hits"][0]
        assert hit["file_path"] == "MEMORY.md" and "Keeps bees in Lyon" in hit["text"]
        read = await client.read_resource("memstrata://files/memory")
        assert "Keeps bees in Lyon" in read.contents[0].text  # type: ignore[union-attr]
    # The files belong to --user and to nobody else.
    sandbox = tmp_path / "data" / "sandboxes"
    assert any("Keeps bees in Lyon" in p.read_text() for p in sandbox.rglob("MEMORY.md"))


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--user", ""], 1, "error: --user: user_id must be a non-empty string"),
        (["--user", "x" * 101], 1, "error: --user: user_id is longer than 100 characters"),
        ([], 2, "Missing option '--user'"),
    ],
)
def test_stdio_bad_user(args: list[str], code: int, message: str) -> None:
    result = CliRunner().invoke(build_app(), ["mcp", *args])
    assert result.exit_code == code
    assert message in result.stderr
    assert result.stdout == ""


# A lone surrogate escape: valid JSON grammar, but no UTF-8 text; the SDK's parser refuses it.
SURROGATE_CALL = (
    '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"record_memory",'
    '"arguments":{"content":"likes \\ud800 tea"}}}'
)
UNCLOSED = '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"skills_list"}'
NOT_JSONRPC = '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"oops"}'
# Parsed by the SDK as notifications (the id ignored), so never answered.
FRACTION_ID = '{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}'
OBJECT_ID = '{"jsonrpc":"2.0","id":{"n":6},"method":"ping"}'


@pytest.mark.timeout(120)
def test_stdio_answers_lines_it_cannot_parse_and_goes_on(tmp_path: Path, pg_url: str) -> None:
    """The SDK turned each such line into an exception that its server logged at debug
    level and dropped: no answer (the client waited for ever) and no log."""
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    lines = [json.dumps(INIT), json.dumps(initialized), SURROGATE_CALL, UNCLOSED, "   "]
    lines += [NOT_JSONRPC, FRACTION_ID, OBJECT_ID, '{"jsonrpc":"2.0","id":4,"method":"tools/list"}']
    process, log = start_mcp(
        tmp_path,
        "stdio-carol",
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_EMBEDDING_AUTOSTART="false",
        MEMSTRATA_LOG_LEVEL="INFO",
    )
    try:
        assert process.stdin is not None
        process.stdin.write("".join(line + "\n" for line in lines).encode())
        process.stdin.flush()  # and stdin stays open, as a client keeps it
        answers = read_answers(process, until_id=4, timeout_s=60)
    finally:
        process.kill()
        process.communicate()
    stderr_text = log.read_text(errors="replace")
    assert [a.get("id") for a in answers] == [1, 2, None, None, None, None, 4], (
        answers or stderr_text
    )
    # alembic's plugin set-up, at INFO on every start (serve and db never showed it).
    assert "alembic.runtime.plugins" not in stderr_text, stderr_text
    surrogate, unclosed, not_jsonrpc, fraction_id, object_id = (a["error"] for a in answers[1:6])
    assert surrogate == {
        "code": -32700,
        "message": "params.arguments.content is not valid Unicode: it contains a lone "
        "surrogate ('\\ud800' at character 7); send a complete UTF-16 surrogate pair "
        "(such as \\ud83d\\ude00) or the character itself",
    }
    assert unclosed == {
        "code": -32700,
        "message": "line is not valid JSON: EOF while parsing an object at line 1 column 77; "
        "send each JSON-RPC message as one line of JSON",
    }
    assert not_jsonrpc == {
        "code": -32600,
        "message": "line is not a JSON-RPC 2.0 request, notification or response: "
        "params: Input should be an object",
    }
    for bad_id, kind in (
        (fraction_id, "a number with a fraction or an exponent"),
        (object_id, "an object"),
    ):
        assert bad_id == {
            "code": -32600,
            "message": f"id must be a string or an integer, not {kind}: give each request an "
            'id such as 1 or "req-1" (a message without an id is a notification, which gets '
            "no answer)",
        }
    assert {t["name"] for t in answers[6]["result"]["tools"]} >= {"record_memory"}
    events = [json.loads(line) for line in stderr_text.splitlines() if line.startswith("{")]
    warned = [e for e in events if e.get("event") == "mcp.parse_error"]
    assert [(e["level"], e["user_id"], e["error"]) for e in warned] == [
        ("info", "stdio-carol", error["message"])  # the client's mistake, as REST's 4xx
        for error in (surrogate, unclosed, not_jsonrpc, fraction_id, object_id)
    ]
