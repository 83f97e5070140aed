"""The refusals the docs' tables and sentences quote, word for word, are what the server
answers: docs/API.md's error table and its sentence on bodies not sent as JSON, and
docs/MCP.md's 401, its "Bad requests" tables (over HTTP) and its stdio table (over
``memstrata mcp``).

The docs describe each request in words; the requests below are built to match those
words, and everything compared (status, code, JSON-RPC code and id, message) is read from
the doc's row. A row that the docs drop, or reword so that it is not found, fails the test.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.docs.answers import mismatches, parse_pattern, text_matches
from tests.docs.served import BIN, DOC_URL, USER, Served, doc, prose

AUTH = '-H "Authorization: Bearer $TOKEN"'
JSON = "-H 'Content-Type: application/json'"
MCP = f"-X POST {AUTH} {JSON} -H 'Accept: application/json, text/event-stream'"
CUT = "@CUT@"  # in a request: the body cut off at the column the row's message names
INITIALIZE = (
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    '"capabilities":{},"clientInfo":{"name":"curl","version":"0"}}}'
)
PING_1_0 = '{"jsonrpc":"1.0","id":1,"method":"ping"}'
PING_OBJECT_ID = '{"jsonrpc":"2.0","id":{"n":6},"method":"ping"}'
NOT_A_MESSAGE = '{"jsonrpc":"2.0","id":1,"method":"ping","params":1}'
LONE_SURROGATE = (
    '{"jsonrpc":"2.0","id":7,"method":"tools/call",'
    '"params":{"name":"memory_write","arguments":{"content":"abcdef\\ud800"}}}'
)
TOOLS_LIST = '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
FILE = f"{DOC_URL}/api/config/agent-files/user"
BATCH = f"{DOC_URL}/api/memory/conversations/turns:batch"


def _post(body: str, *headers: str) -> str:
    return " ".join([MCP, *(f"-H '{h}'" for h in headers), f"-d '{body}'"])


def _cut_after_the_id(column: int) -> str:
    """A request cut off after its id, so that reading it as JSON ends at ``column``
    inside the object."""
    head = '{"jsonrpc": "2.0", "id":'
    return head + " " * (column - len(head) - 1) + "1"


def _column(message: str) -> int:
    found = re.search(r"at line 1 column (\d+)", message)
    assert found is not None, message
    return int(found[1])


def _row(name: str, header: str, key: str) -> list[str]:
    """The cells of the row whose first cell holds ``key``, in the table of ``name`` whose
    header row starts with ``header``."""
    lines = doc(name).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if key in cells[0]:
            return cells
    raise AssertionError(f"{name}: no row for {key!r} in the table {header!r}")


def _quoted(cell: str) -> list[str]:
    """The code spans of a cell, placeholders (`<message>`) left out."""
    return [s for s in re.findall(r"`([^`]+)`", cell) if not s.startswith("<")]


def _refused(run_stdout: str) -> tuple[int, dict[str, Any]]:
    """Status and body of a ``curl -s -w '\\n%{http_code}'`` answer."""
    body, _, status = run_stdout.rpartition("\n")
    return int(status), json.loads(body)


# --- docs/MCP.md, "Bad requests" -------------------------------------------------------

STDIO = "| line | answer |"
GATE = "| request | status, `code` | JSON-RPC | message |"
SDK = "| request | status, `code` | message |"


@dataclass(frozen=True)
class Refusal:
    """A row of one of /mcp's tables, and the request its first cell describes."""

    table: str
    row: str  # a part of the row's first cell
    curl: str  # curl's arguments after `curl -s`
    message: int = 0  # the row's first quoted message, or the one for another input


REFUSALS = [
    Refusal(GATE, "not sent as `Content-Type", f"-X POST {AUTH} -H 'Content-Type: text/plain'"),
    Refusal(GATE, "not sent as `Content-Type", f"-X POST {AUTH} -H 'Content-Type:'", 1),
    Refusal(GATE, "`Accept` does not list", f"-X POST {AUTH} {JSON} -H 'Accept: application/json'"),
    Refusal(GATE, "`Accept` does not list", f"-X POST {AUTH} {JSON} -H 'Accept:'", 1),
    Refusal(GATE, "a body that is not JSON", _post(CUT)),
    Refusal(GATE, "a JSON array", _post(f"[{INITIALIZE}]")),
    Refusal(GATE, "JSON, but no JSON-RPC 2.0", _post(PING_1_0)),
    Refusal(GATE, "JSON, but no JSON-RPC 2.0", _post("1"), 1),
    Refusal(GATE, "a request whose `id`", _post(PING_OBJECT_ID)),
    Refusal(GATE, "a string with a lone surrogate", _post(LONE_SURROGATE)),
    Refusal(SDK, "a session id this replica does not know", _post(TOOLS_LIST, "Mcp-Session-Id: 1")),
    Refusal(SDK, "without `Mcp-Session-Id`", _post(TOOLS_LIST, "MCP-Protocol-Version: 2025-06-18")),
    Refusal(SDK, "a method other than POST", f"-X PUT {AUTH} {JSON} -d '{{}}'"),
    Refusal(SDK, "GET or DELETE with", f"-X GET {AUTH} -H 'MCP-Protocol-Version: 2026-07-28'"),
    Refusal(SDK, "GET or DELETE with", f"-X DELETE {AUTH} -H 'MCP-Protocol-Version: 2026-07-28'"),
    Refusal(SDK, "a GET whose `Accept` lacks", f"-X GET {AUTH} -H 'Accept: application/json'"),
]


def _shown(refusal: Refusal) -> tuple[int, str, str | None, str]:
    """Status, code, JSON-RPC code (None: not in the table) and message of the row."""
    cells = _row("docs/MCP.md", refusal.table, refusal.row)
    found = re.fullmatch(r"(\d{3}) `(\w+)`", cells[1])
    assert found is not None, cells
    if refusal.table == SDK:
        return int(found[1]), found[2], None, _quoted(cells[2])[refusal.message]
    rpc = _quoted(cells[2])[0]
    if cells[3] == "the stdio table's message":
        return int(found[1]), found[2], rpc, _quoted(_row("docs/MCP.md", STDIO, refusal.row)[1])[-1]
    return int(found[1]), found[2], rpc, _quoted(cells[3])[refusal.message]


def _request(curl: str, message: str) -> str:
    return curl.replace(CUT, _cut_after_the_id(_column(message))) if CUT in curl else curl


def test_mcp_md_bad_requests(served: Served) -> None:
    shown = [_shown(r) for r in REFUSALS]
    commands = [
        f"curl -s -w '\\n%{{http_code}}' {_request(r.curl, message)} {DOC_URL}/mcp"
        for r, (_, _, _, message) in zip(REFUSALS, shown, strict=True)
    ]
    wrong = []
    for refusal, (status, code, rpc, message), run in zip(
        REFUSALS, shown, served.sh(*commands), strict=True
    ):
        answered, body = _refused(run.stdout)
        own_id = "the request's own `id`" in _row("docs/MCP.md", refusal.table, refusal.row)[2]
        expected_id = json.loads(re.findall(r'"id":(\w+)', refusal.curl)[-1]) if own_id else None
        checks = [
            (answered, status),
            (body["code"], code),
            (body["message"], body["detail"]),
            (body["error"]["message"], body["detail"]),
            (body["id"], expected_id),
        ]
        if rpc is not None:
            checks.append((body["error"]["code"], int(rpc)))
        if any(a != b for a, b in checks) or not text_matches(message, body["detail"]):
            wrong.append(f"{refusal.row!r}: {message!r} / {checks} shown, {body} answered")
    assert not wrong, "\n".join(wrong)


def test_mcp_md_stdio_bad_lines(served: Served, tmp_path: Path) -> None:
    """The stdio table, one line each, through ``memstrata mcp --user alice`` (its
    section's command) on the server's database."""
    keys = ["not JSON", "JSON, but no request", "a request whose `id`", "a lone surrogate"]
    rows = [_row("docs/MCP.md", STDIO, key)[1] for key in keys]
    lines = [
        _cut_after_the_id(_column(_quoted(rows[0])[-1])),
        NOT_A_MESSAGE,
        PING_OBJECT_ID,
        LONE_SURROGATE,
    ]
    # mcp.parse_error is INFO (the client's mistake), below the served env's WARNING.
    env = {**served.env, "MEMSTRATA_DATA_DIR": str(tmp_path), "MEMSTRATA_LOG_LEVEL": "INFO"}
    done = subprocess.run(
        [str(BIN / "memstrata"), "mcp", "--user", USER],
        input="\n".join(lines) + "\n",  # then end of input: the server stops
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == len(rows), done.stdout
    for row, line, answer in zip(rows, lines, answers, strict=True):
        rpc, *_, message = _quoted(row)
        own_id = "the request's own `id`" in row
        expected_id = json.loads(line)["id"] if own_id else None
        assert (answer["id"], answer["error"]["code"]) == (expected_id, int(rpc)), (row, answer)
        assert text_matches(message, answer["error"]["message"]), (row, answer)
    assert done.stderr.count("mcp.parse_error") == len(rows), done.stderr[-2000:]


def test_mcp_md_unauthorized(served: Served) -> None:
    """A missing token and a malformed one: the 401 body and WWW-Authenticate header the
    "Streamable HTTP" section shows."""
    text = prose("docs/MCP.md")
    body = re.search(r"same JSON body \(`(\{[^`]*\})`\)", text)
    rpc = re.search(r"The body is also a JSON-RPC error \(`([^`]*)`\)", text)
    header = re.search(r"same `WWW-Authenticate: (Bearer [^`\[]*)\[([^`\]]*)\]`", text)
    assert body is not None and rpc is not None and header is not None
    pattern = parse_pattern(body[1].replace('"..."', '"…"'))
    pattern |= parse_pattern("{" + rpc[1].replace("<detail>", '"…the same text…"') + "}")
    post = f"curl -si -X POST {JSON} -H 'Accept: application/json, text/event-stream'"
    missing, malformed = served.sh(
        f"{post} -d '{INITIALIZE}' {DOC_URL}/mcp",
        f"{post} -H 'Authorization: Bearer abc' -d '{INITIALIZE}' {DOC_URL}/mcp",
    )
    for run, challenge in ((missing, header[1]), (malformed, header[1] + header[2])):
        answer = run.answer()
        assert answer.status == "HTTP/1.1 401 Unauthorized", run.stdout
        assert not mismatches(pattern, json.loads(answer.body)), (pattern, answer.body)
        (sent,) = [v for n, v in answer.headers if n == "www-authenticate"]
        assert text_matches(challenge.replace("...", "…"), sent), (challenge, sent)


# --- docs/API.md, "Errors" -------------------------------------------------------------


def test_api_md_errors(served: Served, tmp_path: Path) -> None:
    """Each row whose ``detail`` is a text (not `<message>`) and whose request can be
    made here; the 503s and the 500 need a fault, and are tested where it is injected."""
    big = tmp_path / "big.json"
    quoted_size = re.search(r"request body is (\d+) bytes", doc("docs/API.md"))
    assert quoted_size is not None
    big.write_bytes(b" " * int(quoted_size[1]))
    requests = {
        "`invalid_file_name`": f"{AUTH} {DOC_URL}/api/config/agent-files/bogus",
        "`not_found`": f"{AUTH} {DOC_URL}/api/no-such-path",
        "`method_not_allowed`": f"-X DELETE {AUTH} {DOC_URL}/api/config/skills",
        # A batch of turns: a memory file's PUT takes more (a file at its limit, escaped).
        "`payload_too_large`": f"-X POST {AUTH} {JSON} --data-binary @{big} {BATCH}",
        "`validation_error`": f"-X PUT {AUTH} {JSON} -d '{{}}' {FILE}",
    }
    runs = served.sh(*(f"curl -s -w '\\n%{{http_code}}' {r}" for r in requests.values()))
    wrong = []
    for code, run in zip(requests, runs, strict=True):
        cells = _api_error_row(code)
        status, body = _refused(run.stdout)
        detail, *rest = _quoted(cells[3])
        message = rest[-1] if rest[:1] == ["message"] else body["detail"]
        shown = (int(cells[0]), code.strip("`"), detail, message)
        if (status, body["code"], body["detail"], body["message"]) != shown:
            wrong.append(f"{shown} shown, {status} {body} answered")
    assert not wrong, "\n".join(wrong)


def _api_error_row(code: str) -> list[str]:
    for line in doc("docs/API.md").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| 4") and len(cells) == 4 and cells[1] == code:
            return cells
    raise AssertionError(f"docs/API.md: no row for {code} in the error table")


def test_api_md_a_body_not_sent_as_json(served: Served) -> None:
    """ "A body sent with another type — curl's `-d` default …, `text/plain` — or with none
    is not parsed, and is a 422 whose message says `…`"."""
    said = re.search(
        r"is a 422 whose message is `([^`]*the body was sent as '([^']+)', not as JSON: [^`]*)`",
        prose("docs/API.md"),
    )
    assert said is not None
    put = f"curl -s -w '\\n%{{http_code}}' -X PUT {AUTH}"
    content = """-d '{"content": "x"}'"""
    runs = served.sh(
        f"{put} -H 'Content-Type: {said[2]}' {content} {FILE}",
        f"{put} {content} {FILE}",  # curl's -d default
        f"{put} -H 'Content-Type:' {content} {FILE}",
    )
    # The sentence quotes the first; the others name their type (or none) in its place.
    quoted = [said[1], said[1].replace(f"as '{said[2]}'", "…")]
    for run, message in zip(runs, [quoted[0], quoted[1], quoted[1]], strict=True):
        status, body = _refused(run.stdout)
        assert (status, body["code"]) == (422, "validation_error"), run.stdout
        assert text_matches(message, body["message"]), (message, body)
