"""What the tests that run ``memstrata serve`` for ``/mcp`` share: its JWT secret, tokens
and bearer headers signed with it, and the process environment that goes with them."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jwt
import pytest

from memstrata.retrieval.local_server import LocalEmbeddingServer
from memstrata.serve_process import running_serve

SECRET = "mcp-http-test-secret-0123456789abcdef"


def token(user: str, ttl: int = 600) -> str:
    now = int(time.time())
    return jwt.encode({"sub": user, "iat": now - 5, "exp": now + ttl}, SECRET, "HS256")


def bearer(user: str, ttl: int = 600) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, ttl)}"}


def serve_env(data: Path, pg_url: str, **settings: str) -> dict[str, str]:
    """This process's environment without its MEMSTRATA_* variables, plus a serve on
    ``pg_url`` with its state in ``data``, accepting :data:`SECRET`'s tokens, and
    ``settings`` (full variable names)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_ENVIRONMENT="development",
        MEMSTRATA_JWT_SECRET=SECRET,
        MEMSTRATA_LOG_LEVEL="WARNING",
        **settings,
    )
    return env


def embedding_settings(embedding: LocalEmbeddingServer) -> dict[str, str]:
    """The settings that point a process at the tests' local embedding server."""
    return {
        "MEMSTRATA_EMBEDDING_MODELS": json.dumps([embedding.model_spec.model_dump()]),
        "MEMSTRATA_EMBEDDING_MODEL": embedding.model_spec.name,
    }


@contextmanager
def served(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    pg_url: str,
    embedding: LocalEmbeddingServer,
) -> Iterator[str]:
    """A ``memstrata serve`` on the tests' database and embedding server (its stderr in
    its data directory); yields its base URL."""
    data = tmp_path_factory.mktemp(name)
    env = serve_env(data, pg_url, **embedding_settings(embedding))
    with running_serve(env, timeout_s=60, stderr=(data / "stderr.log").open("w")) as url:
        yield url


def stdio_env(
    data: Path, pg_url: str, embedding: LocalEmbeddingServer, **settings: str
) -> dict[str, str]:
    """This process's environment without its MEMSTRATA_* variables, plus ``memstrata
    mcp`` over stdio on ``pg_url`` with its state in ``data``, and ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSTRATA_")}
    env.update(
        MEMSTRATA_DATA_DIR=str(data),
        MEMSTRATA_DATABASE_URL=pg_url,
        MEMSTRATA_ENVIRONMENT="development",
        **embedding_settings(embedding),
        **settings,
    )
    return env
