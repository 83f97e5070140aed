"""The Authorization header of the HTTP tests, written once: ``bearer(token)`` for a token a
test minted itself, and the type of the ``auth`` fixture (``tests/api/conftest.py``), whose
``auth("alice")`` is the header of a valid token of that user."""

from collections.abc import Callable

AuthHeader = Callable[..., dict[str, str]]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
