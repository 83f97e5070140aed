"""Fixtures for the agent-tool, pool and session tests (see ``tests/sandbox/support.py``)."""

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
