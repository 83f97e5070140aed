"""Fixtures for the erase tests (defined in ``tests/memory/erase_support.py``)."""

from tests.memory.erase_support import mem  # noqa: F401  (pytest finds fixtures by name)
