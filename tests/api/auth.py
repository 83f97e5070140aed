"""The Authorization header of the HTTP tests, written once: ``bearer(token)`` for a token a
test minted itself, ``signed(user, secret)`` for a server in another process whose secret
the test set, and the type of the ``auth`` fixture (``tests/api/conftest.py``), whose
``auth("alice")`` is the header of a valid token of that user."""

import time
from collections.abc import Callable

import jwt

AuthHeader = Callable[..., dict[str, str]]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_of(user: str, secret: str, ttl_s: float = 600) -> str:
    """An HS256 token of ``user`` signed with ``secret``, valid for ``ttl_s`` seconds."""
    return jwt.encode({"sub": user, "exp": int(time.time() + ttl_s)}, secret, "HS256")


def signed(user: str, secret: str, ttl_s: float = 600) -> dict[str, str]:
    """The header of ``token_of(user, secret, ttl_s)``."""
    return bearer(token_of(user, secret, ttl_s))
