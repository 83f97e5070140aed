"""``memstrata serve`` closes a connection whose request headers have not all arrived
within ``MEMSTRATA_HEADER_TIMEOUT_S``, and answers 408 to a request whose body stops
arriving for ``MEMSTRATA_BODY_TIMEOUT_S``: one real server (1 s and 4 s) for the module,
raw sockets.

Without them, a connection that sent half a request line, or trickled its headers a byte
at a time, or stopped in the middle of its body, stayed open for ever, and a few hundred
of them held every connection slot (a slowloris: everyone else got 503). Neither cuts
what is not late: a body that keeps coming however slowly, the idle wait between two
requests (uvicorn's keep-alive timeout, 5 s) and an open /mcp GET stream stay open.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from typer.testing import CliRunner

from memstrata.cli import build_app
from memstrata.serve_process import free_port, start_serve, stop_serve, wait_ready
from tests.mcp.messages import INIT, MCP_HEADERS

pytestmark = pytest.mark.timeout(120)

SECRET = "header-timeout-test-secret-0123456789abcdef"
TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 4.0
# Longer than the header timeout, shorter than the body and keep-alive (5 s) timeouts.
PAUSE_S = 2.5
# How late the close may come on a busy two-core machine.
LATE_S = 4.0


class Served:
    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def events(self, name: str) -> list[dict[str, object]]:
        lines = self.log.read_text(errors="replace").splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        return [r for r in records if r.get("event") == name]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("header-timeout")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")},
        "MEMSTRATA_DATA_DIR": str(home / "data"),
        "MEMSTRATA_ENVIRONMENT": "test",
        "MEMSTRATA_DATABASE_URL": pg_url,
        "MEMSTRATA_JWT_SECRET": SECRET,
        "MEMSTRATA_EMBEDDING_AUTOSTART": "false",
        "MEMSTRATA_HEADER_TIMEOUT_S": str(TIMEOUT_S),
        "MEMSTRATA_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    }
    port = free_port()
    log = home / "serve.log"
    with log.open("wb") as output:
        process: subprocess.Popen[bytes] = start_serve(env, port, stdout=output, stderr=output)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}", timeout_s=90, output=log.read_text)
        yield Served(port, log)
    finally:
        stop_serve(process)


def bearer() -> str:
    return jwt.encode({"sub": "slow-alice", "exp": int(time.time()) + 600}, SECRET, "HS256")


def closed_after(sock: socket.socket, within_s: float) -> tuple[bool, bytes]:
    """Whether the server closed ``sock`` within ``within_s``, and what it sent first."""
    received = b""
    deadline = time.monotonic() + within_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            break
        except ConnectionResetError:
            return True, received
        if not data:
            return True, received
        received += data
    return False, received


def response(sock: socket.socket) -> tuple[int, bytes]:
    """One response with a Content-Length from ``sock``: its status and body."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"closed before a response; got {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(fields["content-length"]):
        body += sock.recv(4096)
    return int(lines[0].split()[1]), body


def healthz(port: int) -> bytes:
    return f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


@pytest.mark.parametrize("sent", [b"", b"GET /heal"], ids=["nothing", "half-a-request-line"])
def test_a_connection_without_its_headers_is_closed(served: Served, sent: bytes) -> None:
    with served.connect() as sock:
        started = time.monotonic()
        sock.sendall(sent)
        closed, answer = closed_after(sock, TIMEOUT_S + LATE_S)
        took = time.monotonic() - started
    assert (closed, answer) == (True, b""), f"open after {took:.1f} s, answer {answer!r}"
    assert TIMEOUT_S - 0.1 <= took <= TIMEOUT_S + LATE_S, took
    time.sleep(0.2)  # the log line is written just before the close
    logged = [e for e in served.events("http.header_timeout") if e["received_bytes"] == len(sent)]
    assert logged and logged[-1]["level"] == "info", served.log.read_text()[-2000:]
    assert str(logged[-1]["client"]).startswith("127.0.0.1:")
    assert logged[-1]["timeout_s"] == TIMEOUT_S
    assert logged[-1]["cause"] == ("no request" if not sent else "request headers incomplete")


def test_headers_trickled_slower_than_the_bound_are_cut_off(served: Served) -> None:
    request = healthz(served.port)
    before = _metric(served.url, "memstrata_http_header_timeouts_total")
    with served.connect() as sock:
        started = time.monotonic()
        sent = 0
        while sent < len(request):  # one byte every 0.2 s: 7 s for the whole request
            try:
                sock.sendall(request[sent : sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
            if select.select([sock], [], [], 0.2)[0]:  # an answer, or the close
                break
        closed, answer = closed_after(sock, LATE_S)
        took = time.monotonic() - started
    assert (closed, answer) == (True, b""), (
        f"after {sent} of {len(request)} bytes in {took:.1f} s: closed {closed}, {answer!r}"
    )
    assert sent < len(request) and took <= TIMEOUT_S + LATE_S, (sent, took)
    assert _metric(served.url, "memstrata_http_header_timeouts_total") == before + 1


def test_a_kept_alive_connection_idle_between_requests_is_not_cut(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(healthz(served.port))
        assert response(sock)[0] == 200
        time.sleep(PAUSE_S)  # idle: the keep-alive timeout's business, not this one's
        sock.sendall(healthz(served.port))
        assert response(sock)[0] == 200
        # The next request's timer starts at its first byte.
        sock.sendall(b"GET /heal")
        assert closed_after(sock, TIMEOUT_S + LATE_S) == (True, b"")


def search_request(port: int, body: bytes) -> bytes:
    """A search request's head, announcing ``body``'s length."""
    return (
        f"POST /api/memory/search HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {bearer()}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()


def test_a_body_paused_less_than_the_body_timeout_is_not_cut(served: Served) -> None:
    body = json.dumps({"query": "boats and rivers", "top_k": 3}).encode()
    with served.connect() as sock:
        sock.sendall(search_request(served.port, body) + body[:5])
        assert closed_after(sock, PAUSE_S) == (False, b""), "closed while the body came"
        sock.sendall(body[5:])
        status, answer = response(sock)
    assert status == 200, answer


def test_a_body_that_keeps_coming_is_served_however_long_it_takes(served: Served) -> None:
    body = json.dumps({"query": "tea", "top_k": 1}).encode()
    gap_s = BODY_TIMEOUT_S / 8
    with served.connect() as sock:
        sock.sendall(search_request(served.port, body))
        started = time.monotonic()
        for byte in body:  # a byte every gap_s: the whole body takes longer than the bound
            time.sleep(gap_s)
            sock.sendall(bytes([byte]))
        took = time.monotonic() - started
        status, answer = response(sock)
    assert took > BODY_TIMEOUT_S, took
    assert status == 200, answer


def test_a_body_that_stops_arriving_gets_408_and_the_close(served: Served) -> None:
    body = json.dumps({"query": "boats and rivers", "top_k": 3}).encode()
    head = search_request(served.port, body)
    before = _metric(served.url, "memstrata_http_body_timeouts_total")
    with served.connect() as sock:
        started = time.monotonic()
        sock.sendall(head + body[:5])
        sock.settimeout(BODY_TIMEOUT_S + LATE_S)
        status, answer = response(sock)
        took = time.monotonic() - started
        closed, more = closed_after(sock, LATE_S)
    assert status == 408, answer
    assert BODY_TIMEOUT_S - 0.1 <= took <= BODY_TIMEOUT_S + LATE_S, took
    assert (closed, more) == (True, b"")
    said = json.loads(answer)
    assert said["code"] == "request_timeout"
    assert "MEMSTRATA_BODY_TIMEOUT_S" in said["message"] and "4 s" in said["message"], said
    assert _metric(served.url, "memstrata_http_body_timeouts_total") == before + 1
    time.sleep(0.2)
    logged = served.events("http.body_timeout")
    assert logged and logged[-1]["level"] == "info", served.log.read_text()[-2000:]
    assert logged[-1]["path"] == "/api/memory/search" and logged[-1]["method"] == "POST"
    assert logged[-1]["received_bytes"] == len(head) + 5
    assert logged[-1]["timeout_s"] == BODY_TIMEOUT_S
    # The request's task saw a hang-up, not an error: no traceback, and the server serves.
    assert "Traceback" not in served.log.read_text()
    assert httpx.get(f"{served.url}/healthz", timeout=10).status_code == 200


def test_an_open_mcp_stream_is_not_cut(served: Served) -> None:
    auth = {"Authorization": f"Bearer {bearer()}"}
    opened = httpx.post(f"{served.url}/mcp", headers={**MCP_HEADERS, **auth}, json=INIT)
    assert opened.status_code == 200, opened.text
    session = {
        **auth,
        "Mcp-Session-Id": opened.headers["mcp-session-id"],
        "Mcp-Protocol-Version": "2025-06-18",
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    ready = httpx.post(f"{served.url}/mcp", headers={**MCP_HEADERS, **session}, json=note)
    assert ready.status_code == 202, ready.text
    fields = "".join(f"{name}: {value}\r\n" for name, value in session.items())
    with served.connect() as sock:
        sock.sendall(
            f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n"
            f"Accept: text/event-stream\r\n{fields}\r\n".encode()
        )
        sock.settimeout(10)
        head = sock.recv(4096)
        assert head.startswith(b"HTTP/1.1 200"), head
        assert b"text/event-stream" in head.lower(), head
        assert not closed_after(sock, PAUSE_S)[0], "the stream was closed"


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "20s"])
@pytest.mark.parametrize("name", ["MEMSTRATA_HEADER_TIMEOUT_S", "MEMSTRATA_BODY_TIMEOUT_S"])
def test_a_bad_read_timeout_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, value: str
) -> None:
    for variable in list(os.environ):
        if variable.startswith("MEMSTRATA_"):
            monkeypatch.delenv(variable)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MEMSTRATA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(name, value)
    result = CliRunner().invoke(build_app(), ["token", "--user", "a"])
    said = result.output.strip()
    assert result.exit_code == 1, said
    assert said.startswith(f"error: invalid configuration — {name}: "), said
    assert len(said.splitlines()) == 1


def _metric(url: str, name: str) -> float:
    """A counter as /metrics shows it now (0 without it)."""
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return 0.0
