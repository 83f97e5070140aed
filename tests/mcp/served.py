"""What the tests that run ``memstrata serve`` for ``/mcp`` share: its JWT secret, tokens
and bearer headers signed with it, and the process environment that goes with them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import jwt

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
