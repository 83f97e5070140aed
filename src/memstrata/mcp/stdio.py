"""MCP over stdin/stdout for one user (``memstrata mcp --user U``).

Local use: the process owner is trusted and names the user; every call is scoped to it.
Nothing but protocol messages may reach stdout: logs go to stderr, and while serving the
SDK points fd 1 at stderr so stray output from libraries or children cannot corrupt the
stream.
"""

from __future__ import annotations

from mcp.server.stdio import stdio_server

from memstrata.mcp.server import build_server
from memstrata.memory.kinds import validate_user_id
from memstrata.runtime import Memstrata


async def serve_stdio(mem: Memstrata, user_id: str) -> None:
    """Answer MCP requests on stdin/stdout as ``user_id`` until stdin closes."""
    user = validate_user_id(user_id)
    server = build_server(lambda: mem, lambda _ctx: user)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
