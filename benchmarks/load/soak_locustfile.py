"""The soak's traffic (run by ``benchmarks/load/soak.py``; not alone): the load test's mix
(``locustfile.py``: search, single turns, memory-file reads, If-Match writes) plus what a
platform also sends over hours — batch turns, MCP sessions over streamable HTTP and the
web page's static files — with every request's time written to ``LOAD_EVENTS`` (CSV:
epoch seconds, request name, milliseconds, 1 if it failed), so the driver can report the
latency of each endpoint per minute.

Added weights (the load test's: search 5, turn 2, file read 2, If-Match write 1): batch
of five turns 1, one MCP session 1, web page 1. An MCP session is what an agent client
opens and closes: ``initialize``, ``notifications/initialized``, one ``tools/call``
(``memory_search``, or ``record_memory`` one time in three: a sandbox opened and closed
for the call) and ``DELETE``; one session in ten is abandoned instead of closed, as a
crashed client leaves it, for the idle timeout to end.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from locust import events, task

sys.path.insert(0, str(Path(__file__).parent))  # Locust loads this file by path
from locustfile import DATA, MemstrataClient

MCP_VERSION = "2025-11-25"  # the initialize-handshake protocol: a session per client
WEB_ASSETS = ("app.js", "app.css", "api.js", "search.js", "icon.svg")
_events = open(os.environ["LOAD_EVENTS"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115


@events.request.add_listener
def _record(request_type: str, name: str, response_time: float, exception: Any, **_: Any) -> None:
    failed = 1 if exception else 0
    _events.write(f"{time.time():.3f},{request_type} {name},{response_time:.1f},{failed}\n")


def _rpc_result(response: Any) -> dict[str, Any]:
    """The JSON-RPC answer of a POST: a JSON body, or the one ``data:`` event of an SSE
    stream (the SDK's default answer format)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])  # type: ignore[no-any-return]
        return {}
    return response.json()  # type: ignore[no-any-return]


class SoakClient(MemstrataClient):
    def on_start(self) -> None:
        super().on_start()
        self.batches = 0
        self.sessions = 0

    @task(1)
    def ingest_batch(self) -> None:
        user = self.rng.choice(self.users)
        self.batches += 1
        session = f"{self.session}-b{self.batches}"
        turns = [
            {"session_id": session, "turn_index": i, "user_message": m, "assistant_reply": r}
            for i, (m, r) in enumerate(self.rng.choice(DATA["turns"]) for _ in range(5))
        ]
        with self.client.post(
            self._url("/api/memory/conversations/turns:batch"),
            json={"turns": turns},
            headers=self._auth(user),
            name="ingest batch (5 turns)",
            catch_response=True,
        ) as response:
            if response.ok and response.json()["embedding_failed"]:
                response.failure(f"stored without vectors: {response.json()}")

    @task(1)
    def mcp_session(self) -> None:
        user = self.rng.choice(self.users)
        url = self._url("/mcp")
        headers = {**self._auth(user), "Accept": "application/json, text/event-stream"}
        self.sessions += 1
        hello = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": MCP_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "memstrata-soak", "version": "1"},
            },
        }
        opened = self.client.post(url, json=hello, headers=headers, name="mcp initialize")
        session_id = opened.headers.get("mcp-session-id")
        if not opened.ok or not session_id:
            return
        headers |= {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": MCP_VERSION}
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        self.client.post(url, json=done, headers=headers, name="mcp initialized")
        if self.sessions % 3 == 0:
            tool = "record_memory"
            arguments = {"content": self.rng.choice(DATA["turns"])[0][:200]}
        else:
            tool = "memory_search"
            arguments = {"query": self.rng.choice(DATA["queries"]), "top_k": 5}
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        with self.client.post(
            url, json=call, headers=headers, name=f"mcp {tool}", catch_response=True
        ) as response:
            answer = _rpc_result(response) if response.ok else {}
            if response.ok and ("error" in answer or answer.get("result", {}).get("isError")):
                response.failure(f"tool error: {str(answer)[:300]}")
        if self.sessions % 10 != 0:  # one in ten abandoned, as a crashed client leaves it
            self.client.delete(url, headers=headers, name="mcp DELETE")

    @task(1)
    def web_page(self) -> None:
        self.client.get(self._url("/"), name="web page")
        asset = self.rng.choice(WEB_ASSETS)
        self.client.get(self._url(f"/web/{asset}"), name="web asset")
