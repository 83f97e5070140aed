"""The type of the ``auth`` fixture (``tests/api/conftest.py``): ``auth("alice")`` gives the
Authorization header of a valid token of that user."""

from collections.abc import Callable

AuthHeader = Callable[..., dict[str, str]]
