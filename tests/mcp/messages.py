"""Raw MCP JSON-RPC messages for tests that talk to a server without the SDK's client
(the streamable HTTP route's auth checks, the stdio server's shutdown)."""

from __future__ import annotations

from typing import Any

# What a streamable HTTP client must accept.
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}

# The first message of every MCP session.
INIT: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}
