"""Fixtures for the agent-tool, pool and session tests (see ``tests/sandbox/support.py``
and ``tests/agent/tool_support.py``)."""

from tests.agent.tool_support import clock, tools  # noqa: F401  (pytest finds fixtures by name)
from tests.sandbox.support import (  # noqa: F401  (pytest finds fixtures by name)
    anyio_backend,
    indexer,
    invalidated,
    logs,
    pool,
    provider,
    sandbox_root,
    sync,
    user_box,
)
