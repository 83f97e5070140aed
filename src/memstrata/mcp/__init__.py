"""memstrata as an MCP server: stdio (``memstrata mcp --user U``) and streamable HTTP at
``/mcp`` inside ``memstrata serve``, behind the same bearer tokens as ``/api``.

A thin transport: every tool, resource and prompt calls the service the REST API or the
agent tools call (see :mod:`memstrata.mcp.tools`); the user is the stdio ``--user`` or the
bearer token's user claim, never an argument. ``docs/MCP.md`` is the reference.
"""

from memstrata.mcp.server import build_server

__all__ = ["build_server"]
