"""``memstrata mcp --user U``: the MCP server over stdio, on the same embedded defaults as
``memstrata serve`` (embedded PostgreSQL unless ``MEMSTRATA_DATABASE_URL`` is set, the
local embedding server unless an embedding API is configured)."""

from __future__ import annotations

from contextlib import suppress
from typing import Annotated

import anyio
import typer

from memstrata.cli.app import app, fail, load_settings, open_runtime
from memstrata.errors import EmbeddingError, InvalidUserIdError
from memstrata.memory.kinds import validate_user_id


@app.command("mcp")
def mcp_stdio(
    user: Annotated[
        str, typer.Option("--user", "-u", help="The user whose memory this server serves.")
    ],
) -> None:
    """Serve MCP over stdin/stdout for one user (for clients that launch a command).

    Logs go to stderr. For MCP over HTTP with bearer tokens use `memstrata serve` (/mcp).
    """
    try:
        validate_user_id(user)
    except InvalidUserIdError as exc:
        fail(f"--user: {exc}")
    settings = load_settings(log_level=None)
    from memstrata.mcp.stdio import serve_stdio

    try:
        with open_runtime(settings) as mem, suppress(KeyboardInterrupt):
            anyio.run(serve_stdio, mem, user)
    except EmbeddingError as exc:
        fail(f"{exc}; set MEMSTRATA_EMBEDDING_AUTOSTART=false to search with BM25 only")
