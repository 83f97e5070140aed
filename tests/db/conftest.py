"""Scratch databases on the session's embedded server, dropped after the test; a valid
token's header (tests/api/conftest.py's ``auth``, out of reach of tests/db)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, make_url, text

from memstrata.config import Settings
from tests.api.auth import AuthHeader, signed

ScratchFactory = Callable[[str], str]


@pytest.fixture
def scratch_database(pg_url: str) -> Iterator[ScratchFactory]:
    """``scratch_database("name")`` → the URL of a new, empty database (no extensions)."""
    admin = create_engine(make_url(pg_url).set(database="postgres"), isolation_level="AUTOCOMMIT")
    made: list[str] = []

    def make(name: str) -> str:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        made.append(name)
        return make_url(pg_url).set(database=name).render_as_string(hide_password=False)

    yield make
    with admin.connect() as conn:
        for name in made:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def auth(settings: Settings) -> AuthHeader:
    """``auth("alice")``: a valid token's header for the test's settings."""

    def header(user: str = "alice") -> dict[str, str]:
        return signed(user, settings.jwt_secret)

    return header
