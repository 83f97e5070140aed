"""``memstrata token`` needs only the JWT settings; opening a database needs its URL.

In production, reading the settings refused an unset ``MEMSTRATA_DATABASE_URL`` for every
command, so minting a token, which opens no database, asked for one. The rule now applies
where a database is opened (``memstrata.config.unset_database_problem``): every other
command refuses before it starts anything, and so does ``Database.open`` for the library.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memstrata.api.auth import Authenticator
from memstrata.config import Settings
from memstrata.db.database import Database
from memstrata.errors import DatabaseSetupError
from tests.cli.cli_env import clean_env, run_cli

SECRET = "s" * 40
NEEDS_URL = (
    "MEMSTRATA_ENVIRONMENT=production needs MEMSTRATA_DATABASE_URL: the PostgreSQL URL every "
    "replica shares, or `embedded` for the embedded server in MEMSTRATA_DATA_DIR (one "
    "machine only)"
)


@pytest.fixture
def production(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Production with a JWT secret and no database URL; returns the data directory."""
    data = tmp_path / "data"
    clean_env(
        monkeypatch,
        tmp_path,
        {
            "MEMSTRATA_DATA_DIR": str(data),
            "MEMSTRATA_ENVIRONMENT": "production",
            "MEMSTRATA_JWT_SECRET": SECRET,
            "MEMSTRATA_LOG_JSON": "false",
        },
    )
    return data


def test_token_needs_no_database_url(production: Path) -> None:
    code, out, err = run_cli("token", "--user", "alice", "--ttl", "600")
    assert code == 0, err
    assert err.strip() == "signed with MEMSTRATA_JWT_SECRET"
    # A production server (which has its URL) with the same secret accepts it.
    server = Settings(environment="production", jwt_secret=SECRET, database_url="embedded")
    assert Authenticator.from_settings(server).user_id(out.strip()) == "alice"
    assert not production.exists()  # no embedded database, no development secret


@pytest.mark.parametrize(
    "command",
    [("serve", "--port", "0"), ("db", "status"), ("mcp", "--user", "alice")],
    ids=["serve", "db", "mcp"],
)
def test_commands_that_open_the_database_still_refuse(
    production: Path, command: tuple[str, ...]
) -> None:
    """Before anything starts: the local embedding server would take seconds to answer
    (MEMSTRATA_EMBEDDING_AUTOSTART is on), the embedded database longer."""
    started = time.monotonic()
    code, _out, err = run_cli(*command)
    assert code == 1
    assert err.strip().splitlines()[-1] == f"error: invalid configuration — {NEEDS_URL}"
    assert time.monotonic() - started < 5
    assert not (production / "pgdata").exists()


def test_the_library_refuses_to_open_a_database(tmp_path: Path) -> None:
    settings = Settings(environment="production", data_dir=tmp_path / "data", jwt_secret=SECRET)
    with pytest.raises(DatabaseSetupError) as refused:
        Database.open(settings)
    assert str(refused.value) == NEEDS_URL
    assert not (tmp_path / "data").exists()
