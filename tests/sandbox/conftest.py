"""Fixtures for the sync and dirty-tracking tests (defined in ``tests/sandbox/support.py``)."""

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
